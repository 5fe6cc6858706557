#!/bin/sh
# qemu_migrate_rdma.sh VARIANT SLOT: QEMU live migration over RDMA
# (rdma:HOST:PORT) between qemu-system-x86_64 processes on this host, each
# under urvt-run. Every source is started paused (-S) with 1 MiB of random
# bytes of its own put at guest physical 0x100000 by -device loader; when
# source and destination report completion, the destination's guest RAM at
# 0x100000 (pmemsave) must equal that source's pattern byte for byte. The
# guests stay paused: a pattern is only ever in a destination's RAM through
# the migration stream.
# VARIANT
#   plain, pinall: one migration, each process at an address of its own:
#     destination URVT_ADDR=127.61.SLOT.1, -incoming rdma:127.61.SLOT.1:P
#     (QEMU binds that address with rdma_bind_addr); source
#     URVT_ADDR=127.61.SLOT.2. pinall: rdma-pin-all on (all guest RAM
#     registered up front); plain: chunks registered on demand.
#   two: two migrations at once on the host's one RoCE identity: no
#     URVT_ADDR anywhere, all four processes on GID 127.0.0.1;
#     destinations -incoming rdma:127.0.0.1:P1 and rdma:127.0.0.1:P2, both
#     sources told to migrate at once, then both polled; 16 MiB of
#     pattern each (1 MiB in the others), so that each migration lasts
#     long enough to be seen beside the other (one of 1 MiB finished in
#     721 ms, before the other's monitor answered). Not max-bandwidth:
#     a rate-limited RDMA migration failed over urvt (docs/ecosystem.md).
set -u
variant=$1 slot=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/apps_lib.sh"
trap 'cleanup' EXIT INT TERM
pids=
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	rm -rf "$out"
}
skip_without qemu-system-x86_64 python3
# (a file name is quoted: HMP would read its slashes as divisions)
hmp() { timeout 40 python3 "$here/hmp.py" "$@"; }

unset URVT_ADDR URVT_NETDEV URVT_SHARE
size=1048576
qemu="qemu-system-x86_64 -nodefaults -display none -M pc -accel tcg -m 64 -S"
case $variant in
plain | pinall)
	pairs=1 daddr=127.61.$slot.1 saddr=127.61.$slot.2
	denv=URVT_ADDR=$daddr senv=URVT_ADDR=$saddr ;;
two)
	pairs=2 daddr=127.0.0.1 saddr=127.0.0.1 denv='' senv='' size=16777216 ;;
*)
	echo "usage: qemu_migrate_rdma.sh plain|pinall|two SLOT"; exit 2 ;;
esac
# pair N: files $out/*N.*, port 19600+SLOT (N=1), 19700+SLOT (N=2)
port() { echo $((19500 + $1 * 100 + slot)); }

n=1
while [ $n -le $pairs ]; do
	head -c $size /dev/urandom >"$out/pattern$n.bin"
	# shellcheck disable=SC2086
	env $denv URVT_STATS_FILE="$out/stats.dst$n" timeout -k 5 "$tmo" "$run" $qemu \
		-monitor unix:"$out/dst$n.sock",server,nowait \
		-incoming rdma:$daddr:"$(port $n)" >"$out/dst$n.log" 2>&1 &
	pids="$pids $!"
	# shellcheck disable=SC2086
	env $senv URVT_STATS_FILE="$out/stats.src$n" timeout -k 5 "$tmo" "$run" $qemu \
		-monitor unix:"$out/src$n.sock",server,nowait \
		-device loader,file="$out/pattern$n.bin",addr=0x100000 >"$out/src$n.log" 2>&1 &
	pids="$pids $!"
	n=$((n + 1))
done
n=1
while [ $n -le $pairs ]; do
	i=0
	while [ $i -lt 100 ] && ! { [ -S "$out/dst$n.sock" ] && [ -S "$out/src$n.sock" ]; }; do
		sleep 0.1; i=$((i + 1))
	done
	# the destination listens before its monitor starts serving
	hmp "$out/dst$n.sock" "info status" >/dev/null || bad "no destination monitor ($n)"
	hmp "$out/src$n.sock" "pmemsave 0x100000 $size \"$out/src$n.bin\"" >/dev/null
	cmp -s "$out/pattern$n.bin" "$out/src$n.bin" || bad "source $n does not hold its pattern"
	if [ "$variant" = pinall ]; then
		hmp "$out/src$n.sock" "migrate_set_capability rdma-pin-all on" "info migrate_capabilities" |
			grep -q "^rdma-pin-all: on" || bad "rdma-pin-all did not turn on"
	fi
	n=$((n + 1))
done
# all migrations start before any is polled, then all are polled together
args='' n=1
while [ $n -le $pairs ]; do
	args="$args $out/src$n.sock=rdma:$daddr:$(port $n)"
	n=$((n + 1))
done
t0=$(date +%s%N)
# shellcheck disable=SC2086
timeout 90 python3 "$here/migrate_all.py" $args | tee "$out/watch"
echo "all migrations ended after $((($(date +%s%N) - t0) / 1000000)) ms"
if [ "$pairs" -gt 1 ]; then
	k=$(sed -n 's/^polls that saw all [0-9]* active: \([0-9]*\).*/\1/p' "$out/watch")
	[ "${k:-0}" -gt 0 ] || bad "no poll saw the $pairs migrations active at the same time"
fi
n=1
while [ $n -le $pairs ]; do
	echo "--- migration $n: $saddr -> $daddr:$(port $n)"
	hmp "$out/src$n.sock" "info migrate" | grep -E "status|transferred|total time|capabilities|rdma-pin-all"
	st=$(hmp "$out/src$n.sock" "info migrate" | sed -n 's/^Migration status: //p')
	[ "$st" = completed ] || bad "migration $n status: ${st:-none}"
	# the destination has loaded the state when it leaves "inmigrate"
	i=0
	while [ $i -lt 60 ]; do
		dst=$(hmp "$out/dst$n.sock" "info status")
		case $dst in *inmigrate*) sleep 0.5 ;; *) break ;; esac
		i=$((i + 1))
	done
	echo "destination $n: $dst"
	hmp "$out/dst$n.sock" "pmemsave 0x100000 $size \"$out/dst$n.bin\"" >/dev/null
	if cmp "$out/pattern$n.bin" "$out/dst$n.bin"; then
		echo "destination $n RAM at 0x100000: $size bytes equal to source $n's pattern"
	else
		bad "destination $n's guest RAM differs from source $n's pattern"
	fi
	n=$((n + 1))
done
n=1
while [ $n -le $pairs ]; do
	hmp "$out/src$n.sock" quit >/dev/null 2>&1
	hmp "$out/dst$n.sock" quit >/dev/null 2>&1
	n=$((n + 1))
done
for p in $pids; do wait "$p"; done
pids=
n=1
while [ $n -le $pairs ]; do
	echo "--- source $n"; cat "$out/src$n.log"
	echo "--- destination $n"; cat "$out/dst$n.log"
	# 64 MiB of guest RAM, most of it zero pages sent as such: the source
	# sends at least the pattern
	check_stats "source $n" "$out/stats.src$n" $size
	check_stats "destination $n" "$out/stats.dst$n" 1
	if [ "$variant" = two ]; then
		check_gid "source $n" "$out/stats.src$n" 127.0.0.1
		check_gid "destination $n" "$out/stats.dst$n" 127.0.0.1
	fi
	n=$((n + 1))
done
[ $fail = 0 ] && echo "PASS: QEMU RDMA migration ($variant), $pairs at once, $saddr -> $daddr, guest RAM checked"
exit $fail
