#!/usr/bin/env python3
"""Reports circles of files inside each crate: file A names an item of file B (`use
crate::…`, `super::…`, `self::…` or a `crate::…` path in code) and B, directly or round a
loop, names one of A's. Exits 1 when there is one (issue 51: no circles of files).

    scripts/file-cycles.py            # every crate under crates/, and loadtest/, benches/
    scripts/file-cycles.py crates/codec

What counts as an edge: a path that resolves to an item of another file of the same crate.
`mod x;` declarations and lib.rs's `pub use` re-exports are not edges; a path through such a
re-export (`crate::Name`) counts for the file that defines `Name`. `#[cfg(test)]` modules are
left out: a file's tests may use its siblings. The crate root (lib.rs, main.rs) is the
crate's table of contents and the home of its error type and entry points, which every file
may name; it is left out of the circles unless `--with-roots` is given (a file that the root
depends on and that names the root's items is still listed with it then).
"""

import os
import re
import sys

# Circles known and left for a later change, with that change; reported, not failed. A new
# circle, or one of these changing shape, fails. None are left (issue 51).
KNOWN: dict = {}


def strip_comments_and_strings(src):
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', src[i:i + 10]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            end = src.find('"' + m.group(1), i + len(m.group(0)))
            i = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and src[i] != '"':
                i += 2 if src[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", src[i:i + 4]):
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:])
            i += len(m.group(0)) if m else 1
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_modules(src):
    """Removes `#[cfg(test)] mod name { … }` blocks."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", src)
        if not m:
            return src
        depth, i = 1, m.end()
        while i < len(src) and depth:
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            i += 1
        src = src[: m.start()] + src[i:]


def expand_use_tree(tree):
    """`a::{b, c::{d, e}}` → ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        return parts

    def expand(s):
        i = s.find("{")
        if i < 0:
            return [re.sub(r"as\w+$", "", s) if "as" not in s else s.split("as")[0]]
        prefix, inner = s[:i], s[i + 1: s.rfind("}")]
        return [prefix + p for part in split_top(inner) for p in expand(part)]

    return [p for p in expand(tree) if p]


def module_of(rel):
    """src-relative path → module path (a tuple)."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("lib", "main") and len(parts) == 1:
        return ()
    if parts[-1] == "mod":
        parts = parts[:-1]
    return tuple(parts)


def crate_graph(src_dir):
    files = {}
    for root, _, names in os.walk(src_dir):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                files[module_of(os.path.relpath(path, src_dir))] = path
    root_file = files.get(())
    # Items the crate root re-exports: name → module path it comes from.
    reexports = {}
    sources = {}
    for mod, path in files.items():
        with open(path) as f:
            sources[mod] = drop_test_modules(strip_comments_and_strings(f.read()))
    if root_file:
        for m in re.finditer(r"pub\s+use\s+([^;]+);", sources[()]):
            for p in expand_use_tree(m.group(1)):
                segs = [s for s in p.split("::") if s]
                if segs and segs[0] in ("crate", "self"):
                    segs = segs[1:]
                if len(segs) >= 2:
                    reexports[segs[-1]] = tuple(segs[:-1])

    def resolve(segs):
        """A module path + item → the file module that holds it."""
        for k in range(len(segs), -1, -1):
            if tuple(segs[:k]) in files:
                mod = tuple(segs[:k])
                if mod == () and k < len(segs) and segs[k] in reexports:
                    return resolve(list(reexports[segs[k]]) + segs[k:])
                return mod
        return None

    edges = {m: set() for m in files}
    for mod, src in sources.items():
        body = src
        if mod == ():
            # The root's `mod` and `pub use` lines are declarations, not dependencies.
            body = re.sub(r"pub\s+use\s+[^;]+;", "", body)
        body = re.sub(r"\b(pub(\([^)]*\))?\s+)?mod\s+\w+\s*;", "", body)
        paths = []
        for m in re.finditer(r"\buse\s+([^;]+);", body):
            paths.extend(expand_use_tree(m.group(1)))
        body_no_use = re.sub(r"\buse\s+[^;]+;", "", body)
        paths.extend(m.group(0) for m in re.finditer(r"\b(?:crate|super|self)(?:::\w+)+", body_no_use))
        # A child module named without `self::` (`dispatch::Service` in lib.rs).
        children = {m[-1] for m in files if len(m) == len(mod) + 1 and m[: len(mod)] == mod}
        for m in re.finditer(r"(?<![:\w])(\w+)((?:::\w+)+)", body_no_use):
            if m.group(1) in children:
                paths.append("self::" + m.group(0))
        for m in re.finditer(r"\buse\s+([^;]+);", body):
            for p in expand_use_tree(m.group(1)):
                head = p.split("::")[0]
                if head in children:
                    paths.append("self::" + p)
        for p in paths:
            segs = [s for s in p.split("::") if s]
            if not segs:
                continue
            if segs[0] == "crate":
                full = segs[1:]
            elif segs[0] == "super":
                base = list(mod)
                while segs and segs[0] == "super":
                    base, segs = base[:-1], segs[1:]
                full = base + segs
            elif segs[0] == "self":
                full = list(mod) + segs[1:]
            else:
                continue
            target = resolve(full)
            if target is not None and target != mod:
                edges[mod].add(target)
    return files, edges


def cycles(edges):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main(args):
    with_roots = "--with-roots" in args
    args = [a for a in args if a != "--with-roots"]
    here = os.path.dirname(os.path.abspath(__file__))
    top = os.path.dirname(here)
    crates = args or sorted(
        [os.path.join("crates", c) for c in os.listdir(os.path.join(top, "crates"))]
        + ["loadtest", "benches"]
    )
    found = 0
    for crate in crates:
        src = os.path.join(top, crate, "src")
        if not os.path.isdir(src):
            continue
        files, edges = crate_graph(src)
        if not with_roots:
            edges = {m: {t for t in ts if t != ()} for m, ts in edges.items() if m != ()}
        for comp in cycles(edges):
            names = [os.path.relpath(files[m], top) for m in comp]
            why = KNOWN.get(frozenset(names)) if not with_roots else None
            if why:
                print(f"{crate}: known circle ({why}): " + ", ".join(names))
                continue
            found += 1
            print(f"{crate}: circle of {len(comp)} files: " + ", ".join(names))
            for m in comp:
                back = sorted(os.path.basename(files[t]) for t in edges[m] if t in comp)
                print(f"    {os.path.relpath(files[m], top)} -> {', '.join(back)}")
    if found:
        print(f"{found} circle(s) of files")
        return 1
    print("no new circles of files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
