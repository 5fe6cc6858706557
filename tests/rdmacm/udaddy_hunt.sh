#!/bin/sh
# udaddy_hunt.sh PAIRS [BUSY]
#
# A hunt for lost UD datagrams between two processes of one host, by hand
# (not a CTest: it takes minutes): the CTest cm_host_udaddy's pair
# (cm_pair.sh host 8 udaddy: Debian's udaddy, 4 UD connections of 20
# messages) PAIRS times, while BUSY shell loops (default 3) keep both CPUs
# busy. The server exits right after its last reply, which is what found the
# shm handshake bug of docs/rdmacm.md "Tests" (1 in 15 to 80 pairs hung in
# the ASan build before the fix). A pair gets HUNT_TIMEOUT seconds (default
# 20; cm_pair.sh's deadline). Prints the failed pairs' ends; exits 1 if one
# failed.
#   URVT_RUN  the urvt-run to use (cm_pair.sh's default otherwise)
set -u
pairs=${1:?usage: udaddy_hunt.sh PAIRS [BUSY]}
busy=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
hogs=""
# shellcheck disable=SC2086 # $hogs: one pid per word
trap 'kill $hogs 2>/dev/null; rm -rf "$out"' EXIT INT TERM

for _ in $(seq 1 "$busy"); do
	timeout 3600 sh -c 'while :; do :; done' &
	hogs="$hogs $!"
done
failed=0
for i in $(seq 1 "$pairs"); do
	if ! CM_PAIR_TIMEOUT=${HUNT_TIMEOUT:-20} "$here/cm_pair.sh" host 8 udaddy >"$out/pair" 2>&1; then
		failed=$((failed + 1))
		echo "pair $i failed:"
		tail -n 4 "$out/pair"
	fi
done
echo "udaddy_hunt: $pairs pairs, $failed failed"
[ "$failed" -eq 0 ]
