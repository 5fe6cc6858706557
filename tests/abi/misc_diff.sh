#!/bin/sh
# misc_diff.sh URVT_RUN DUMP: the helper tables of urvt's libibverbs equal
# rdma-core's. DUMP is linked against the system library; run plainly it
# uses rdma-core, run through urvt-run it uses urvt.
set -u
urvt_run=$1
dump=$2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

"$dump" >"$tmp/system" || { echo "FAIL: $dump on the system library"; exit 1; }
"$urvt_run" "$dump" >"$tmp/urvt" || { echo "FAIL: $dump through urvt-run"; exit 1; }
if ! diff -u "$tmp/system" "$tmp/urvt"; then
	echo "FAIL: urvt's helper tables differ from rdma-core's (- system, + urvt)"
	exit 1
fi
echo "PASS: $(wc -l <"$tmp/urvt") answers identical"
