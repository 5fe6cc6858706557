#!/bin/sh
# mpi_mem.sh PROG NP TLS LIMIT_KIB [ITERS]: Open MPI (pml ucx) runs
# mpi_alltoall_mem with NP ranks on this host (oversubscribed), the job
# under urvt-run with the shm link carrying every byte between ranks.
# Passes when every alltoall byte checked, every rank holds a shm link
# region for each other rank, and no rank's urvt shared memory (Rss of its
# urvt memfds and /dev/shm files) exceeds LIMIT_KIB. Exit 77 without mpirun.
set -u
prog=$1 np=$2 tls=$3 limit=$4 iters=${5:-8}
here=$(cd "$(dirname "$0")" && pwd)
run=${URVT_RUN:-$here/../../build/bin/urvt-run}
command -v mpirun >/dev/null || { echo "SKIP: mpirun missing"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
# the counter files stay in /dev/shm (urvt.<pid>): their pages count too
export UCX_NET_DEVICES=urvt0:1 UCX_TLS="$tls" UCX_WARN_UNUSED_ENV_VARS=n
start=$(date +%s)
# shellcheck disable=SC2086
timeout "${MPI_TEST_TIMEOUT:-170}" "$run" mpirun $root --oversubscribe -np "$np" \
	--mca pml ucx --mca osc ucx --mca btl self \
	-x UCX_NET_DEVICES -x UCX_TLS -x UCX_WARN_UNUSED_ENV_VARS \
	"$prog" "$iters" 65536 "$limit" >"$out/log" 2>&1
rc=$?
grep -v "^alltoall_mem: rank " "$out/log"
# the ranks' lines, in a few rows: rank:rss/pss (KiB)/shm regions
grep "^alltoall_mem: rank " "$out/log" | awk '{printf "%s:%s/%s/%s ", $3, $6, $9, $13} NR % 8 == 0 {print ""}'
echo "mpirun took $(($(date +%s) - start)) s"
fail=0
[ $rc = 0 ] || { echo "FAIL: mpirun exited $rc"; fail=1; }
grep -q "^alltoall_mem: $np ranks, 0 errors, 0 over" "$out/log" || { echo "FAIL: no clean alltoall_mem line"; fail=1; }
[ $fail = 0 ] && echo "PASS: alltoall_mem, $np ranks, urvt shared memory <= $limit KiB each"
exit $fail
