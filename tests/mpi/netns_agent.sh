#!/bin/sh
# netns_agent.sh [-OPT...] HOST COMMAND...: the remote agent in place of
# ssh (Open MPI's plm_rsh_agent, MPICH hydra's -launcher-exec) for
# tests/mpi/mpi_netns.sh, where the "hosts" are network namespaces: runs
# COMMAND (Open MPI's orted or hydra's proxy, quoted for a shell as ssh
# would pass it) in HOST's namespace, under urvt-run with URVT_NETDEV set to
# that namespace's interface, so that every rank it starts there shares the
# namespace's address.
#   MPI_NETNS_HOSTS="ADDR=NETNS=DEV ..."   which namespace and interface
#                                           each host address names
#   URVT_RUN                               the urvt-run to use
# (MPICH's hydra passes ssh's -x before the host: skip options)
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
host=${1:?}
shift
for m in ${MPI_NETNS_HOSTS:-}; do
	addr=${m%%=*} rest=${m#*=}
	if [ "$addr" = "$host" ]; then
		exec ip netns exec "${rest%%=*}" env URVT_NETDEV="${rest#*=}" \
			"${URVT_RUN:?}" sh -c "$*"
	fi
done
echo "netns_agent.sh: no namespace for host $host (MPI_NETNS_HOSTS=${MPI_NETNS_HOSTS:-})" >&2
exit 1
