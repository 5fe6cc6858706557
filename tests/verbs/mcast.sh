#!/bin/sh
# mcast.sh SLOT host|netns: a UD multicast sender and two receivers, three
# processes through urvt-run (tests/verbs/vt_mcast.c): each receiver attaches
# a UD QP to the group and must get every datagram, in order, intact.
#   host:  all three on this host, each device on its own 127.x address
#   netns: the sender in one network namespace, the receivers in the other,
#          joined by a veth pair (tests/lib/netns.sh)
# The group is 239.<SLOT>.0.1; host addresses 127.32.<SLOT>.1-3.
set -u
slot=$1 where=$2
here=$(cd "$(dirname "$0")" && pwd)
run=${URVT_RUN:-$here/../../build/bin/urvt-run}
prog=${VT_MCAST:-$here/../../build/tests/verbs/vt_mcast}
group=239.$slot.0.1 n=50
out=$(mktemp -d)
a=urvt-mca$slot b=urvt-mcb$slot
. "$here/../lib/netns.sh"
trap 'kill $r1 $r2 2>/dev/null; [ "$where" = netns ] && netns_del $a $b; rm -rf "$out"' EXIT INT TERM
r1= r2=

if [ "$where" = netns ]; then
	net=10.$((60 + slot)).0
	netns_pair "$a" "$b" "mva$slot" "mvb$slot" "$net"
	ip -n "$b" addr add "$net.3/24" dev "mvb$slot" || exit 1
	in_s="ip netns exec $a" in_r="ip netns exec $b"
	s_env="URVT_ADDR=$net.1" r1_env="URVT_ADDR=$net.2" r2_env="URVT_ADDR=$net.3"
else
	in_s= in_r=
	s_env="URVT_ADDR=127.32.$slot.1"
	r1_env="URVT_ADDR=127.32.$slot.2" r2_env="URVT_ADDR=127.32.$slot.3"
fi

# shellcheck disable=SC2086
env $r1_env timeout 30 $in_r "$run" "$prog" recv "$group" $n >"$out/r1" 2>&1 &
r1=$!
# shellcheck disable=SC2086
env $r2_env timeout 30 $in_r "$run" "$prog" recv "$group" $n >"$out/r2" 2>&1 &
r2=$!
for i in $(seq 1 100); do
	grep -q ready "$out/r1" 2>/dev/null && grep -q ready "$out/r2" 2>/dev/null && break
	sleep 0.1
done
# shellcheck disable=SC2086
env $s_env timeout 30 $in_s "$run" "$prog" send "$group" $n >"$out/s" 2>&1
src=$?
wait $r1; rc1=$?
wait $r2; rc2=$?
r1= r2=
for f in s r1 r2; do echo "--- $f"; cat "$out/$f"; done
if [ $src -eq 0 ] && [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]; then
	echo "PASS: $n datagrams to $group reached both receivers ($where)"
	exit 0
fi
echo "FAIL: sender $src, receivers $rc1 $rc2"
exit 1
