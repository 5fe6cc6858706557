#!/usr/bin/env python3
"""Check that every reference citation resolves inside the repository.

Usage: check_citations.py ROOT [PENDING]

The form is defined in docs/reference/README.md ("Citing the reference"):
`NAME §N.M`, where NAME is docs/reference/NAME.md without `.md` and N.M
is the number of one of its headings (`## N. ...`, `### N.M ...`); a list
or range may go on with `, §X`, `/ §X`, `and §X`, `-§X` or `-X`. Check
labels (L1, W1-W11, R1, C8b ...) must be defined as the first cell of a
table row in a docs/reference file.

Scanned: every text file under src/ tests/ fuzz/ bench/ tools/ (not
fuzz/corpus/ or tests/data/vectors/, and not this checker and its can-fail
test, which hold bad citations on purpose), docs/*.md, docs/reference/*.md
and README.md. The whole text is read, comments and strings alike.

A finding (exit 1, one line each) is
  - a section that is no heading of NAME.md, or a NAME with no
    docs/reference/NAME.md;
  - a `§` and a number without a NAME in front (inside docs/reference/X.md
    a bare one means X's own section and only has to resolve);
  - an old form: `NAME.md` not written as a path (docs/reference/NAME.md,
    from docs/ reference/NAME.md, between reference files ./NAME.md), the
    long form `docs/reference/NAME.md §N`, a path to a reference file that
    does not exist, or a mention of shared/spec;
  - a label of the L/W/R/C families that no reference table defines.
PENDING lists files (one repository path a line, `#` comments) that still
hold old citations and are reported but not counted. A listed file without
any finding, or one that does not exist, is an error, so the list only
shrinks.
"""
import os
import re
import sys

SCAN_DIRS = ("src", "tests", "fuzz", "bench", "tools")
SKIP_DIRS = ("fuzz/corpus", "tests/data/vectors")
SELF = ("tests/arch/check_citations.py", "tests/arch/check_citations_fails.sh")
REF = "docs/reference"
# the documents the old citations named, outside the repository
LEGACY = ("qp-semantics", "rc-protocol", "roce-wire", "test-vectors")
TEXT_EXT = (".c", ".h", ".py", ".sh", ".md", ".txt", ".cmake", ".in", ".map")

SEC = r"\d+(?:\.\d+)*"
# words after a section that point inside it: "§5.5 step 3", "§2.6 steps 4-6"
STEP = r"(?:[ \t]+steps?[ \t]+\d+(?:-\d+)?)?"
# whitespace, also across a line break into a comment continuation
WS = r"(?:[ \t]|\n[ \t]*(?:\*(?!/)|//|#)?)"
MORE = (r"(?:" + WS + r"*(?:,|/|\band\b|\bor\b)" + WS + r"*§(?P<s1>" + SEC + r")" + STEP +
        r"|" + WS + r"*[-–]" + WS + r"*§?(?P<s2>" + SEC + r")" + STEP + r")")
CITE_RE = re.compile(
    r"(?<![\w./-])(?P<doc>[A-Za-z][\w-]*)" + WS + r"+§(?P<first>" + SEC + r")" + STEP +
    r"(?P<rest>" + MORE.replace("?P<s1>", "").replace("?P<s2>", "") + r"*)")
MORE_RE = re.compile(MORE)
SECNUM_RE = re.compile(SEC)
SECT_RE = re.compile("§")
HEADING_RE = re.compile(r"^#{2,6}[ \t]+(" + SEC + r")\.?[ \t]", re.M)
LABEL_DEF_RE = re.compile(r"^\|[ \t]*([LWRC]\d+[a-z]?)[ \t]*\|", re.M)
LABEL = r"[LWRC]\d+[a-z]?"
LABEL_RANGE_RE = re.compile(r"(?<![\w-])(" + LABEL + r")[ \t]*[-–][ \t]*(" + LABEL + r")(?![\w-])")
LABEL_RE = re.compile(r"(?<![\w-])(" + LABEL + r")(?![\w-])")


def load_reference(root):
    refdir = os.path.join(root, REF)
    sections, labels = {}, set()
    if not os.path.isdir(refdir):
        return sections, labels
    for fn in sorted(os.listdir(refdir)):
        if not fn.endswith(".md"):
            continue
        with open(os.path.join(refdir, fn), encoding="utf-8") as f:
            text = f.read()
        labels |= set(LABEL_DEF_RE.findall(text))
        if fn != "README.md":
            sections[fn[:-3]] = set(HEADING_RE.findall(text))
    return sections, labels


def scanned_files(root):
    for d in SCAN_DIRS:
        top = os.path.join(root, d)
        for dirpath, dirnames, files in os.walk(top):
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
            dirnames[:] = sorted(x for x in dirnames
                                 if f"{rel_dir}/{x}" not in SKIP_DIRS)
            for fn in sorted(files):
                rel = f"{rel_dir}/{fn}"
                if rel in SELF:
                    continue
                if fn.endswith(TEXT_EXT) or fn == "CMakeLists.txt" or "." not in fn:
                    yield rel
    for d in ("docs", REF):
        top = os.path.join(root, d)
        if os.path.isdir(top):
            for fn in sorted(os.listdir(top)):
                if fn.endswith(".md"):
                    yield f"{d}/{fn}"
    if os.path.exists(os.path.join(root, "README.md")):
        yield "README.md"


def read_text(path):
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def check_file(root, rel, text, sections, labels):
    """Yields (line, message) for each finding in one file."""
    def line_of(pos):
        return text.count("\n", 0, pos) + 1

    own = None
    if rel.startswith(REF + "/") and rel != REF + "/README.md":
        own = os.path.basename(rel)[:-3]
    names = sorted(sections)

    covered = set()
    for m in CITE_RE.finditer(text) if "§" in text else ():
        doc = m.group("doc")
        if doc not in sections:
            continue  # not a citation of ours; the bare-§ pass reports it
        secs = [m.group("first")] + [x.group("s1") or x.group("s2")
                                     for x in MORE_RE.finditer(m.group("rest"))]
        for s in secs:
            if s not in sections[doc]:
                yield line_of(m.start()), f"{doc} §{s}: no heading {s} in {REF}/{doc}.md"
        for i in range(m.start("first") - 1, m.end()):
            if text[i] == "§":
                covered.add(i)
    for m in SECT_RE.finditer(text):
        if m.start() in covered:
            continue
        sec = SECNUM_RE.match(text, m.end())
        if not sec:
            continue  # "§N", "§X": a placeholder in prose, not a citation
        s = sec.group(0)
        if own is not None:
            if s not in sections[own]:
                yield line_of(m.start()), f"§{s}: no heading {s} in {rel}"
            continue
        before = re.search(r"(\S*)\s*$", text[max(0, m.start() - 200):m.start()])
        word = before.group(1).lstrip("([`'\"")
        if word.endswith(".md"):
            if "reference/" in word:  # the old-form pass reports the others
                yield line_of(m.start()), (f"'{word} §{s}': write the short form "
                                           f"'{os.path.basename(word)[:-3]} §{s}'")
        elif re.fullmatch(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)+", word):
            yield line_of(m.start()), f"'{word} §{s}': there is no {REF}/{word}.md"
        else:
            yield line_of(m.start()), (f"bare '§{s}': name the document "
                                       f"({', '.join(names)})")

    old_names = sorted(set(names) | set(LEGACY))
    old_re = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, old_names)) + r")\.md\b")
    for m in old_re.finditer(text):
        before = re.search(r"[\w./-]*$", text[max(0, m.start() - 100):m.start()]).group(0)
        if before.endswith("reference/"):
            continue  # a path; checked below
        if before == "./" and rel.startswith(REF + "/"):
            continue  # a link between reference files
        yield line_of(m.start()), (f"'{before}{m.group(0)}': old form, cite '{m.group(1)} §N' "
                                   f"or give the path {REF}/{m.group(1)}.md")
    for m in re.finditer(r"(?<![\w-])(?:docs/)?reference/([\w.-]+\.md)", text):
        if not os.path.exists(os.path.join(root, REF, m.group(1))):
            yield line_of(m.start()), f"'{m.group(0)}': no such file"
    for m in re.finditer(r"shared/spec\b", text):
        yield line_of(m.start()), "'shared/spec' is outside the repository: cite docs/reference"

    used = []
    spans = []
    for m in LABEL_RANGE_RE.finditer(text):
        used += [(m.start(), m.group(1)), (m.start(), m.group(2))]
        spans.append((m.start(), m.end()))
    for m in LABEL_RE.finditer(text):
        if any(a <= m.start() < b for a, b in spans):
            continue
        used.append((m.start(), m.group(1)))
    for pos, lab in used:
        if lab not in labels:
            yield line_of(pos), (f"label {lab} is defined in no {REF} table "
                                 f"(see {REF}/README.md)")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    root = sys.argv[1]
    pending = set()
    if len(sys.argv) == 3:
        with open(sys.argv[2], encoding="utf-8") as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    pending.add(line)
    sections, labels = load_reference(root)
    bad = 0
    held = 0
    files = 0
    hit = set()
    for rel in scanned_files(root):
        text = read_text(os.path.join(root, rel))
        if text is None:
            continue
        files += 1
        for line, msg in check_file(root, rel, text, sections, labels):
            if rel in pending:
                hit.add(rel)
                held += 1
                print(f"pending: {rel}:{line}: {msg}")
            else:
                bad += 1
                print(f"CITATION: {rel}:{line}: {msg}")
    for rel in sorted(pending - hit):
        if not os.path.exists(os.path.join(root, rel)):
            print(f"STALE PENDING ENTRY (no such file): {rel}")
        else:
            print(f"STALE PENDING ENTRY (no old citation left, remove it): {rel}")
        bad += 1
    nsec = sum(len(s) for s in sections.values())
    print(f"{files} files, {len(sections)} reference documents, {nsec} sections, "
          f"{len(labels)} labels; {bad} finding(s), {held} pending")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
