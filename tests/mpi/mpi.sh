#!/bin/sh
# mpi.sh MPI_CHECK NP TLS: Open MPI (pml ucx) runs mpi_check with NP ranks
# on this host, the whole job under urvt-run: every rank opens urvt0 at its
# own loopback address and UCX (UCX_TLS=TLS, UCX_NET_DEVICES=urvt0:1)
# carries MPI's traffic between them. Passes when mpi_check reports 0 errors
# and every rank's urvt counters show its traffic (ranks 0 and 1 carry the
# 1 MiB ping-pongs; with rc_verbs, RC QPs carry them). The closing "links:"
# lines say which link and QP type carried what. Exit 77 without mpirun.
set -u
prog=$1 np=$2 tls=$3
here=$(cd "$(dirname "$0")" && pwd)
run=${URVT_RUN:-$here/../../build/bin/urvt-run}
stat=${URVT_STAT:-$(dirname "$run")/urvt-stat}
# MPI_FLAVOR=mpich: Debian's MPICH 4 (ch4:ucx) instead, its shared memory
# off (MPIR_CVAR_NOLOCAL=1) so that UCX carries every byte between ranks
flavor=${MPI_FLAVOR:-openmpi}
mpirun=mpirun tag=mpi_check unit=ranks spml=
[ "$flavor" = mpich ] && mpirun=mpirun.mpich
# MPI_FLAVOR=oshmem: Open MPI's OpenSHMEM (oshrun, spml ucx) runs shmem_check
[ "$flavor" = oshmem ] && mpirun=oshrun tag=shmem_check unit=PEs spml="--mca spml ucx"
command -v $mpirun >/dev/null || { echo "SKIP: $mpirun ($flavor) missing"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
export UCX_NET_DEVICES=urvt0:1 UCX_TLS="$tls" UCX_WARN_UNUSED_ENV_VARS=n URVT_STATS_FILE="$out/stats.%p"
if [ "$flavor" = mpich ]; then
	MPIR_CVAR_NOLOCAL=1 timeout "${MPI_TEST_TIMEOUT:-120}" "$run" $mpirun -np "$np" -genvall \
		"$prog" >"$out/log" 2>&1
else
	# shellcheck disable=SC2086
	timeout "${MPI_TEST_TIMEOUT:-120}" "$run" $mpirun $root --oversubscribe -np "$np" \
		$spml --mca pml ucx --mca osc ucx --mca btl "${MPI_BTL:-self}" \
		-x UCX_NET_DEVICES -x UCX_TLS -x UCX_WARN_UNUSED_ENV_VARS -x URVT_STATS_FILE \
		"$prog" >"$out/log" 2>&1
fi
rc=$?
cat "$out/log"
fail=0
[ $rc = 0 ] || { echo "FAIL: mpirun exited $rc"; fail=1; }
grep -q "^$tag: $np $unit, 0 errors$" "$out/log" || { echo "FAIL: no clean $tag line"; fail=1; }
n=0 big=0
for f in "$out"/stats.*; do
	[ -f "$f" ] || continue
	n=$((n + 1))
	"$stat" -a "$f" >"$f.txt"
	ctr() { awk -v c="$1" '/^  qp /{exit} $1 == c { print $2 }' "$f.txt"; }
	qtx() { awk -v t="($1)" 'index($0, "  qp ") == 1 {q = index($0, t) > 0; next} q && $1 == "tx_bytes" {n += $2} END {print n + 0}' "$f.txt"; }
	txb=$(ctr tx_bytes) rc_b=$(qtx RC) ud_b=$(qtx UD)
	echo "links: $(head -1 "$f.txt" | tr -s ' '): tx $txb bytes (udp $(ctr udp_tx_packets), shm $(ctr shm_tx_packets) packets); RC QPs $rc_b bytes, UD QPs $ud_b bytes"
	[ "$txb" -gt 0 ] || { echo "FAIL: a rank sent nothing over urvt"; fail=1; }
	# READs answered by reference (docs/shm.md "Single copy"): what a rank
	# sent that way is not in tx_bytes
	cmab=$(($(ctr cma_ref_bytes) + 0))
	if [ "$txb" -gt 10000000 ] || [ $((txb + cmab)) -gt 10000000 ]; then
		big=$((big + 1))
		case $tls in rc_verbs*) [ $((rc_b + cmab)) -gt 10000000 ] ||
			{ echo "FAIL: RC did not carry the ping-pong"; fail=1; } ;; esac
	fi
done
[ $n = "$np" ] || { echo "FAIL: $n counter files for $np ranks"; fail=1; }
# MPI_NEED_CTR=name: some rank's counter name is above 0 (the path under test was taken)
if [ -n "${MPI_NEED_CTR:-}" ]; then
	cat "$out"/stats.*.txt | awk -v c="$MPI_NEED_CTR" '/^  qp /{exit} $1 == c && $2 > 0 {f = 1} END {exit !f}' ||
		{ echo "FAIL: no rank counted $MPI_NEED_CTR"; fail=1; }
fi
# ranks 0 and 1 sent 10 MiB of 1 MiB ping-pongs each, over urvt (or
# read them from each other, by reference)
[ $big -ge 2 ] || { echo "FAIL: the ping-pong did not go over urvt ($big ranks sent > 10 MB)"; fail=1; }
[ $fail = 0 ] && echo "PASS: $tag ($flavor), $np ranks, UCX_TLS=$tls"
exit $fail
