#!/bin/sh
# mpi_netns.sh MPI_CHECK SLOT TLS: one host, one RoCE identity
# (docs/host-identity.md) under Open MPI. Two network namespaces made here,
# joined by a veth pair (10.(240+SLOT).0.1 and .2), are two hosts with two
# ranks each: mpirun runs in the first under urvt-run with URVT_NETDEV=its
# veth and starts that host's two ranks itself; it reaches the second
# through tests/mpi/netns_agent.sh (plm_rsh_agent, in place of ssh), which
# starts an orted there under urvt-run with URVT_NETDEV=the other veth. So
# both ranks of a namespace open urvt0 at the same address (UDP port 4791
# shared, steered by QPN) and UCX (UCX_TLS=TLS, UCX_NET_DEVICES=urvt0:1)
# carries MPI's traffic within a namespace and across the veth; mpirun's own
# out-of-band TCP goes over the veth addresses. mpi_check (--map-by node:
# ranks 0 and 2 in the first namespace, 1 and 3 in the second) checks every
# byte: the 1 MiB ping-pong between ranks 0 and 1 crosses the veth, every
# pair of ranks exchanges 4 KiB and 256 KiB. Passes when mpi_check reports
# 0 errors, its ranks ran two per namespace, each rank's counters show the
# namespace's address, traffic over UDP (and, for ranks 0 and 1, the
# ping-pong's 10 MB; over RC QPs with rc_verbs). Exit 77 unless root with
# iproute2 and the MPI's mpirun.
# MPI_FLAVOR=mpich: MPICH 4 (ch4:ucx) instead, hydra's ssh launcher with
# netns_agent.sh as its -launcher-exec (its proxy in the second namespace),
# hydra's control connections over the first veth (-iface), hosts
# ADDR:1 each so that ranks alternate; MPIR_CVAR_NOLOCAL=1 as in mpi.sh.
# Only the variables named are passed to the ranks (-genvlist): each keeps
# its namespace's URVT_NETDEV.
# URVT_SHM=0 (exported, so every rank has it): the two ranks of a namespace
# talk over UDP too, to their own shared address, the kernel steering each
# datagram to the sibling that owns its QP; checked that no rank used shm.
set -u
prog=$1 slot=$2 tls=$3
here=$(cd "$(dirname "$0")" && pwd)
run=${URVT_RUN:-$here/../../build/bin/urvt-run}
stat=${URVT_STAT:-$(dirname "$run")/urvt-stat}
flavor=${MPI_FLAVOR:-openmpi}
mpirun=mpirun tag=mpi_check unit=ranks spml=
[ "$flavor" = mpich ] && mpirun=mpirun.mpich
# MPI_FLAVOR=oshmem: Open MPI's OpenSHMEM (oshrun, spml ucx) runs shmem_check
[ "$flavor" = oshmem ] && mpirun=oshrun tag=shmem_check unit=PEs spml="--mca spml ucx"
command -v $mpirun >/dev/null || { echo "SKIP: $mpirun ($flavor) missing"; exit 77; }
. "$here/../lib/netns.sh"
a=urvt-mpa$slot b=urvt-mpb$slot va=mpa$slot vb=mpb$slot
net=10.$((240 + slot)).0
out=$(mktemp -d)
cleanup() {
	# whatever the job left in the namespaces (an orted after a timeout)
	for ns in "$a" "$b"; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
	done
	netns_del "$a" "$b"
	rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
netns_pair "$a" "$b" "$va" "$vb" "$net"
printf '%s slots=2\n%s slots=2\n' "$net.1" "$net.2" >"$out/hosts"
export URVT_RUN="$run" MPI_NETNS_HOSTS="$net.1=$a=$va $net.2=$b=$vb"
export UCX_NET_DEVICES=urvt0:1 UCX_TLS="$tls" UCX_WARN_UNUSED_ENV_VARS=n URVT_STATS_FILE="$out/stats.%p"
start=$(date +%s.%N)
if [ "$flavor" = mpich ]; then
	MPIR_CVAR_NOLOCAL=1 timeout "${MPI_TEST_TIMEOUT:-120}" ip netns exec "$a" \
		env URVT_NETDEV="$va" "$run" \
		mpirun.mpich -launcher ssh -launcher-exec "$here/netns_agent.sh" -iface "$va" \
		-hosts "$net.1:1,$net.2:1" -np 4 \
		-genvlist UCX_NET_DEVICES,UCX_TLS,UCX_WARN_UNUSED_ENV_VARS,URVT_STATS_FILE,MPIR_CVAR_NOLOCAL \
		"$prog" >"$out/log" 2>&1
else
	# shellcheck disable=SC2086
	timeout "${MPI_TEST_TIMEOUT:-120}" ip netns exec "$a" env URVT_NETDEV="$va" "$run" \
		$mpirun --allow-run-as-root --oversubscribe --hostfile "$out/hosts" -np 4 --map-by node \
		--mca plm rsh --mca plm_rsh_agent "$here/netns_agent.sh" --mca plm_rsh_no_tree_spawn 1 \
		--mca oob_tcp_if_include "$net.0/24" \
		$spml --mca pml ucx --mca osc ucx --mca btl self \
		-x UCX_NET_DEVICES -x UCX_TLS -x UCX_WARN_UNUSED_ENV_VARS -x URVT_STATS_FILE \
		"$prog" >"$out/log" 2>&1
fi
rc=$?
end=$(date +%s.%N)
cat "$out/log"
echo "mpirun took $(echo "$end - $start" | bc) s"
fail=0
[ $rc = 0 ] || { echo "FAIL: mpirun exited $rc"; fail=1; }
grep -q "^$tag: 4 $unit, 0 errors$" "$out/log" || { echo "FAIL: no clean $tag line"; fail=1; }
grep -q "in use" "$out/log" && { echo "FAIL: an address or port in use"; fail=1; }
# two ranks in each namespace, as placed
ia=$(stat -L -c %i "/run/netns/$a") ib=$(stat -L -c %i "/run/netns/$b")
for r in 0 2; do grep -q "^$tag: rank $r netns $ia$" "$out/log" || { echo "FAIL: rank $r not in $a"; fail=1; }; done
for r in 1 3; do grep -q "^$tag: rank $r netns $ib$" "$out/log" || { echo "FAIL: rank $r not in $b"; fail=1; }; done
n=0 big=0 na=0 nb=0
for f in "$out"/stats.*; do
	[ -f "$f" ] || continue
	n=$((n + 1))
	"$stat" -a "$f" >"$f.txt"
	ctr() { awk -v c="$1" '/^  qp /{exit} $1 == c { print $2 }' "$f.txt"; }
	qtx() { awk -v t="($1)" 'index($0, "  qp ") == 1 {q = index($0, t) > 0; next} q && $1 == "tx_bytes" {n += $2} END {print n + 0}' "$f.txt"; }
	head=$(head -1 "$f.txt" | tr -s ' ')
	case $head in
	*" $net.1 ($va)"*) na=$((na + 1)) ;;
	*" $net.2 ($vb)"*) nb=$((nb + 1)) ;;
	esac
	txb=$(ctr tx_bytes) rc_b=$(qtx RC) ud_b=$(qtx UD) udp=$(ctr udp_tx_packets)
	echo "links: $head: tx $txb bytes (udp $udp, shm $(ctr shm_tx_packets) packets); RC QPs $rc_b bytes, UD QPs $ud_b bytes; forwarded out $(ctr host_forwarded_out) in $(ctr host_forwarded_in) lost $(ctr host_forward_lost)"
	[ "${udp:-0}" -gt 0 ] || { echo "FAIL: a rank sent nothing over UDP (to the other namespace)"; fail=1; }
	if [ "${URVT_SHM:-1}" = 0 ] && [ "$(ctr shm_tx_packets)" != 0 ]; then
		echo "FAIL: URVT_SHM=0, yet a rank sent over the shm link"; fail=1
	fi
	if [ "$txb" -gt 10000000 ]; then
		big=$((big + 1))
		[ "$udp" -gt 7000 ] || { echo "FAIL: the ping-pong did not cross the veth over UDP"; fail=1; }
		case $tls in rc_verbs*) [ "$rc_b" -gt 10000000 ] || { echo "FAIL: RC did not carry the ping-pong"; fail=1; } ;; esac
	fi
done
[ $n = 4 ] || { echo "FAIL: $n counter files for 4 ranks"; fail=1; }
# one identity per namespace: both ranks of each at its veth's address
if [ $na != 2 ] || [ $nb != 2 ]; then
	echo "FAIL: $na ranks at $net.1 ($va), $nb at $net.2 ($vb); want 2 and 2"
	fail=1
fi
# ranks 0 and 1 sent 10 MiB of 1 MiB ping-pongs each, across the veth
[ $big -ge 2 ] || { echo "FAIL: the ping-pong did not go over urvt ($big ranks sent > 10 MB)"; fail=1; }
[ $fail = 0 ] && echo "PASS: $tag ($flavor), 4 ranks in two namespaces, two per address, UCX_TLS=$tls"
exit $fail
