#!/bin/sh
# on_path.sh PATH CMD [ARGS...]: run one program with URVT_PATH=PATH (shm or
# udp: even its own process's peers go over that link, docs/usage.md) and
# pass only if it passes and its counters show its packets on that link.
set -u
path=$1
shift
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM
run=${URVT_RUN:-}
. "$(dirname "$0")/links.sh"
URVT_PATH=$path URVT_STATS_FILE=$out/stats.prog "$@"
rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: exit $rc"; exit "$rc"; }
links_check "$out" prog "$path" || { echo "FAIL: not (only) over the $path link"; exit 1; }
echo "PASS: over $path"
