#!/usr/bin/env python3
"""Fails when the modules of a crate import each other in a cycle.

Usage: module-cycles.py CRATE_SRC [CRATE_SRC ...]

For each crate source directory, every `.rs` file is a module (`mod.rs`,
`lib.rs` and `main.rs` name their directory). A module depends on another
when its code (comments, strings and its `#[cfg(test)] mod tests` left out)
names a path `crate::a::b` or `super::...` that lands in it, `use` trees with
braces included. Dependencies are then folded onto top-level modules (the
first path segment), and the strongly connected parts of that graph with
more than one module are cycles: printed, and the exit status is 1.

A reader of paths, not a compiler: a path spelled in a macro counts, one
built by `$crate` does not.
"""

import os
import re
import sys

COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\])*"')
TESTS = re.compile(r"#\[cfg\(test\)\]\s*mod\s+tests\s*\{")
PATH = re.compile(r"\b(crate|super)((?:\s*::\s*(?:\w+|\{))+)")


def module_of(src, file):
    """The module path of a file, as a tuple of segments."""
    parts = os.path.relpath(file, src)[: -len(".rs")].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def strip(text):
    """The code of a file without comments, strings and its tests module."""
    text = COMMENT.sub("", text)
    text = STRING.sub('""', text)
    found = TESTS.search(text)
    return text[: found.start()] if found else text


def use_tree(text, start):
    """The text of a `{...}` group starting at `start`, and where it ends."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    return text[start + 1 :], len(text)


def split_top(group):
    """The comma-separated items of a use group, nested groups kept whole."""
    items, depth, current = [], 0, ""
    for ch in group:
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        current += ch
    items.append(current)
    return [i.strip() for i in items if i.strip()]


def expand(prefix, item):
    """Every path a use item names, as lists of segments after `prefix`."""
    if "{" not in item:
        segs = [s.strip() for s in item.split("::") if s.strip()]
        segs = [s.split(" as ")[0].strip() for s in segs]
        return [prefix + [s for s in segs if s not in ("self", "*")]]
    head, rest = item.split("{", 1)
    head_segs = [s.strip() for s in head.split("::") if s.strip()]
    inner, _ = use_tree("{" + rest, 0)
    out = []
    for sub in split_top(inner):
        out.extend(expand(prefix + head_segs, sub))
    return out


def paths(code):
    """(anchor, segments) for every `crate::` or `super::` path in code."""
    found = []
    for match in PATH.finditer(code):
        anchor, tail = match.group(1), match.group(2)
        if tail.rstrip().endswith("{"):
            brace = code.index("{", match.start() + len(anchor))
            group, _ = use_tree(code, brace)
            head = [s.strip() for s in tail.rstrip()[:-1].split("::") if s.strip()]
            for item in split_top(group):
                found.extend((anchor, p) for p in expand(head, item))
        else:
            found.append((anchor, [s.strip() for s in tail.split("::") if s.strip()]))
    return found


def target(modules, here, anchor, segs):
    """The longest known module a path lands in, or None."""
    if anchor == "crate":
        base = []
    else:
        base = list(here[:-1])
        while segs and segs[0] == "super":
            base, segs = base[:-1], segs[1:]
    full = base + segs
    for n in range(len(full), 0, -1):
        if tuple(full[:n]) in modules:
            return tuple(full[:n])
    return None


def cycles(graph):
    """Strongly connected parts of `graph` with more than one node (Kosaraju)."""
    order, seen = [], set()
    for start in graph:
        if start in seen:
            continue
        stack = [(start, iter(graph[start]))]
        seen.add(start)
        while stack:
            node, edges = stack[-1]
            nxt = next((e for e in edges if e not in seen), None)
            if nxt is None:
                order.append(node)
                stack.pop()
            else:
                seen.add(nxt)
                stack.append((nxt, iter(graph[nxt])))
    reverse = {n: set() for n in graph}
    for a, bs in graph.items():
        for b in bs:
            reverse[b].add(a)
    parts, assigned = [], set()
    for node in reversed(order):
        if node in assigned:
            continue
        part, todo = [], [node]
        assigned.add(node)
        while todo:
            n = todo.pop()
            part.append(n)
            for m in reverse[n]:
                if m not in assigned:
                    assigned.add(m)
                    todo.append(m)
        if len(part) > 1:
            parts.append(sorted(part))
    return parts


def check(src):
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs") and name != "tests.rs":
                path = os.path.join(root, name)
                files[module_of(src, path)] = path
    modules = set(files)
    graph = {}
    for here, path in files.items():
        with open(path, encoding="utf-8") as f:
            code = strip(f.read())
        top = here[0] if here else None
        for anchor, segs in paths(code):
            there = target(modules, here, anchor, segs)
            if not there or not here or there[0] == top:
                continue
            graph.setdefault(top, set()).add(there[0])
    for deps in list(graph.values()):
        for d in deps:
            graph.setdefault(d, set())
    found = cycles(graph)
    for part in found:
        print(f"{src}: modules that import each other in a cycle: {', '.join(part)}")
        for a in part:
            inside = sorted(b for b in graph[a] if b in part)
            print(f"    {a} -> {', '.join(inside)}")
    return not found


def main(args):
    if not args:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    ok = all([check(src) for src in args])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
