#!/bin/sh
# ucx_info.sh URVT_RUN: "urvt-run ucx_info -d" lists urvt0:1 with rc_verbs and
# ud_verbs (the /sys view of liburvt-sysfs.so); with URVT_SYSFS=0 UCX finds
# no urvt0 (no /dev/infiniband/uverbs-urvt0), which is why the view exists.
# Exit 77 without ucx_info.
set -u
run=$1
command -v ucx_info >/dev/null || { echo "SKIP: ucx_info (ucx-utils) missing"; exit 77; }
out=$(URVT_STATS=0 URVT_ADDR=127.252.0.9 timeout 60 "$run" ucx_info -d 2>&1)
rc=$?
fail=0
# "Transport: X" then "Device: urvt0:1" on the next line
pairs=$(printf '%s\n' "$out" | awk '/Transport:/ {t = $NF} /Device:/ && t {print t "@" $NF; t = ""}')
echo "$pairs" | tr '\n' ' '; echo
[ $rc = 0 ] || { echo "FAIL: ucx_info -d exited $rc"; fail=1; }
for tl in rc_verbs ud_verbs; do
	echo "$pairs" | grep -qx "$tl@urvt0:1" || { echo "FAIL: no $tl on urvt0:1"; fail=1; }
done
printf '%s\n' "$out" | grep -q "Memory domain: urvt0" || { echo "FAIL: no memory domain urvt0"; fail=1; }
off=$(URVT_SYSFS=0 URVT_STATS=0 URVT_ADDR=127.252.0.9 timeout 60 "$run" ucx_info -d 2>&1)
printf '%s\n' "$off" | grep -q "urvt0" && { echo "FAIL: URVT_SYSFS=0 still lists urvt0"; fail=1; }
[ $fail = 0 ] && echo PASS
exit $fail
