#!/bin/sh
# Proves the layer check can fail: a copy of src/ and docs/architecture.md
# in which a core file includes a link header must be rejected, with a
# message that names the file.
set -eu
py=${1:-python3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/docs"
cp -R "$root/src" "$tmp/src"
cp "$root/docs/architecture.md" "$tmp/docs/"
# The unmodified copy passes (with the same allowlist) ...
"$py" "$here/check_layers.py" "$tmp" "$here/allowlist.txt" >"$tmp/ok.log" || {
	echo "FAIL: the unmodified copy already fails"; cat "$tmp/ok.log"; exit 1; }
# ... and one wrong include makes it fail, naming the file.
printf '#include "link/udp.h"\n' >>"$tmp/src/core/pd.c"
if "$py" "$here/check_layers.py" "$tmp" "$here/allowlist.txt" >"$tmp/bad.log"; then
	echo "FAIL: core/pd.c including link/udp.h was accepted"; cat "$tmp/bad.log"; exit 1
fi
grep -q 'LAYER VIOLATION: src/core/pd.c:[0-9]*: #include "link/udp.h"' "$tmp/bad.log" || {
	echo "FAIL: the message does not name src/core/pd.c"; cat "$tmp/bad.log"; exit 1; }
# A link dependency the wrong way fails too.
cp "$root/src/core/pd.c" "$tmp/src/core/pd.c"
printf 'target_link_libraries(urvt_wire PUBLIC urvt_core)\n' >>"$tmp/src/wire/CMakeLists.txt"
if "$py" "$here/check_layers.py" "$tmp" "$here/allowlist.txt" >"$tmp/bad2.log"; then
	echo "FAIL: urvt_wire linking urvt_core was accepted"; cat "$tmp/bad2.log"; exit 1
fi
grep -q 'LAYER VIOLATION: src/wire/CMakeLists.txt: urvt_wire links urvt_core' "$tmp/bad2.log" || {
	echo "FAIL: the message does not name src/wire/CMakeLists.txt"; cat "$tmp/bad2.log"; exit 1; }
grep 'LAYER VIOLATION' "$tmp/bad.log" "$tmp/bad2.log"
echo "ok: the layer check rejects both"
