#!/bin/sh
# udaddy_hunt.sh PAIRS [BUSY]
#
# A hunt for lost UD datagrams between two processes of one host, by hand
# (not a CTest: it takes minutes): PAIRS runs of Debian's udaddy server
# (127.41.8.1) and client through urvt-run, 4 UD connections of 20 messages
# each, while BUSY shell loops (default 3) keep both CPUs busy. The server
# exits right after its last reply, which is what found the shm handshake
# bug of docs/rdmacm.md "Tests" (1 in 15 to 80 pairs hung in the ASan build
# before the fix). Each side gets 60 s; a client still running after 5 s
# counts as hung. Prints the hung pairs; exits 1 if there was one.
#   URVT_RUN  the urvt-run to use (default: ../../build/bin/urvt-run)
set -u
pairs=${1:?usage: udaddy_hunt.sh PAIRS [BUSY]}
busy=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
run=${URVT_RUN:-$here/../../build/bin/urvt-run}
out=$(mktemp -d)
hogs=""
# shellcheck disable=SC2086 # $hogs: one pid per word
trap 'kill $hogs 2>/dev/null; rm -rf "$out"' EXIT INT TERM

for _ in $(seq 1 "$busy"); do
	timeout 3600 sh -c 'while :; do :; done' &
	hogs="$hogs $!"
done
hung=0
for i in $(seq 1 "$pairs"); do
	timeout 60 "$run" udaddy -b 127.41.8.1 -c 4 -C 20 > "$out/srv" 2>&1 &
	sp=$!
	sleep 0.5
	timeout 60 "$run" udaddy -s 127.41.8.1 -c 4 -C 20 > "$out/cli" 2>&1 &
	cp=$!
	for _ in $(seq 1 50); do
		kill -0 "$cp" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$cp" 2>/dev/null; then
		hung=$((hung + 1))
		echo "pair $i: the client still runs after 5 s"
		kill "$cp" 2>/dev/null
	fi
	wait "$cp"
	wait "$sp"
done
echo "udaddy_hunt: $pairs pairs, $hung hung"
[ "$hung" -eq 0 ]
