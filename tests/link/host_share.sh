#!/bin/sh
# host_share.sh SLOT CASE
#
# One host, one RoCE identity (docs/host-identity.md): two network
# namespaces made here, joined by a veth pair, are two hosts; in each,
# several urvt processes share the interface's address (URVT_NETDEV), so
# all of a host's processes have one GID and the kernel steers each
# datagram to the process owning its destination QPN.
#   CASE=pairs  four server processes in A, four clients in B, all at
#               once: ibv_rc_pingpong --chk, ibv_ud_pingpong --chk,
#               ib_write_bw and rping (rdma_cm; the server listens on every
#               address); every pair passes; each process's counters
#               show its traffic on UDP and how much was forwarded
#   CASE=kill   four rc_pingpong pairs; the first server to join A's
#               group (its member index 0) is killed with SIGKILL mid-run:
#               the other three finish with their data checked (--chk),
#               the victim's client fails (retries exhausted) or is killed
#   CASE=rping  rping -s with no address (a listener on every address) and
#               rping -c from another process: to 127.0.0.1 on the default
#               identity, and in namespace A to A's interface address with
#               both processes on that interface (URVT_NETDEV)
#   CASE=scramble  three rc_pingpong pairs while a hostile process of the
#               same user scribbles random member indexes into A's registry
#               (the steering follows the lies): every pair still finishes
#               with its data checked, the counters show the forwarding
# SLOT (1..99) keeps parallel tests apart (addresses, ports, netns names).
set -u
slot=$1 case=$2
here=$(cd "$(dirname "$0")" && pwd)
run=${URVT_RUN:-$here/../../build/bin/urvt-run}
. "$here/../lib/links.sh"
. "$here/../lib/netns.sh"
out=$(mktemp -d)
a=urvt-ha$slot b=urvt-hb$slot
pids=
trap 'cleanup' EXIT INT TERM

cleanup() {
	for p in $pids $(jobs -p); do kill -9 "$p" 2>/dev/null; done
	netns_del "$a" "$b"
	rm -rf "$out"
}

for prog in ibv_rc_pingpong ibv_ud_pingpong ib_write_bw rping; do
	command -v $prog >/dev/null || { echo "SKIP: $prog not installed"; exit 77; }
done
netns_pair "$a" "$b" "ha$slot" "hb$slot" "10.$((100 + slot)).0"
saddr=10.$((100 + slot)).0.1
base=$((21000 + 10 * slot))

# one program in namespace NS on interface DEV: NS DEV NAME PROG ARGS...
# (output and counters under NAME)
run_in() {
	ns=$1 dev=$2 name=$3; shift 3
	ip netns exec "$ns" env URVT_NETDEV=$dev URVT_STATS_FILE=$out/stats.$name \
		timeout "${tmo:-120}" "$run" "$@" >"$out/$name" 2>&1
}
# a server in A: NAME PROG ARGS... (background; pid in $pids and pid_NAME)
in_a() {
	run_in "$a" ha$slot "$@" &
	pids="$pids $!"
	eval "pid_$1=$!"
}
# a client in B, retried while its server is not listening yet
client() {
	name=$1
	for try in 1 2 3 4 5 6 7 8 9 10; do
		run_in "$b" hb$slot "$@"
		rc=$?
		grep -q "Couldn't connect\|Unable to open file descriptor" "$out/$name" || break
		sleep 0.3
	done
	echo "$rc" >"$out/$name.rc"
}
counters() {
	for n in "$@"; do
		f=$out/stats.$n
		[ -f "$f" ] || { echo "$n: no counters"; continue; }
		echo "$n: udp rx $(links_ctr "$f" udp_rx_packets) tx $(links_ctr "$f" udp_tx_packets)," \
			"forwarded out $(links_ctr "$f" host_forwarded_out) in $(links_ctr "$f" host_forwarded_in)" \
			"lost $(links_ctr "$f" host_forward_lost)"
	done
}
fail=0
check() { # NAME PATTERN
	if grep -q "$2" "$out/$1"; then echo "ok: $1"; else echo "FAIL: $1"; cat "$out/$1"; fail=1; fi
}

case $case in
pairs)
	in_a rc_s ibv_rc_pingpong -g 0 --chk -n 3000 -p $base
	tmo=40 in_a ud_s ibv_ud_pingpong -g 0 --chk -n 3000 -p $((base + 1))
	in_a bw_s ib_write_bw -F -d urvt0 -x 0 -s 65536 -n 2000 -p $((base + 2))
	in_a rp_s rping -s -p $((base + 3)) -C 200
	sleep 0.5
	client rc_c ibv_rc_pingpong -g 0 --chk -n 3000 -p $base $saddr &
	c1=$!
	tmo=40 client ud_c ibv_ud_pingpong -g 0 --chk -n 3000 -p $((base + 1)) $saddr &
	c2=$!
	client bw_c ib_write_bw -F -d urvt0 -x 0 -s 65536 -n 2000 -p $((base + 2)) $saddr &
	c3=$!
	client rp_c rping -c -a $saddr -p $((base + 3)) -C 200 -v &
	c4=$!
	wait $c1 $c2 $c3 $c4
	wait $pid_rc_s $pid_ud_s $pid_bw_s $pid_rp_s
	# UD may lose a datagram and ibv_ud_pingpong then waits for it until its
	# timeout: seen while the namespace's members came and went (the other
	# clients retrying their connects), a datagram steered to one that left.
	# The pair runs once more, alone, and must pass then.
	if ! grep -q "iters in" "$out/ud_c" || ! grep -q "iters in" "$out/ud_s"; then
		echo "UD pair lost a datagram during the churn (UD may); once more, alone:"
		counters ud_s ud_c
		tmo=40 in_a ud_s ibv_ud_pingpong -g 0 --chk -n 3000 -p $((base + 4))
		sleep 0.5
		tmo=40 client ud_c ibv_ud_pingpong -g 0 --chk -n 3000 -p $((base + 4)) $saddr
		wait $pid_ud_s
	fi
	check rc_s "iters in"; check rc_c "iters in"
	check ud_s "iters in"; check ud_c "iters in"
	check bw_c "65536 *2000"
	check rp_c "rdma-ping-199:"
	# one GID per host: every process in A reports A's address
	grep -h "local address" "$out/rc_s" "$out/ud_s" | grep -v "GID ::ffff:$saddr" && fail=1
	counters rc_s ud_s bw_s rp_s rc_c ud_c bw_c rp_c
	;;
kill)
	# the victim joins first: member index 0, whose leaving moves the last member
	in_a v_s ibv_rc_pingpong -g 0 --chk -n 400000 -p $base
	sleep 0.3
	for k in 1 2 3; do
		in_a s$k ibv_rc_pingpong -g 0 --chk -s 4096 -n 10000 -p $((base + k))
	done
	sleep 0.5
	client v_c ibv_rc_pingpong -g 0 --chk -n 400000 -p $base $saddr &
	vc=$!
	for k in 1 2 3; do
		client c$k ibv_rc_pingpong -g 0 --chk -s 4096 -n 10000 -p $((base + k)) $saddr &
		eval "cc$k=\$!"
	done
	sleep 1
	# the program itself, under timeout(1)
	victim=$(pgrep -x -f "ibv_rc_pingpong -g 0 --chk -n 400000 -p $base")
	[ -n "$victim" ] || { echo "FAIL: no victim process"; cat "$out/v_s"; exit 1; }
	kill -9 $victim
	echo "killed the first member of A's group (pid $victim) mid-run"
	sleep 0.2
	kill -0 "$victim" 2>/dev/null && { echo "FAIL: the victim still runs"; fail=1; }
	wait $cc1 $cc2 $cc3
	for k in 1 2 3; do
		eval "wait \$pid_s$k"
		check s$k "iters in"; check c$k "iters in"
	done
	kill -9 $vc 2>/dev/null
	grep -q "iters in" "$out/v_s" && { echo "FAIL: the victim finished"; fail=1; }
	counters s1 s2 s3 c1 c2 c3
	;;
rping)
	# the default identity, on this host (no namespace): 127.0.0.1
	timeout 60 "$run" rping -s -p $base -C 50 >"$out/rs_host" 2>&1 &
	rs=$!
	pids="$pids $rs"
	sleep 0.5
	for try in 1 2 3 4 5; do
		timeout 30 "$run" rping -c -a 127.0.0.1 -p $base -C 50 -v >"$out/rc_host" 2>&1 && break
		sleep 0.3
	done
	wait $rs
	check rc_host "rdma-ping-49:"
	# in namespace A, both on A's interface
	in_a rs_ns rping -s -p $((base + 1)) -C 50
	sleep 0.5
	for try in 1 2 3 4 5; do
		ip netns exec "$a" env URVT_NETDEV=ha$slot timeout 30 "$run" rping -c -a $saddr \
			-p $((base + 1)) -C 50 -v >"$out/rc_ns" 2>&1 && break
		sleep 0.3
	done
	wait $pid_rs_ns
	check rc_ns "rdma-ping-49:"
	;;
scramble)
	for k in 1 2 3; do
		in_a s$k ibv_rc_pingpong -g 0 --chk -s 4096 -n 10000 -p $((base + k))
	done
	sleep 0.5
	for k in 1 2 3; do
		client c$k ibv_rc_pingpong -g 0 --chk -s 4096 -n 10000 -p $((base + k)) $saddr &
		eval "cc$k=\$!"
	done
	sleep 0.3
	# struct urvt_host_table (base/hostreg.h): gen at 16, slots from 32, 72 bytes
	# each: pid at +0, index at +32
	ip netns exec "$a" python3 - <<'PY'
import mmap, os, random, struct, time
path = "/dev/shm/urvt-host-%d-%d" % (os.geteuid(), os.stat("/proc/self/ns/net").st_ino)
with open(path, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    end = time.time() + 2
    while time.time() < end:
        for s in range(1, 255):
            off = 32 + 72 * s
            if struct.unpack_from("<i", m, off)[0]:
                struct.pack_into("<i", m, off + 32, random.randrange(0, 4))
        struct.pack_into("<I", m, 16, (struct.unpack_from("<I", m, 16)[0] + 1) & 0xffffffff)
        time.sleep(0.02)
PY
	echo "scrambled A's member indexes for 2 s"
	wait $cc1 $cc2 $cc3
	for k in 1 2 3; do
		eval "wait \$pid_s$k"
		check s$k "iters in"; check c$k "iters in"
	done
	counters s1 s2 s3 c1 c2 c3
	fwd=0
	for k in 1 2 3; do fwd=$((fwd + $(links_ctr "$out/stats.s$k" host_forwarded_in))); done
	[ "$fwd" -gt 0 ] || { echo "FAIL: nothing was forwarded (the scramble did not bite)"; fail=1; }
	;;
*)
	echo "unknown case $case"; exit 2 ;;
esac
[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail
