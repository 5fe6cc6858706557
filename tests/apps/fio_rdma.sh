#!/bin/sh
# fio_rdma.sh VERB SLOT: fio's rdma ioengine (Debian's fio) over urvt, the
# server and the client two processes on this host.
#   server 127.61.SLOT.1: fio --ioengine=rdma --rw=read --port=P; fio's server
#     binds INADDR_ANY (its bindname option is not usable on the server side,
#     docs/ecosystem.md), so URVT_ADDR=127.61.SLOT.1 is the address it has
#   client 127.61.SLOT.2: --hostname=127.61.SLOT.1 --bindname=127.61.SLOT.2
#     --verb=VERB --rw=write
# VERB=send: both sides --verify=crc32c; the client fills every 64 KiB block
# with fio's verify header and data, the server checks the crc and offset of
# each block it receives. VERB=write|read: fio cannot check the data (the
# client's job must be a write job and the server never looks at its
# buffers); the test checks that every I/O completed and that the bytes
# crossed urvt (counters of both processes).
set -u
verb=$1 slot=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/apps_lib.sh"
trap 'cleanup' EXIT INT TERM
cleanup() {
	[ -n "${spid:-}" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
	rm -rf "$out"
}
skip_without fio
fio --enghelp=rdma >/dev/null 2>&1 || { echo "SKIP: fio has no rdma engine"; exit 77; }

saddr=127.61.$slot.1 caddr=127.61.$slot.2 port=$((19600 + slot))
# fio sets no RNR retries (rnr_retry_count 0): a SEND that finds no
# receive posted fails the QP. The server posts one receive per block of
# the whole run (iodepth 64, 64 blocks) before the client starts sending.
bs=65536 size=$((4 * 1024 * 1024))
ver=
[ "$verb" = send ] && ver="--verify=crc32c --do_verify=0 --verify_state_save=0"

# shellcheck disable=SC2086
URVT_ADDR=$saddr URVT_STATS_FILE=$out/stats.server timeout -k 5 "$tmo" "$run" \
	fio --name=server --ioengine=rdma --port=$port --rw=read --bs=$bs \
	--size=$size --iodepth=64 $ver >"$out/server" 2>&1 &
spid=$!
wait_for "$out/server" "waiting for connection" 30 || bad "the fio server did not listen"

# shellcheck disable=SC2086
URVT_ADDR=$caddr URVT_STATS_FILE=$out/stats.client timeout -k 5 "$tmo" "$run" \
	fio --name=client --ioengine=rdma --hostname=$saddr --bindname=$caddr \
	--port=$port --verb=$verb --rw=write --bs=$bs --size=$size --iodepth=8 \
	$ver >"$out/client" 2>&1
crc=$?
wait "$spid"
src=$?
spid=
echo "--- server"; cat "$out/server"
echo "--- client"; cat "$out/client"
[ $crc = 0 ] || bad "fio client exited $crc"
[ $src = 0 ] || bad "fio server exited $src"
grep -qiE "verify: bad|verify failed" "$out/server" "$out/client" && bad "fio reported a verify error"
grep -q "err= 0" "$out/client" || bad "the client job did not end with err= 0"
grep -q "err= 0" "$out/server" || bad "the server job did not end with err= 0"
case $verb in
write|send)
	check_stats client "$out/stats.client" "$size"
	check_stats server "$out/stats.server" 1 ;;
read)
	# READ responses carry the data from the server
	check_stats client "$out/stats.client" 1
	check_stats server "$out/stats.server" "$size" ;;
esac
if [ "$verb" = send ]; then
	# the server's read job verified each block it received
	grep -q "READ: bw=" "$out/server" || bad "the server read nothing"
fi
[ $fail = 0 ] && echo "PASS: fio rdma verb=$verb, $size bytes, $saddr <- $caddr"
exit $fail
