#!/bin/sh
# qemu_migrate_rdma.sh VARIANT SLOT: QEMU live migration over RDMA
# (rdma:HOST:PORT) between two qemu-system-x86_64 on this host, each under
# urvt-run at its own address:
#   destination 127.61.SLOT.1: -incoming rdma:127.61.SLOT.1:PORT (QEMU binds
#     that address with rdma_bind_addr)
#   source      127.61.SLOT.2: started paused (-S) with 1 MiB of random bytes
#     put at guest physical 0x100000 by -device loader
# VARIANT: plain (chunks registered on demand) or pinall (rdma-pin-all on:
# all guest RAM registered up front). The source migrates; when both sides
# report completion the destination's guest RAM at 0x100000 (pmemsave) must
# equal the pattern byte for byte. Both guests stay paused (-S): the pattern
# is only ever in the destination's RAM through the migration stream.
set -u
variant=$1 slot=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/apps_lib.sh"
trap 'cleanup' EXIT INT TERM
cleanup() {
	for p in ${spid:-} ${dpid:-}; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	rm -rf "$out"
}
skip_without qemu-system-x86_64 python3
# (a file name is quoted: HMP would read its slashes as divisions)
hmp() { timeout 40 python3 "$here/hmp.py" "$@"; }

daddr=127.61.$slot.1 saddr=127.61.$slot.2 port=$((19600 + slot))
size=1048576
head -c $size /dev/urandom >"$out/pattern.bin"
qemu="qemu-system-x86_64 -nodefaults -display none -M pc -accel tcg -m 64 -S"

URVT_ADDR=$daddr URVT_STATS_FILE=$out/stats.dst timeout -k 5 "$tmo" "$run" $qemu \
	-monitor unix:"$out/dst.sock",server,nowait \
	-incoming rdma:$daddr:$port >"$out/dst.log" 2>&1 &
dpid=$!
URVT_ADDR=$saddr URVT_STATS_FILE=$out/stats.src timeout -k 5 "$tmo" "$run" $qemu \
	-monitor unix:"$out/src.sock",server,nowait \
	-device loader,file="$out/pattern.bin",addr=0x100000 >"$out/src.log" 2>&1 &
spid=$!
i=0
while [ $i -lt 100 ] && ! { [ -S "$out/dst.sock" ] && [ -S "$out/src.sock" ]; }; do
	sleep 0.1; i=$((i + 1))
done
# the destination listens before its monitor starts serving
hmp "$out/dst.sock" "info status" >/dev/null || bad "no destination monitor"
hmp "$out/src.sock" "pmemsave 0x100000 $size \"$out/src.bin\"" >/dev/null
cmp -s "$out/pattern.bin" "$out/src.bin" || bad "the source guest does not hold the pattern"
if [ "$variant" = pinall ]; then
	hmp "$out/src.sock" "migrate_set_capability rdma-pin-all on" "info migrate_capabilities" |
		grep -q "^rdma-pin-all: on" || bad "rdma-pin-all did not turn on"
fi
hmp "$out/src.sock" "migrate -d rdma:$daddr:$port"
st=
i=0
while [ $i -lt 120 ]; do
	st=$(hmp "$out/src.sock" "info migrate" | sed -n 's/^Migration status: //p')
	case $st in completed | failed | cancelled) break ;; esac
	sleep 0.5; i=$((i + 1))
done
hmp "$out/src.sock" "info migrate" | grep -E "status|transferred|total time|capabilities|rdma-pin-all"
[ "$st" = completed ] || bad "migration status: ${st:-none}"
# the destination has loaded the state when it leaves "inmigrate"
i=0
while [ $i -lt 60 ]; do
	dst=$(hmp "$out/dst.sock" "info status")
	case $dst in *inmigrate*) sleep 0.5 ;; *) break ;; esac
	i=$((i + 1))
done
echo "destination: $dst"
hmp "$out/dst.sock" "pmemsave 0x100000 $size \"$out/dst.bin\"" >/dev/null
if cmp "$out/pattern.bin" "$out/dst.bin"; then
	echo "destination RAM at 0x100000: $size bytes equal to the pattern"
else
	bad "the destination's guest RAM differs from the pattern"
fi
hmp "$out/src.sock" quit >/dev/null 2>&1
hmp "$out/dst.sock" quit >/dev/null 2>&1
wait $spid; wait $dpid; spid= dpid=
echo "--- source"; cat "$out/src.log"
echo "--- destination"; cat "$out/dst.log"
# 64 MiB of guest RAM, most of it zero pages sent as such: the source sends
# at least the pattern
check_stats source "$out/stats.src" $size
check_stats destination "$out/stats.dst" 1
[ $fail = 0 ] && echo "PASS: QEMU RDMA migration ($variant), $saddr -> $daddr:$port, guest RAM checked"
exit $fail
