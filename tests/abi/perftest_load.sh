#!/bin/sh
# perftest_load.sh URVT_RUN URVT_LIBDIR: Debian's ib_write_bw loads on urvt.
#
# ib_write_bw links libmlx5.so.1 and libefa.so.1, which import ~70
# IBVERBS_PRIVATE_34 symbols and are bound immediately (BIND_NOW): one
# missing symbol and the loader kills the program before main(). So:
#  1. the loader maps libibverbs.so.1 to urvt's copy, and no other copy;
#  2. every symbol libmlx5/libefa/librdmacm take from libibverbs binds to
#     urvt's copy (LD_DEBUG=bindings);
#  3. "ib_write_bw -h" prints its usage and exits exactly as it does on
#     rdma-core (perftest 4.5 exits 1 after -h), with no loader error.
# Exit 77 (skip) without perftest.
set -u
urvt_run=$1
libdir=$(cd "$2" && pwd -P) || exit 1
prog=$(command -v ib_write_bw) || { echo "SKIP: ib_write_bw (perftest) not installed"; exit 77; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

# 1. Which file provides libibverbs.so.1 (the loader's "ldd" mode).
# (Set for PROG only: the urvt-run shell itself must run normally.)
"$urvt_run" env LD_TRACE_LOADED_OBJECTS=1 "$prog" >"$tmp/ldd" 2>&1
grep 'libibverbs\.so\.1' "$tmp/ldd"
if ! grep -q "libibverbs\.so\.1 => $libdir/libibverbs\.so\.1 " "$tmp/ldd"; then
	echo "FAIL: libibverbs.so.1 does not resolve to $libdir"
	fail=1
fi
if [ "$(grep -c 'libibverbs' "$tmp/ldd")" -ne 1 ]; then
	echo "FAIL: more than one libibverbs mapped"
	fail=1
fi

# 2 + 3. Run it, recording every symbol binding into a libibverbs.
"$urvt_run" env LD_DEBUG=bindings LD_DEBUG_OUTPUT="$tmp/bind" \
	"$prog" -h >"$tmp/out" 2>"$tmp/err"
rc=$?
"$prog" -h >/dev/null 2>&1
want=$?
cat "$tmp/err"
if grep -qi 'symbol lookup error\|undefined symbol\|version .* not found' "$tmp/err"; then
	echo "FAIL: loader error"
	fail=1
fi
if [ $rc -ne $want ]; then
	echo "FAIL: exit status $rc through urvt-run, $want on rdma-core"
	fail=1
fi
if ! grep -q '^Usage:' "$tmp/out"; then
	echo "FAIL: no usage text"
	fail=1
fi
cat "$tmp"/bind.* >"$tmp/bindings" 2>/dev/null
to_urvt=$(grep -c "to $libdir/libibverbs\.so\.1 " "$tmp/bindings")
to_other=$(grep 'to [^ ]*libibverbs\.so\.1 ' "$tmp/bindings" | grep -vc "to $libdir/")
private=$(grep "to $libdir/libibverbs\.so\.1 " "$tmp/bindings" | grep -c 'IBVERBS_PRIVATE_34')
for lib in libmlx5.so.1 libefa.so.1; do
	n=$(grep "file [^ ]*/$lib " "$tmp/bindings" | grep -c "to $libdir/libibverbs\.so\.1 ")
	echo "$lib: $n bindings to urvt's libibverbs"
	[ "$n" -gt 0 ] || { echo "FAIL: $lib bound nothing to urvt"; fail=1; }
done
echo "bindings into urvt's libibverbs: $to_urvt ($private IBVERBS_PRIVATE_34), into another: $to_other"
[ "$to_other" -eq 0 ] || { echo "FAIL: symbols bound to another libibverbs"; fail=1; }
[ "$private" -gt 0 ] || { echo "FAIL: no private symbol bound"; fail=1; }
head -3 "$tmp/out"
echo "ib_write_bw -h: exit $rc (rdma-core: $want)"
[ $fail -eq 0 ] && echo PASS || echo FAIL
exit $fail
