#!/bin/sh
# perftest_event_loop.sh RUNS SLOT PROG [ARGS...]
#
# Runs tests/perftest/perftest.sh SLOT PROG ARGS... RUNS times in a row (a
# perftest with -e: sleeping on a completion channel, whose event order
# failed 9 runs in 10 before the receive batch held its events, core/cq.c)
# and fails at the first run that fails, saying which. Each run is bounded
# by PERFTEST_TIMEOUT (seconds, default here 20: a short run takes < 1 s);
# the whole loop by LOOP_TIMEOUT (seconds, default 110) so a CTest stays
# under its own timeout and reports where it stopped. PERFTEST_LINK as for
# perftest.sh. A skip (77: perftest not installed) skips.
set -u
runs=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
PERFTEST_TIMEOUT=${PERFTEST_TIMEOUT:-20}
export PERFTEST_TIMEOUT
budget=${LOOP_TIMEOUT:-110}
start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT INT TERM
i=1
while [ "$i" -le "$runs" ]; do
	if [ $(($(date +%s) - start)) -ge "$budget" ]; then
		echo "FAIL: only $((i - 1)) of $runs runs within ${budget} s"
		exit 1
	fi
	sh "$here/perftest.sh" "$@" >"$log" 2>&1
	rc=$?
	if [ "$rc" -eq 77 ]; then
		cat "$log"
		exit 77
	fi
	if [ "$rc" -ne 0 ]; then
		cat "$log"
		echo "FAIL: run $i of $runs failed (exit $rc): $*"
		exit 1
	fi
	i=$((i + 1))
done
echo "PASS: $runs of $runs runs in $(($(date +%s) - start)) s: $*"
