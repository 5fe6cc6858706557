#!/bin/sh
# tgt_iser.sh SLOT: Linux SCSI target daemon tgtd (Debian's tgt) serving a
# file-backed LUN over iSER, libiscsi's initiator tools and qemu-io (QEMU's
# libiscsi block driver) as initiators, every process under urvt-run.
#   target    127.61.SLOT.1: tgtd -f -C CTL --iscsi portal=127.61.SLOT.1:3260,
#             URVT_ADDR=127.61.SLOT.1 (tgtd's iSER listener takes no address
#             option: it binds INADDR_ANY, which urvt puts at URVT_ADDR)
#   initiator 127.61.SLOT.2: iscsi-inq, iscsi-readcapacity16, then qemu-io
#             writes 1 MiB of 0xab at offset 0 and reads it back with -P
#             (pattern check), and the LUN's backing file must hold it.
# tgtd's control socket is private to the test (-C CTL); root only.
set -u
slot=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/apps_lib.sh"
trap 'cleanup' EXIT INT TERM
cleanup() {
	# tgtd leaves on SIGINT
	[ -n "${tpid:-}" ] && kill -INT "$tpid" 2>/dev/null && wait "$tpid" 2>/dev/null
	rm -rf "$out"
}
skip_without tgtd tgtadm iscsi-inq iscsi-readcapacity16 qemu-io
[ "$(id -u)" = 0 ] || { echo "SKIP: tgtd needs root"; exit 77; }

taddr=127.61.$slot.1 iaddr=127.61.$slot.2 ctl=$((6100 + slot))
iqn=iqn.2026-01.org.urvt:apps$slot
url=iser://$taddr:3260/$iqn/1
truncate -s 16M "$out/lun.img"
adm() { timeout 10 tgtadm -C $ctl --lld iser "$@"; }

URVT_ADDR=$taddr URVT_STATS_FILE=$out/stats.tgtd timeout -k 5 "$tmo" "$run" \
	tgtd -f -C $ctl --iscsi portal=$taddr:3260 >"$out/tgtd.log" 2>&1 &
tpid=$!
i=0
until adm --mode target --op show >/dev/null 2>&1 || [ $i -ge 50 ]; do
	sleep 0.1; i=$((i + 1))
done
adm --mode target --op new --tid 1 --targetname $iqn &&
	adm --mode logicalunit --op new --tid 1 --lun 1 --backing-store "$out/lun.img" &&
	adm --mode target --op bind --tid 1 --initiator-address ALL ||
	bad "tgtadm could not set up the iSER target"

ini() { URVT_ADDR=$iaddr URVT_STATS_FILE=$out/stats.$1 timeout -k 5 "$tmo" "$run" "$@"; }
ini iscsi-inq "$url" >"$out/inq" 2>&1 || bad "iscsi-inq over iSER failed"
cat "$out/inq"
ini iscsi-readcapacity16 "$url" >"$out/cap" 2>&1 || bad "iscsi-readcapacity16 over iSER failed"
cat "$out/cap"
grep -q "Block Length:512" "$out/cap" || bad "no 512-byte blocks in READ CAPACITY(16)"
ini qemu-io -f raw -c 'write -P 0xab 0 1M' -c 'read -P 0xab 0 1M' "$url" >"$out/qio" 2>&1 ||
	bad "qemu-io over iSER failed"
cat "$out/qio"
grep -q "Pattern verification failed" "$out/qio" && bad "qemu-io read back other data"
grep -q "^read 1048576/1048576 bytes" "$out/qio" || bad "qemu-io did not read 1 MiB"
# the bytes are in the LUN's backing file
head -c 1048576 /dev/zero | tr '\0' '\253' >"$out/want"
head -c 1048576 "$out/lun.img" | cmp -s - "$out/want" || bad "the backing file does not hold the pattern"
echo "--- tgtd"; grep -v "oom-killer\|nr_open" "$out/tgtd.log" | tail -20
# the written MiB went from the initiator (qemu-io) to the target
check_stats qemu-io "$out/stats.qemu-io" 1048576
check_stats tgtd "$out/stats.tgtd" 1048576
[ $fail = 0 ] && echo "PASS: tgtd iSER target at $taddr, libiscsi and qemu-io at $iaddr, 1 MiB pattern written and read back"
exit $fail
