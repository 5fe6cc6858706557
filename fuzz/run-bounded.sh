#!/bin/sh
# Run every libFuzzer binary (fuzz_*) found under BUILD_DIR/fuzz for SECONDS
# each, one per CPU at a time, seeded from fuzz/corpus/<name without fuzz_
# and _parse...>/ (see below), without writing into the checked-in corpus.
# Builds nothing.
# Exit status: 0 when no fuzzer crashed, 1 otherwise, 2 on usage errors.
#
#   fuzz/run-bounded.sh SECONDS [BUILD_DIR]   (default BUILD_DIR: build-wire-fuzz)
set -u
secs=${1:-}
here=$(cd "$(dirname "$0")" && pwd)
build=${2:-$here/../build-wire-fuzz}
case $secs in ''|*[!0-9]*) echo "usage: $0 SECONDS [BUILD_DIR]" >&2; exit 2 ;; esac
[ -d "$build/fuzz" ] || { echo "no $build/fuzz: configure with -DURVT_FUZZ=ON and build" >&2; exit 2; }

par=$(nproc 2>/dev/null || echo 1)
results=$(mktemp -d "${TMPDIR:-/tmp}/urvt-fuzz-XXXXXX")

# run_one BIN: one fuzzer for SECONDS; its report in $results/<name>.out,
# and $results/<name>.failed when it crashed
run_one() {
	bin=$1 name=$(basename "$1")
	# fuzz_wire_parse -> corpus/wire
	seeds=$here/corpus/$(echo "$name" | sed -e 's/^fuzz_//' -e 's/_.*//')
	work=$(mktemp -d "${TMPDIR:-/tmp}/urvt-$name-XXXXXX")
	art=$work/artifacts/
	mkdir -p "$work/corpus" "$art"
	{
		echo "== $name: ${secs}s, seeds $seeds"
		# new inputs go to the scratch corpus (first dir); the seeds are only read
		if "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
			-artifact_prefix="$art" -print_final_stats=1 \
			"$work/corpus" "$seeds" >"$work/log" 2>&1; then
			tail -n 12 "$work/log" | grep -E 'stat::number_of_executed_units|cov:' | tail -n 2
			rm -rf "$work"
		else
			: >"$results/$name.failed"
			echo "!! $name failed; log and crash inputs kept in $work"
			grep -E 'ERROR|SUMMARY|Test unit written' "$work/log" | head -n 20
		fi
	} >"$results/$name.out" 2>&1
}

# one fuzzer per CPU at a time: the bounded run's wall time is what CI pays
found=0
running=0
for bin in "$build"/fuzz/fuzz_*; do
	[ -f "$bin" ] && [ -x "$bin" ] || continue
	found=$((found + 1))
	run_one "$bin" &
	running=$((running + 1))
	if [ "$running" -ge "$par" ]; then
		wait
		running=0
	fi
done
wait
cat "$results"/*.out 2>/dev/null
status=0
ls "$results"/*.failed >/dev/null 2>&1 && status=1
rm -rf "$results"
[ "$found" -gt 0 ] || { echo "no fuzz_* binaries in $build/fuzz" >&2; exit 2; }
exit $status
