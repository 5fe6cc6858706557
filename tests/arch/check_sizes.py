#!/usr/bin/env python3
"""Size rules for src/: short files, short functions, no shm in the transport.

Usage: check_sizes.py ROOT

ROOT holds src/. Fails (exit 1, one `SIZE VIOLATION: path:line: ...` line
per finding) on
  1. a file src/**/*.c or *.h of more than MAX_FILE_LINES lines;
  2. a function in src/**/*.c of more than MAX_FUNC_LINES lines, a function
     being a `{` at column 0 up to the next `}` at column 0, both lines
     counted (the project's style puts only function bodies there);
  3. an identifier containing "shm" (any case, whole or part: net->shm,
     URVT_LINK_SHM, shm_rx) in the code of src/transport/: the shared-memory
     link belongs to src/link/ (docs/architecture.md), and the transport
     reaches links only through core/link.h's interface. Comments and
     string literals are not code and are not looked at; #include lines
     are (an include of link/shm.h names it).
"""
import os
import re
import sys

MAX_FILE_LINES = 1500
MAX_FUNC_LINES = 120
SHM_FREE_DIR = os.path.join("src", "transport")

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
INCLUDE = re.compile(r"\s*#\s*include\b")
# The name a function definition's header declares: the identifier before
# the parameter list's "(" (on the header's first line that has one).
FUNC_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def strip_comments_and_strings(text):
    """text with comments, string and character literals blanked out,
    newlines kept, so line numbers stay right."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_name(lines, brace):
    """The name of the function whose body opens at lines[brace]."""
    for k in range(brace - 1, max(brace - 8, -1), -1):
        m = FUNC_NAME.search(lines[k])
        if m and not lines[k].startswith((" ", "\t")):
            return m.group(1)
    return "?"


def long_functions(lines):
    """(first line number, name, length) of each function over the limit."""
    found = []
    start = None
    for i, line in enumerate(lines):
        if line.startswith("{"):
            start = i
        elif line.startswith("}") and start is not None:
            length = i - start + 1
            if length > MAX_FUNC_LINES:
                found.append((start + 1, function_name(lines, start), length))
            start = None
    return found


def check(root):
    bad = []
    src = os.path.join(root, "src")
    for dirpath, dirs, files in os.walk(src):
        dirs.sort()
        for fn in sorted(files):
            if not fn.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            lines = text.splitlines()
            if len(lines) > MAX_FILE_LINES:
                bad.append(f"{rel}:{len(lines)}: file has {len(lines)} lines "
                           f"(limit {MAX_FILE_LINES})")
            if fn.endswith(".c"):
                for lineno, name, length in long_functions(lines):
                    bad.append(f"{rel}:{lineno}: function {name} has {length} lines "
                               f"(limit {MAX_FUNC_LINES})")
            if rel.startswith(SHM_FREE_DIR + os.sep):
                code = strip_comments_and_strings(text).splitlines()
                for lineno, line in enumerate(code, 1):
                    if INCLUDE.match(line):
                        line = lines[lineno - 1].split("//")[0].split("/*")[0]
                    for name in dict.fromkeys(IDENT.findall(line)):
                        if "shm" in name.lower():
                            bad.append(f"{rel}:{lineno}: identifier {name} "
                                       f"(no shm in {SHM_FREE_DIR}/)")
    for msg in bad:
        print(f"SIZE VIOLATION: {msg}")
    print(f"{len(bad)} size violation(s)")
    return not bad


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(0 if check(sys.argv[1]) else 1)


if __name__ == "__main__":
    main()
