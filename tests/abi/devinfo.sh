#!/bin/sh
# devinfo.sh URVT_RUN ADDR: "urvt-run ibv_devinfo -v" (Debian's ibverbs-utils,
# unmodified) shows urvt0 with an active port and the GID of ADDR, an IPv4
# address given to the device via URVT_ADDR. Exit 77 without ibv_devinfo.
set -u
urvt_run=$1
addr=$2
prog=$(command -v ibv_devinfo) || { echo "SKIP: ibv_devinfo (ibverbs-utils) not installed"; exit 77; }
out=$(URVT_ADDR=$addr "$urvt_run" "$prog" -v 2>&1)
rc=$?
echo "$out"
fail=0
[ $rc -eq 0 ] || { echo "FAIL: ibv_devinfo -v exited $rc"; fail=1; }
printf '%s\n' "$out" | grep -q '^hca_id:[[:space:]]*urvt0$' ||
	{ echo "FAIL: no hca_id urvt0"; fail=1; }
printf '%s\n' "$out" | grep -q 'state:[[:space:]]*PORT_ACTIVE' ||
	{ echo "FAIL: port not PORT_ACTIVE"; fail=1; }
printf '%s\n' "$out" | grep -q 'link_layer:[[:space:]]*Ethernet' ||
	{ echo "FAIL: link layer not Ethernet"; fail=1; }
# GID 0 is ::ffff:ADDR; devinfo prints it either as an address or as hex
# groups (0000:...:ffff:HHHH:HHHH), and the type as RoCE v2.
hex=$(printf '%s\n' "$addr" | awk -F. '{ printf "%02x%02x:%02x%02x", $1, $2, $3, $4 }')
gidline=$(printf '%s\n' "$out" | grep 'GID\[ *0\]')
printf '%s\n' "$gidline" | grep -q -e "::ffff:$addr" -e "ffff:$hex" ||
	{ echo "FAIL: GID[0] is not ::ffff:$addr"; fail=1; }
printf '%s\n' "$gidline" | grep -q 'RoCE v2' ||
	{ echo "FAIL: GID[0] type is not RoCE v2"; fail=1; }
[ $fail -eq 0 ] && echo PASS || echo FAIL
exit $fail
