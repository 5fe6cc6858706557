#!/bin/sh
# Proves each rule of check_sizes.py can fail. It runs on a small tree made
# here, not on a copy of src/, so that it holds whatever the real tree's
# state: a clean tree at the limits (a 1500-line file, a 120-line function,
# "shm" in a transport comment and string) passes, and one line more, or
# one shm identifier in transport code, fails with a message naming the file.
set -eu
py=${1:-python3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A function of $2 lines in all, `{` and `}` at column 0 included.
function_of() {
	awk -v name="$1" -v n="$2" 'BEGIN {
		printf "int %s(int x)\n{\n", name
		for (i = 2; i < n - 1; i++)
			printf "\tx += %d;\n", i
		printf "\treturn x;\n}\n" }'
}

# A header of exactly $1 lines.
header_of() {
	awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++) printf "/* line %d */\n", i }'
}

make_tree() {
	rm -rf "$tmp/t"
	mkdir -p "$tmp/t/src/core" "$tmp/t/src/transport"
	function_of at_the_limit 120 >"$tmp/t/src/core/long.c"
	header_of 1500 >"$tmp/t/src/core/big.h"
	cat >"$tmp/t/src/transport/tx.c" <<-'EOF'
	/* the shm link is reached through core/link.h only */
	static const char *const link_name = "shm";
	EOF
}

# expect_fail CASE PATTERN: the checker rejects the tree with a line
# matching PATTERN.
expect_fail() {
	if "$py" "$here/check_sizes.py" "$tmp/t" >"$tmp/$1.log"; then
		echo "FAIL: $1 was accepted"; cat "$tmp/$1.log"; exit 1
	fi
	grep -q "$2" "$tmp/$1.log" || {
		echo "FAIL: $1: no line matching '$2'"; cat "$tmp/$1.log"; exit 1; }
	grep 'SIZE VIOLATION' "$tmp/$1.log"
}

make_tree
"$py" "$here/check_sizes.py" "$tmp/t" >"$tmp/ok.log" || {
	echo "FAIL: the tree at the limits already fails"; cat "$tmp/ok.log"; exit 1; }

make_tree
header_of 1501 >"$tmp/t/src/core/big.h"
expect_fail file_lines 'SIZE VIOLATION: src/core/big.h:[0-9]*: file has 1501 lines'

make_tree
{ printf '#include <stddef.h>\n\n'; function_of one_too_long 121; } >"$tmp/t/src/core/long.c"
expect_fail function_lines 'SIZE VIOLATION: src/core/long.c:4: function one_too_long has 121 lines'

make_tree
printf 'int tx_use_link(int shm_rx) { return shm_rx; }\n' >>"$tmp/t/src/transport/tx.c"
expect_fail shm_identifier 'SIZE VIOLATION: src/transport/tx.c:3: identifier shm_rx'

make_tree
printf 'int tx_kind(void) { return URVT_LINK_SHM; }\n' >>"$tmp/t/src/transport/tx.c"
expect_fail shm_upper_case 'SIZE VIOLATION: src/transport/tx.c:3: identifier URVT_LINK_SHM'

echo "ok: the size check rejects all three rules' violations"
