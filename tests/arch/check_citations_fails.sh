#!/bin/sh
# Proves the citation check can fail: a copy of the scanned tree in which a
# comment cites a missing section, uses an old form, leaves a bare section
# sign or an unknown label, or a reference heading is renumbered, must be
# rejected with a message naming the file; so must a pending list naming a
# file that has nothing left to convert.
set -eu
py=${1:-python3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
check="$here/check_citations.py"
pending="$here/citations_pending.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/tree"
(cd "$root" && tar --exclude=fuzz/corpus --exclude=tests/data/vectors -cf - \
	src tests fuzz bench tools docs README.md) | (cd "$tmp/tree" && tar -xf -)
t="$tmp/tree"

# The unmodified copy passes (with the same pending list) ...
"$py" "$check" "$t" "$pending" >"$tmp/ok.log" || {
	echo "FAIL: the unmodified copy already fails"; cat "$tmp/ok.log"; exit 1; }

# expect_fail NAME PATTERN [PENDING]: the check fails and prints PATTERN.
expect_fail() {
	if "$py" "$check" "$t" "${3:-$pending}" >"$tmp/$1.log"; then
		echo "FAIL: $1 was accepted"; cat "$tmp/$1.log"; exit 1
	fi
	grep -q "$2" "$tmp/$1.log" || {
		echo "FAIL: $1: no line matching '$2'"; cat "$tmp/$1.log"; exit 1; }
	grep -m1 "$2" "$tmp/$1.log"
}

cp "$t/src/core/pd.c" "$tmp/pd.c"
plant() { cp "$tmp/pd.c" "$t/src/core/pd.c"; printf '%s\n' "$1" >>"$t/src/core/pd.c"; }

plant '/* roce-wire §99 */'
expect_fail missing_section 'CITATION: src/core/pd.c:[0-9]*: roce-wire §99: no heading 99'
plant '/* qp-semantics §2.2, §2.99 */'
expect_fail missing_in_list 'CITATION: src/core/pd.c:[0-9]*: qp-semantics §2.99: no heading'
plant '/* no-such-doc §1 */'
expect_fail unknown_document "CITATION: src/core/pd.c:[0-9]*: 'no-such-doc §1': there is no"
plant '/* qp-semantics.md §2.2 */'
expect_fail old_form "CITATION: src/core/pd.c:[0-9]*: 'qp-semantics.md': old form"
plant '/* docs/reference/qp-semantics.md §2.2 */'
expect_fail long_form "CITATION: src/core/pd.c:[0-9]*: .*write the short form"
plant '/* see ../shared/spec/ */'
expect_fail external_spec "CITATION: src/core/pd.c:[0-9]*: 'shared/spec'"
plant '/* §2.2 */'
expect_fail bare "CITATION: src/core/pd.c:[0-9]*: bare '§2.2'"
plant '/* W12 */'
expect_fail label 'CITATION: src/core/pd.c:[0-9]*: label W12 is defined in no'
plant '/* docs/reference/nothing.md */'
expect_fail bad_path "CITATION: src/core/pd.c:[0-9]*: 'docs/reference/nothing.md': no such file"
cp "$tmp/pd.c" "$t/src/core/pd.c"

# A renumbered reference heading breaks the citations of it.
cp "$t/docs/reference/roce-wire.md" "$tmp/roce-wire.md"
sed 's/^## 9\. /## 99. /' "$tmp/roce-wire.md" >"$t/docs/reference/roce-wire.md"
expect_fail renumbered 'CITATION: src/wire/icrc.c:[0-9]*: roce-wire §9: no heading 9'
cp "$tmp/roce-wire.md" "$t/docs/reference/roce-wire.md"

# The pending list only shrinks: a listed file without old citations, or
# one that does not exist, fails the check.
cp "$pending" "$tmp/pending.txt"
echo src/core/pd.c >>"$tmp/pending.txt"
expect_fail stale_pending 'STALE PENDING ENTRY (no old citation left, remove it): src/core/pd.c' \
	"$tmp/pending.txt"
cp "$pending" "$tmp/pending2.txt"
echo src/core/no_such_file.c >>"$tmp/pending2.txt"
expect_fail missing_pending 'STALE PENDING ENTRY (no such file): src/core/no_such_file.c' \
	"$tmp/pending2.txt"

echo "ok: the citation check rejects all of them"
