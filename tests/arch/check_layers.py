#!/usr/bin/env python3
"""Check src/ against the layer graph of docs/architecture.md.

Usage: check_layers.py ROOT [ALLOWLIST]

ROOT holds src/ and docs/architecture.md. The graph is the fenced block
tagged `layers` in docs/architecture.md, one `layer: dep dep ...` line per
layer. Every directory src/<layer>/ is a layer and must appear there.
Fails (exit 1, one line per finding) on
  - an `#include "X/..."` in src/<layer>/ whose X is another layer not in
    <layer>'s deps, or an include that climbs out with "../";
  - a source listed in src/<layer>/CMakeLists.txt outside src/<layer>/;
  - a target_link_libraries of a layer's target naming a target of a layer
    not in its deps (the target of a layer is any add_library in its
    CMakeLists.txt).
ALLOWLIST lines (`file:include` or `cmake:target->target`) are known
findings to be removed; an allowlisted line that no longer occurs is an
error too, so the list only shrinks.
"""
import os
import re
import sys


def read_graph(root):
    path = os.path.join(root, "docs", "architecture.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^```layers\n(.*?)^```", text, re.S | re.M)
    if not m:
        sys.exit(f"{path}: no ```layers block")
    graph = {}
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, deps = line.partition(":")
        graph[name.strip()] = set(deps.split())
    for layer, deps in graph.items():
        for d in deps:
            if d not in graph:
                sys.exit(f"{path}: layer {layer} depends on unknown layer {d}")
    return graph


def cmake_commands(text, name):
    """Argument lists of every call of `name(...)` (comments stripped)."""
    text = re.sub(r"#[^\n]*", "", text)
    for m in re.finditer(r"\b" + name + r"\s*\(([^)]*)\)", text, re.I):
        yield m.group(1).split()


def check(root, allow):
    graph = read_graph(root)
    src = os.path.join(root, "src")
    layers = sorted(d for d in os.listdir(src)
                    if os.path.isdir(os.path.join(src, d)))
    found = []

    def finding(key, msg):
        found.append((key, msg))

    for layer in layers:
        if layer not in graph:
            finding(f"layer:{layer}",
                    f"src/{layer}/: layer not in docs/architecture.md")
    inc_re = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
    for layer in layers:
        allowed = graph.get(layer, set()) | {layer}
        for dirpath, _, files in os.walk(os.path.join(src, layer)):
            for fn in sorted(files):
                if not fn.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for m in inc_re.finditer(text):
                    inc = m.group(1)
                    lineno = text.count("\n", 0, m.start()) + 1
                    if inc.startswith("../"):
                        finding(f"{rel}:{inc}",
                                f"{rel}:{lineno}: #include \"{inc}\" climbs out of src/{layer}/")
                        continue
                    top = inc.split("/", 1)[0]
                    if "/" in inc and top in layers and top not in allowed:
                        finding(f"{rel}:{inc}",
                                f"{rel}:{lineno}: #include \"{inc}\": layer {layer} may not use {top}")

    # Targets per layer, then their link dependencies.
    owner = {}
    texts = {}
    for layer in layers:
        cm = os.path.join(src, layer, "CMakeLists.txt")
        if not os.path.exists(cm):
            continue
        with open(cm, encoding="utf-8") as f:
            texts[layer] = f.read()
        for args in cmake_commands(texts[layer], "add_library"):
            if args:
                owner[args[0]] = layer
            for a in args[1:]:
                if a.startswith("../") or "/../" in a:
                    finding(f"cmake:{layer}:{a}",
                            f"src/{layer}/CMakeLists.txt: source {a} is outside src/{layer}/")
    for layer, text in texts.items():
        allowed = graph.get(layer, set()) | {layer}
        for args in cmake_commands(text, "target_link_libraries"):
            if not args or owner.get(args[0]) != layer:
                continue
            for dep in args[1:]:
                dl = owner.get(dep)
                if dl is not None and dl not in allowed:
                    finding(f"cmake:{args[0]}->{dep}",
                            f"src/{layer}/CMakeLists.txt: {args[0]} links {dep}: "
                            f"layer {layer} may not use {dl}")

    bad = 0
    keys = set()
    for key, msg in found:
        keys.add(key)
        if key in allow:
            print(f"allowlisted: {msg}")
        else:
            print(f"LAYER VIOLATION: {msg}")
            bad += 1
    for key in sorted(allow - keys):
        print(f"STALE ALLOWLIST ENTRY (fixed? remove it): {key}")
        bad += 1
    print(f"{len(layers)} layers, {len(owner)} targets, {bad} violation(s), "
          f"{len(allow & keys)} allowlisted")
    return bad == 0


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    allow = set()
    if len(sys.argv) == 3:
        with open(sys.argv[2], encoding="utf-8") as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    allow.add(line)
    sys.exit(0 if check(sys.argv[1], allow) else 1)


if __name__ == "__main__":
    main()
