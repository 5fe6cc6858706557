#!/bin/sh
# expect_out.sh PATTERN CMD [ARGS...]: run CMD; pass only if it exits 0 and
# its output has a line matching PATTERN (what a handler that runs after
# main prints: the exit code alone cannot show that it ran).
set -u
pat=$1
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT INT TERM
"$@" >"$out" 2>&1
rc=$?
cat "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: exit $rc"; exit "$rc"; }
grep -q -- "$pat" "$out" || { echo "FAIL: no line matches '$pat'"; exit 1; }
