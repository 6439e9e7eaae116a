#!/usr/bin/env python3
"""File size: lists every Rust file of the repository over LIMIT non-test
lines with the reason `.ci/long-files.txt` gives for it, and fails on a file
over the limit that the list does not name, or on a name in the list whose
file is no longer over it (or is gone).

Usage: file-size.py

Non-test lines: every line of the file (blank and comment lines too) before
its `#[cfg(test)] mod tests {` (or `pub(crate) mod tests {`). Files under a
`tests/` directory and child `tests.rs` files are tests and are not
counted; `target/` and hidden directories are skipped. The list has one
file a line, `path: reason`, and `#` comments.
"""

import os
import re
import sys

LIMIT = 600
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIST = os.path.join(".ci", "long-files.txt")
TESTS = re.compile(
    r"^#\[cfg\(test\)\]\s*\n(?:#\[[^\n]*\]\s*\n|\s*#!?\[[\s\S]*?\]\s*\n)*?(?:pub(?:\([^)]*\))?\s+)?mod tests\s*\{",
    re.M,
)


def non_test_lines(text):
    found = TESTS.search(text)
    return (text[: found.start()] if found else text).count("\n")


def rust_files():
    for root, dirs, names in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("target", "tests"))
        for name in sorted(names):
            if name.endswith(".rs") and name != "tests.rs":
                yield os.path.relpath(os.path.join(root, name), ROOT)


def reasons():
    listed = {}
    with open(os.path.join(ROOT, LIST), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            path, sep, reason = line.partition(": ")
            if not sep or not reason.strip():
                raise SystemExit(f"{LIST}:{n}: not `path: reason`: {line}")
            listed[path.strip()] = reason.strip()
    return listed


def main():
    listed = reasons()
    sizes = {}
    for path in rust_files():
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            sizes[path] = non_test_lines(f.read())
    long = {p: n for p, n in sizes.items() if n > LIMIT}
    ok = True
    print(f"Rust files over {LIMIT} non-test lines, with their reason ({LIST}):")
    for path, n in sorted(long.items(), key=lambda item: -item[1]):
        reason = listed.get(path)
        if reason is None:
            ok = False
            reason = f"NO REASON: split it at its seams, or give the reason in {LIST}"
        print(f"  {n:5}  {path}: {reason}")
    for path in sorted(set(listed) - set(long)):
        ok = False
        now = f"{sizes[path]} non-test lines" if path in sizes else "no such file"
        print(f"{LIST} gives a reason for {path}, which is not over {LIMIT} ({now}): remove its line")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
