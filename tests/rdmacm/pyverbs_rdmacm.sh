#!/bin/sh
# pyverbs_rdmacm.sh: rdma-core v44's own RDMA CM tests (tests/test_rdmacm.py,
# Debian's python3-pyverbs) through urvt-run, unmodified.
#
# The tests are single-node: a passive and an active process, both on the
# device's address (the first address of the interface that
# /sys/class/infiniband/urvt0/device/net/ names: liburvt-sysfs.so's view,
# docs/sysfs.md). That is 127.0.0.1 on lo, so they run in a network
# namespace of their own where no other urvt process holds it; the active
# side's source 127.0.0.1 becomes a free 127.0.0.x (docs/rdmacm.md).
#
# Passes when every test that does not skip passes, and all 10 ran (the
# three multicast ones included: docs/multicast.md).
set -u
here=$(cd "$(dirname "$0")" && pwd)
run=${URVT_RUN:-$here/../../build/bin/urvt-run}
# the suite: the copy vendored in tests/pyverbs/rdma-core-v44 (VENDORED.md
# there), unless RDMA_CORE_TESTS names another tests/ folder of rdma-core
tests=${RDMA_CORE_TESTS:-$here/../pyverbs/rdma-core-v44/tests}
# run_tests.py would write __pycache__ into the vendored folder
export PYTHONDONTWRITEBYTECODE=1
py=/usr/bin/python3
ns=urvt-pyv$$
out=$(mktemp)

if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
	echo "SKIP: needs root (a network namespace of its own)"; exit 77
fi
if [ ! -f "$tests/test_rdmacm.py" ] || ! $py -c 'import pyverbs' 2>/dev/null; then
	echo "SKIP: no rdma-core tests at $tests or no python3-pyverbs"; exit 77
fi
trap 'ip netns del $ns 2>/dev/null; rm -f "$out"' EXIT INT TERM
ip netns add "$ns" && ip -n "$ns" link set lo up || exit 1
(cd "$tests" && timeout 300 ip netns exec "$ns" "$run" $py run_tests.py --dev urvt0 -v test_rdmacm) >"$out" 2>&1
rc=$?
cat "$out"
ran=$(sed -n 's/^Ran \([0-9]*\) tests.*/\1/p' "$out")
skipped=$(sed -n 's/.*skipped=\([0-9]*\).*/\1/p' "$out" | tail -1)
# from unittest's summary: a test's "ok" may follow a line of its stderr
passed=$(( ${ran:-0} - ${skipped:-0} ))
if [ "$rc" -ne 0 ] || ! grep -q '^OK' "$out"; then
	echo "FAIL: run_tests.py exit $rc"; exit 1
fi
if [ "$passed" -lt 10 ]; then
	echo "FAIL: only $passed tests passed (not skipped)"; exit 1
fi
echo "PASS: $passed of rdma-core's test_rdmacm passed through urvt-run"
