#!/bin/sh
# symbol_diff.sh URVT_LIB SYSTEM_LIB: urvt's libibverbs.so.1 exports exactly
# what rdma-core's does. Compared, as sets:
#   - every defined dynamic symbol as "type binding name@VERSION" (hidden,
#     non-default version) or "name@@VERSION" (default), plus the version
#     node symbols themselves;
#   - the version definitions with their parents, and the soname.
# Prints every difference; exits 1 on any.
set -u
urvt=$1
system=$2
READELF=${READELF:-readelf}

for f in "$urvt" "$system"; do
	[ -r "$f" ] || { echo "FAIL: cannot read $f"; exit 1; }
done

# Defined dynamic symbols: "TYPE BIND name@ver" (UND and the null entry out).
syms() {
	"$READELF" --dyn-syms -W "$1" |
		awk '$1 ~ /^[0-9]+:$/ && $7 != "UND" && $8 != "" { print $4, $5, $8 }' |
		LC_ALL=C sort -u
}

# Version definitions: "name <- parent..." and the BASE entry (soname).
verdefs() {
	"$READELF" -V -W "$1" | awk '
		/^Version definition section/ { on = 1; next }
		/^Version (needs|symbols) section/ { on = 0 }
		on && /Name:/ {
			if (cur != "") print cur
			cur = $NF
			if ($0 ~ /Flags: BASE/) cur = "BASE " cur
			next
		}
		on && /Parent [0-9]+:/ { cur = cur " <- " $NF }
		END { if (cur != "") print cur }' | LC_ALL=C sort
}

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
syms "$system" >"$tmp/sys.syms"
syms "$urvt" >"$tmp/urvt.syms"
verdefs "$system" >"$tmp/sys.vd"
verdefs "$urvt" >"$tmp/urvt.vd"

status=0
if [ ! -s "$tmp/sys.syms" ]; then
	echo "FAIL: no symbols read from $system"
	exit 1
fi
missing=$(LC_ALL=C comm -23 "$tmp/sys.syms" "$tmp/urvt.syms")
extra=$(LC_ALL=C comm -13 "$tmp/sys.syms" "$tmp/urvt.syms")
if [ -n "$missing" ]; then
	echo "Exported by rdma-core but not by urvt:"
	echo "$missing" | sed 's/^/  - /'
	status=1
fi
if [ -n "$extra" ]; then
	echo "Exported by urvt but not by rdma-core:"
	echo "$extra" | sed 's/^/  + /'
	status=1
fi
if ! diff -u "$tmp/sys.vd" "$tmp/urvt.vd" >"$tmp/vd.diff"; then
	echo "Version definitions differ (- rdma-core, + urvt):"
	sed -n '3,$p' "$tmp/vd.diff"
	status=1
fi

n=$(wc -l <"$tmp/sys.syms")
total=$(wc -l <"$tmp/urvt.syms")
defaults=$(grep -c '@@' "$tmp/urvt.syms")
hidden=$(grep -c '[^@]@[^@]' "$tmp/urvt.syms")
nodes=$(grep -vc '@' "$tmp/urvt.syms")
echo "rdma-core: $n entries; urvt: $total ($defaults default, $hidden non-default, $nodes version nodes)"
if [ $status -eq 0 ]; then
	echo "PASS: identical symbol and version sets"
else
	echo "FAIL"
fi
exit $status
