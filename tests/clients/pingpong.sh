#!/bin/sh
# pingpong.sh WHERE SLOT PROG [ARGS...]
#
# Runs an unmodified RDMA program pair (Debian's ibverbs-utils pingpongs)
# over urvt: a server process and a client process, each through urvt-run.
#   WHERE=host     both on this host, addresses 127.<100+SLOT>.0.1 and .0.2:
#                  the shared-memory link carries it
#   WHERE=hostudp  the same with URVT_SHM=0: UDP carries it
#   WHERE=netns    two network namespaces made here, joined by a veth pair,
#                  addresses 10.<SLOT>.0.1/24 and 10.<SLOT>.0.2/24 (only inside
#                  them): UDP carries it (namespaces are hosts to the shm link)
# SLOT (1..99) keeps parallel tests apart (addresses, TCP port, netns names).
# Passes when both exit 0, both print their "bytes in ... seconds" line (the
# XRC pingpong: "success") and
# both sides' counters show every packet on the link WHERE says.
set -u
where=$1 slot=$2 prog=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
run=${URVT_RUN:-$here/../../build/bin/urvt-run}
. "$here/../lib/links.sh"
# UD: the first datagrams to a new peer process may go over UDP (links.sh)
case $prog in *ud_pingpong) export LINKS_UD=1 ;; esac
. "$here/../lib/netns.sh"
port=$((18000 + slot))
tmo=${PINGPONG_TIMEOUT:-60}
out=$(mktemp -d)
trap 'cleanup' EXIT INT TERM

cleanup() {
	[ -n "${spid:-}" ] && kill "$spid" 2>/dev/null
	[ "$where" = netns ] && netns_del "urvt-a$slot" "urvt-b$slot"
	rm -rf "$out"
}

if [ "$where" = netns ]; then
	a=urvt-a$slot b=urvt-b$slot
	netns_pair "$a" "$b" "va$slot" "vb$slot" "10.$slot.0"
	saddr=10.$slot.0.1 caddr=10.$slot.0.2
	sexec="ip netns exec $a env URVT_NETDEV=va$slot $(links_env "$out" server)"
	cexec="ip netns exec $b env URVT_NETDEV=vb$slot $(links_env "$out" client)"
	link=udp
else
	saddr=127.$((100 + slot)).0.1 caddr=127.$((100 + slot)).0.2
	sexec="env URVT_ADDR=$saddr $(links_env "$out" server)"
	cexec="env URVT_ADDR=$caddr $(links_env "$out" client)"
	link=shm
	if [ "$where" = hostudp ]; then
		sexec="$sexec URVT_SHM=0" cexec="$cexec URVT_SHM=0" link=udp
	fi
fi

# shellcheck disable=SC2086
timeout "$tmo" $sexec "$run" "$prog" -p "$port" "$@" >"$out/server" 2>&1 &
spid=$!
# The server listens once its QP is ready; give it a moment, then retry.
sleep 0.3
rc=1
for try in 1 2 3 4 5; do
	# shellcheck disable=SC2086
	timeout "$tmo" $cexec "$run" "$prog" -p "$port" "$@" "$saddr" >"$out/client" 2>&1
	rc=$?
	grep -q "Couldn't connect" "$out/client" || break
	sleep 0.5
done
wait "$spid"
src=$?
spid=
echo "--- server ($saddr): exit $src"; cat "$out/server"
echo "--- client ($caddr): exit $rc"; cat "$out/client"
if [ "$src" -ne 0 ] || [ "$rc" -ne 0 ]; then
	echo "FAIL: exit codes server=$src client=$rc"
	exit 1
fi
# ibv_xsrq_pingpong ends with "success" instead
done_re="bytes in .* seconds"
case $prog in *xsrq_pingpong) done_re="^success$" ;; esac
if ! grep -q "$done_re" "$out/server" || ! grep -q "$done_re" "$out/client"; then
	echo "FAIL: no '$done_re' line"
	exit 1
fi
if ! links_check "$out" server "$link" || ! links_check "$out" client "$link"; then
	echo "FAIL: the traffic did not go (only) over the $link link"
	exit 1
fi
echo "PASS: $prog $*"
