#!/bin/sh
# fio_rdma.sh VERB SLOT [MODE]: fio's rdma ioengine (Debian's fio) over urvt,
# the server and the client two processes on this host.
# MODE any (the default): the host's one RoCE identity, as on rxe or a NIC
#   (docs/host-identity.md). Neither process is given URVT_ADDR, URVT_NETDEV
#   or URVT_SHARE, so both share GID 127.0.0.1.
#     server: fio --ioengine=rdma --rw=read --port=P (no address: fio's rdma
#       server binds INADDR_ANY)
#     client: --hostname=127.0.0.1 --verb=VERB --rw=write
#   Both processes' counter files must name the device 127.0.0.1.
# MODE addr: the older form, each process at an address of its own
#   (URVT_ADDR=127.61.SLOT.1 server, 127.61.SLOT.2 client, the client
#   connecting to 127.61.SLOT.1 from --bindname=127.61.SLOT.2).
# VERB=send: both sides --verify=crc32c; the client fills every 64 KiB block
# with fio's verify header and data, the server checks the crc and offset of
# each block it receives. VERB=write|read: fio cannot check the data (the
# client's job must be a write job and the server never looks at its
# buffers); the test checks that every I/O completed and that the bytes
# crossed urvt (counters of both processes).
set -u
verb=$1 slot=$2 mode=${3:-any}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/apps_lib.sh"
trap 'cleanup' EXIT INT TERM
cleanup() {
	[ -n "${spid:-}" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
	# fio's server job process (blocked waiting for the connection when
	# the run fails) has a process group of its own: timeout's signals miss
	# it, and it would keep the port
	for j in ${sjobs:-}; do
		[ "$(cat /proc/"$j"/comm 2>/dev/null)" = fio ] && kill -9 "$j"
	done
	rm -rf "$out"
}
skip_without fio
fio --enghelp=rdma >/dev/null 2>&1 || { echo "SKIP: fio has no rdma engine"; exit 77; }

port=$((19600 + slot))
unset URVT_ADDR URVT_NETDEV URVT_SHARE
case $mode in
any)
	saddr=127.0.0.1 senv='' cenv='' bind='' ;;
addr)
	saddr=127.61.$slot.1 caddr=127.61.$slot.2
	senv=URVT_ADDR=$saddr cenv=URVT_ADDR=$caddr bind=--bindname=$caddr ;;
*)
	echo "usage: fio_rdma.sh write|read|send SLOT [any|addr]"; exit 2 ;;
esac
# fio sets no RNR retries (rnr_retry_count 0): a SEND that finds no
# receive posted fails the QP. The server posts one receive per block of
# the whole run (iodepth 64, 64 blocks) before the client starts sending.
bs=65536 size=$((4 * 1024 * 1024))
ver=
[ "$verb" = send ] && ver="--verify=crc32c --do_verify=0 --verify_state_save=0"

# shellcheck disable=SC2086
env $senv URVT_STATS_FILE="$out/stats.server" timeout -k 5 "$tmo" "$run" \
	fio --name=server --ioengine=rdma --port=$port --rw=read --bs=$bs \
	--size=$size --iodepth=64 $ver >"$out/server" 2>&1 &
spid=$!
wait_for "$out/server" "waiting for connection" 30 || bad "the fio server did not listen"
sjobs=$(for f in $(pgrep -P "$spid"); do pgrep -P "$f"; done)

# shellcheck disable=SC2086
env $cenv URVT_STATS_FILE="$out/stats.client" timeout -k 5 "$tmo" "$run" \
	fio --name=client --ioengine=rdma --hostname=$saddr $bind \
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
if [ "$mode" = any ]; then
	# one identity: both devices are 127.0.0.1's
	for w in server client; do
		check_gid $w "$out/stats.$w" 127.0.0.1
	done
fi
if [ "$verb" = send ]; then
	# the server's read job verified each block it received
	grep -q "READ: bw=" "$out/server" || bad "the server read nothing"
fi
[ $fail = 0 ] && echo "PASS: fio rdma verb=$verb, $size bytes, server ${senv:-at INADDR_ANY}, client to $saddr (mode $mode)"
exit $fail
