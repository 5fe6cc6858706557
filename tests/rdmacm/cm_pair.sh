#!/bin/sh
# cm_pair.sh WHERE SLOT CASE
#
# Runs an unmodified rdma_cm program pair (Debian's rdmacm-utils, perftest
# with -R, qperf -cm1) over urvt's librdmacm: a server process and a client
# process, each through urvt-run. The connection is set up by IB CM MADs on
# QP1 (docs/rdmacm.md).
#   WHERE=host   both on this host: server 127.41.SLOT.1, client 127.41.SLOT.2
#   WHERE=netns  two network namespaces made here, joined by a veth pair:
#                10.41.SLOT.1/24 and 10.41.SLOT.2/24 (only inside them)
# How each side gets its device address is part of the test: the servers
# bind the address (rping -a, ucmatose -b: rdma_bind_addr opens the device
# there) or take it from URVT_ADDR / URVT_NETDEV; clients without either
# take the source of the route to the server (netns) or the first free
# 127.0.0.x (host).
# Passes when both exit 0 and the client's output has the CASE's success line.
set -u
where=$1 slot=$2 case=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/netns.sh"
run=${URVT_RUN:-$here/../../build/bin/urvt-run}
# both sides together, retries included: under ctest's 180 s, so that a hang
# still ends with both sides' output printed. A side still running then gets
# SIGABRT, on which a sanitized build prints where it was (handle_abort)
tmo=${CM_PAIR_TIMEOUT:-90}
stop="timeout -s ABRT -k 5"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_abort=1"
out=$(mktemp -d)
port=$((19400 + slot))
trap 'cleanup' EXIT INT TERM

cleanup() {
	[ -n "${spid:-}" ] && kill "$spid" 2>/dev/null
	[ -n "${spid:-}" ] && wait "$spid" 2>/dev/null
	[ "$where" = netns ] && netns_del "urvt-cma$slot" "urvt-cmb$slot"
	rm -rf "$out"
}

if [ "$where" = netns ]; then
	a=urvt-cma$slot b=urvt-cmb$slot
	netns_pair "$a" "$b" "cma$slot" "cmb$slot" "10.41.$slot"
	saddr=10.41.$slot.1 caddr=10.41.$slot.2
	sns="ip netns exec $a" cns="ip netns exec $b"
else
	saddr=127.41.$slot.1 caddr=127.41.$slot.2
	sns= cns=
fi

# CASE: server command, client command, the client's success pattern.
# senv/cenv: environment of each side ("" = none: the program's own
# address choice opens the device).
senv= cenv=
case $case in
rping64)
	scmd="rping -s -a $saddr -p $port -C 100 -S 64"
	ccmd="rping -c -a $saddr -p $port -v -C 100 -S 64"
	want='ping data: rdma-ping-99:' ;;
rping64k)
	scmd="rping -s -a $saddr -p $port -C 100 -S 65535"
	ccmd="rping -c -a $saddr -p $port -v -C 100 -S 65535"
	want='ping data: rdma-ping-99:' ;;
ucmatose)
	scmd="ucmatose -b $saddr -p $port -c 4 -C 20"
	ccmd="ucmatose -s $saddr -p $port -c 4 -C 20"
	want='return status 0' ;;
ucmatose_migrate)
	scmd="ucmatose -b $saddr -p $port -m"
	ccmd="ucmatose -s $saddr -p $port -m"
	want='return status 0' ;;
udaddy)
	# (udaddy's -p is the port space; it always uses port 7174)
	scmd="udaddy -b $saddr -c 4 -C 20"
	ccmd="udaddy -s $saddr -c 4 -C 20"
	want='return status 0' ;;
mckey)
	# UD multicast: the "server" joins 239.41.SLOT.1 and receives, the
	# client joins as a sender and sends (docs/multicast.md)
	scmd="mckey -m 239.41.$slot.1 -b $saddr -C 20"
	ccmd="mckey -m 239.41.$slot.1 -b $caddr -s -C 20"
	want='return status 0' ;;
rdma_server)
	senv="URVT_ADDR=$saddr"
	scmd="rdma_server -p $port"
	ccmd="rdma_client -s $saddr -p $port"
	want='rdma_client: end 0' ;;
write_bw|read_bw|send_lat|send_bw_ud)
	senv="URVT_ADDR=$saddr" cenv="URVT_ADDR=$caddr"
	t=$(echo "$case" | sed 's/_ud$//')
	extra=
	[ "$case" = send_bw_ud ] && extra="-c UD"
	scmd="ib_$t -R -p $port -n 500 $extra"
	ccmd="ib_$t -R -p $port -n 500 $extra $saddr"
	want='^ *[0-9]+ +500 ' ;;
qperf)
	senv="URVT_ADDR=$saddr" cenv="URVT_ADDR=$caddr"
	scmd="qperf -lp $port"
	ccmd="qperf $saddr -lp $port -cm1 -t 1 rc_bw rc_lat rc_rdma_write_bw rc_rdma_read_bw rc_rdma_write_lat rc_compare_swap_mr"
	want='msg_rate' ;;
rstream)
	# blocking calls (CQ events, no spinning), data verified
	scmd="rstream -b $saddr -p $port -T b -T v -S 1048576 -C 50"
	ccmd="rstream -s $saddr -p $port -T b -T v -S 1048576 -C 50"
	want='^custom +1m +50 ' ;;
rstream_async)
	# non-blocking connect, rpoll before every call
	scmd="rstream -b $saddr -p $port -T a -T v -S 65536 -C 200"
	ccmd="rstream -s $saddr -p $port -T a -T v -S 65536 -C 200"
	want='^custom +64k +200 ' ;;
riostream)
	# riomap/riowrite: the peer's data lands in the mapped buffer
	scmd="riostream -b $saddr -p $port -T v -S 65536 -C 16 -I 5"
	ccmd="riostream -s $saddr -p $port -T v -S 65536 -C 16 -I 5"
	want='^custom +64k +16 +5 ' ;;
rspreload)
	# a plain TCP program; Debian's librspreload.so makes its sockets rsockets
	rsp=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
	[ -e "$rsp" ] && [ -x "${SOCK_ECHO:-}" ] || { echo "SKIP: no librspreload.so or sock_echo"; exit 77; }
	senv="LD_PRELOAD=$rsp" cenv="LD_PRELOAD=$rsp"
	scmd="$SOCK_ECHO -s $saddr $port"
	ccmd="$SOCK_ECHO -c $saddr $port"
	want='sock_echo: OK 5312613 bytes echoed' ;;
*)
	echo "unknown case $case"; exit 2 ;;
esac

prog=${scmd%% *}
command -v "$prog" >/dev/null || { echo "SKIP: $prog not installed"; exit 77; }

# the server, for at most $1 seconds
start_server() {
	# shellcheck disable=SC2086
	$sns env $senv $stop "$1" "$run" $scmd >"$out/server" 2>&1 &
	spid=$!
	sleep 0.5
}
start_server "$tmo"
if [ "$case" = rspreload ]; then
	sleep 0.5
	# rsockets, not a fallback to the kernel's TCP: no TCP listener there
	if $sns ss -ltnH "sport = :$port" | grep -q .; then
		echo "FAIL: the server listens on TCP port $port: librspreload fell back to a socket"
		exit 1
	fi
fi
rc=1
start=$(date +%s)
for try in 1 2 3; do
	left=$((tmo - ($(date +%s) - start)))
	[ "$left" -gt 1 ] || { echo "--- (no time left for a retry)" >>"$out/client"; break; }
	# shellcheck disable=SC2086
	$cns env $cenv $stop "$left" "$run" $ccmd >"$out/client.$try" 2>&1
	rc=$?
	cat "$out/client.$try" >>"$out/client"
	# the server may not listen yet (REJ, "invalid service ID"), or, a
	# UD client's SIDR request, its device not be open yet: nobody answers
	# and udaddy ends UNREACHABLE -110 (a full ASan suite, once): retry,
	# against a new server: the old one may have answered part of the
	# client's requests late and wait for that client's messages (udaddy
	# then hung both sides until the timeout, a full plain suite, once)
	grep -q "REJECTED\|UNREACHABLE" "$out/client.$try" || break
	left=$((tmo - ($(date +%s) - start)))
	[ "$left" -gt 2 ] || { echo "--- (no time left for a retry)" >>"$out/client"; break; }
	echo "--- (client and server retried)" >>"$out/client"
	kill "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	cat "$out/server" >>"$out/server.before"
	start_server "$left"
done
if [ "$case" = qperf ]; then
	kill "$spid" 2>/dev/null # the qperf server never exits by itself
	wait "$spid"
	src=0
else
	wait "$spid"
	src=$?
fi
spid=
[ -e "$out/server.before" ] && { echo "--- server before the retry:"; cat "$out/server.before"; }
echo "--- server ($saddr): exit $src"; cat "$out/server"
echo "--- client: exit $rc"; cat "$out/client"
if [ "$src" -ne 0 ] || [ "$rc" -ne 0 ]; then
	echo "FAIL: exit codes server=$src client=$rc"
	exit 1
fi
if ! grep -qE -- "$want" "$out/client"; then
	echo "FAIL: no '$want' in the client's output"
	exit 1
fi
echo "PASS: $case ($where)"
