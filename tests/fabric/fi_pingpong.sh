#!/bin/sh
# fi_pingpong.sh WHERE SLOT PROVIDER EP [ARGS...]: Debian's libfabric
# fi_pingpong (libfabric-bin 1.17) over urvt, server and client through
# urvt-run, data checked (-c).
#   WHERE=host     127.252.(100+SLOT).1 and .2 (shared-memory link)
#   WHERE=hostudp  the same with URVT_SHM=0 (UDP)
#   WHERE=netns    two namespaces made here, a veth pair 10.(200+SLOT).0.1/.2
# FI_VERBS_IFACE names the interface the verbs provider takes addresses from
# (lo, or the veth), as a user sets it for a RoCE port (default "ib").
# Passes when both exit 0, the client prints its table, and both sides'
# urvt counters show the traffic. Exit 77 without fi_pingpong.
set -u
where=$1 slot=$2 prov=$3 ep=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/netns.sh"
run=${URVT_RUN:-$here/../../build/bin/urvt-run}
stat=${URVT_STAT:-$(dirname "$run")/urvt-stat}
command -v fi_pingpong >/dev/null || { echo "SKIP: fi_pingpong (libfabric-bin) missing"; exit 77; }
out=$(mktemp -d)
a=urvt-fa$slot b=urvt-fb$slot
cleanup() {
	[ -n "${spid:-}" ] && kill "$spid" 2>/dev/null
	[ "$where" = netns ] && netns_del "$a" "$b"
	rm -rf "$out"
}
trap cleanup EXIT INT TERM
port=$((47600 + slot))
if [ "$where" = netns ]; then
	netns_pair "$a" "$b" "vfa$slot" "vfb$slot" "10.$((200 + slot)).0"
	sexec="ip netns exec $a env URVT_NETDEV=vfa$slot FI_VERBS_IFACE=vfa$slot"
	cexec="ip netns exec $b env URVT_NETDEV=vfb$slot FI_VERBS_IFACE=vfb$slot"
	srv=10.$((200 + slot)).0.1
else
	net=127.252.$((100 + slot))
	shm=1
	[ "$where" = hostudp ] && shm=0
	sexec="env URVT_SHM=$shm URVT_ADDR=$net.1 FI_VERBS_IFACE=lo"
	cexec="env URVT_SHM=$shm URVT_ADDR=$net.2 FI_VERBS_IFACE=lo"
	srv=127.0.0.1
fi
# shellcheck disable=SC2086
$sexec URVT_STATS_FILE=$out/stats.server timeout 60 \
	"$run" fi_pingpong -p "$prov" -e "$ep" -B "$port" -c "$@" >"$out/server" 2>&1 &
spid=$!
sleep 1
for try in 1 2 3 4 5; do
	# shellcheck disable=SC2086
	$cexec URVT_STATS_FILE=$out/stats.client timeout 60 \
		"$run" fi_pingpong -p "$prov" -e "$ep" -P "$port" -c "$@" "$srv" >"$out/client" 2>&1
	crc=$?
	grep -q "Connection refused" "$out/client" || break
	sleep 0.5
done
wait "$spid"; src=$?; spid=
echo "--- server: exit $src"; cat "$out/server"
echo "--- client: exit $crc"; cat "$out/client"
fail=0
[ "$src" = 0 ] && [ "$crc" = 0 ] || { echo "FAIL: exit codes server=$src client=$crc"; fail=1; }
grep -q "usec/xfer" "$out/client" || { echo "FAIL: no results table"; fail=1; }
for side in server client; do
	"$stat" -q "$out/stats.$side" >"$out/stat.$side" 2>&1
	tx=$(awk '$1 == "tx_packets" {print $2}' "$out/stat.$side")
	echo "links: $side: $(tr -s ' \n' ' ' <"$out/stat.$side" | cut -c1-200)"
	[ "${tx:-0}" -gt 0 ] || { echo "FAIL: the $side sent nothing over urvt"; fail=1; }
done
[ $fail = 0 ] && echo "PASS: fi_pingpong -p $prov -e $ep ($where)"
exit $fail
