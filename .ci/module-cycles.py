#!/usr/bin/env python3
"""Fails when the modules of a crate import each other in a cycle, or against
the layers CONTRIBUTING.md states for the crate.

Usage: module-cycles.py CRATE_SRC [CRATE_SRC ...]

For each crate source directory, every `.rs` file is a module (`mod.rs`,
`lib.rs` and `main.rs` name their directory; `src/bin/`, whose files are
crate roots of their own, is left out). A module depends on another when its
code (comments, strings and its `#[cfg(test)] mod tests` left out) names a
path `crate::a::b` or `super::...` that lands in it, `use` trees with braces
included. Dependencies are then folded onto top-level modules (the first
path segment), and the strongly connected parts of that graph with more than
one module are cycles: printed, and the exit status is 1.

The layers: CONTRIBUTING.md's list between `<!-- module layers -->` and
`<!-- end of module layers -->` has one bullet per crate,
``- **name** (`dir/src`): `a`, `b` → `c` → `d`.``, bottom layer first. Text
in parentheses is a remark, and the order ends at the bullet's first
sentence. Every crate of the list is checked, named on the command line or
not. It fails when a module imports one of its own layer or a higher one,
when the crate has a top-level module the list does not name, or when the
list names one it does not have.

A reader of paths, not a compiler: a path spelled in a macro counts, one
built by `$crate` does not.
"""

import os
import re
import sys

COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\])*"')
TESTS = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+tests\s*\{")
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


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS_FILE = os.path.join(ROOT, "CONTRIBUTING.md")
BULLET = re.compile(r"^- \*\*([\w-]+)\*\* \(`([^`]+)`[^)]*\):(.*)$")
NAME = re.compile(r"`(\w+)`")


def stated_layers(text):
    """{crate source dir: [set of modules per layer, bottom first]} as stated."""
    try:
        body = text.split("<!-- module layers -->", 1)[1]
        body = body.split("<!-- end of module layers -->", 1)[0]
    except IndexError:
        raise SystemExit("CONTRIBUTING.md: no <!-- module layers --> list")
    bullets = []
    for line in body.splitlines():
        if line.startswith("- "):
            bullets.append(line)
        elif line.startswith("  ") and bullets:
            bullets[-1] += " " + line.strip()
    stated = {}
    for bullet in bullets:
        found = BULLET.match(bullet)
        if not found:
            raise SystemExit(
                "CONTRIBUTING.md: a layers bullet not of the form "
                f"- **name** (`dir/src`): ...: {bullet}"
            )
        order = re.sub(r"\([^()]*\)", "", found.group(3))
        order = re.split(r"\.(?:\s|$)", order, maxsplit=1)[0]
        stated[os.path.normpath(found.group(2))] = [
            set(NAME.findall(layer)) for layer in order.split("→")
        ]
    return stated


def graph_of(src):
    """{top-level module: the top-level modules it imports} of a crate."""
    files = {}
    for root, dirs, names in os.walk(src):
        if os.path.normpath(root) == os.path.normpath(src) and "bin" in dirs:
            dirs.remove("bin")
        for name in names:
            if name.endswith(".rs") and name != "tests.rs":
                path = os.path.join(root, name)
                files[module_of(src, path)] = path
    modules = set(files)
    graph = {here[0]: set() for here in files if here}
    for here, path in files.items():
        with open(path, encoding="utf-8") as f:
            code = strip(f.read())
        top = here[0] if here else None
        for anchor, segs in paths(code):
            there = target(modules, here, anchor, segs)
            if not there or not here or there[0] == top:
                continue
            graph[top].add(there[0])
    return graph


def check_cycles(src, graph):
    found = cycles(graph)
    for part in found:
        print(f"{src}: modules that import each other in a cycle: {', '.join(part)}")
        for a in part:
            inside = sorted(b for b in graph[a] if b in part)
            print(f"    {a} -> {', '.join(inside)}")
    return not found


def check_layers(src, graph, layers):
    """Every import runs down the stated layers; every module is in one."""
    where = {}
    for n, layer in enumerate(layers):
        for module in layer:
            where[module] = n
    problems = []
    for module in sorted(set(graph) - set(where)):
        problems.append(f"`{module}` is in no layer of CONTRIBUTING.md's list")
    for module in sorted(set(where) - set(graph)):
        problems.append(f"CONTRIBUTING.md's list names `{module}`, which is no module")
    for a in sorted(graph):
        for b in sorted(graph[a]):
            if a in where and b in where and where[b] >= where[a]:
                up = "its own layer" if where[b] == where[a] else "a higher layer"
                problems.append(
                    f"`{a}` (layer {where[a] + 1}) imports `{b}`, of {up} ({where[b] + 1})"
                )
    for problem in problems:
        print(f"{src}: {problem}")
    return not problems


def check(src, stated):
    graph = graph_of(src)
    ok = check_cycles(src, graph)
    layers = stated.get(os.path.normpath(os.path.relpath(src, ROOT)))
    if layers is not None:
        ok = check_layers(src, graph, layers) and ok
    return ok


def main(args):
    if not args:
        print(__doc__.strip().splitlines()[3], file=sys.stderr)
        return 2
    with open(LAYERS_FILE, encoding="utf-8") as f:
        stated = stated_layers(f.read())
    missing = [d for d in stated if not os.path.isdir(os.path.join(ROOT, d))]
    for d in missing:
        print(f"CONTRIBUTING.md: the layers of `{d}`, which is no directory")
    given = {os.path.normpath(os.path.relpath(src, ROOT)) for src in args}
    sources = list(args) + [
        os.path.join(ROOT, d) for d in stated if d not in given and d not in missing
    ]
    ok = all([check(src, stated) for src in sources]) and not missing
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
