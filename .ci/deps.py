#!/usr/bin/env python3
"""Licences and bans of every crate the workspace builds for Linux, offline.

What cargo-deny's `licenses` and `bans` checks would say, from
`cargo metadata` alone (no advisory database, nothing to install): every
package's SPDX licence expression must be satisfiable from LICENCES; no
package in BANNED may appear; a crate in two or more versions fails unless
DUPLICATES names it, with the reason it cannot be one version today.
Run with `python3 .ci/deps.py`; exit status 1 lists every problem.
"""

import json
import re
import subprocess
import sys
from collections import defaultdict

# Licences a dependency may be used under (one of them suffices in an OR).
LICENCES = {
    "0BSD",
    "Apache-2.0",
    "Apache-2.0 WITH LLVM-exception",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "CC0-1.0",
    "CDLA-Permissive-2.0",
    "ISC",
    "MIT",
    "Unicode-3.0",
    "Unlicense",
    "Zlib",
}

# Crates that must not be built, and why.
BANNED = {
    "openssl": "TLS is rustls on ring, one stack for every connection",
    "openssl-sys": "TLS is rustls on ring, one stack for every connection",
    "native-tls": "TLS is rustls on ring, one stack for every connection",
    "aws-lc-rs": "ring is the one crypto provider; a second doubles the build",
    "aws-lc-sys": "ring is the one crypto provider; a second doubles the build",
}

# Crates allowed in more than one version: each pair comes from dependencies
# that have not moved to the same major version yet.
DUPLICATES = {
    "base64": "0.22 (tonic, tower-http, k8s-openapi, the gateway) and 0.23 (kube-client, pem, serde-saphyr)",
    "bit-vec": "0.9 (yasna, under rcgen) and 0.10 (proptest)",
    "foldhash": "0.1 and 0.2, each under one of the hashbrown versions below",
    "getrandom": "0.2 (ring), 0.3 (ahash, rand_core 0.9) and 0.4 (rand 0.10, tempfile)",
    "hashbrown": "0.15 (petgraph, under prost-build), 0.16 (kube-runtime) and 0.17 (indexmap)",
    "itertools": "0.13 (criterion) and 0.14 (prost-build, prost-derive)",
    "rand": "0.9 (opentelemetry_sdk) and 0.10 (proptest)",
    "rand_core": "0.9 and 0.10, each under one of the rand versions",
    "syn": "2 and 3: proc-macro crates move to syn 3 one by one",
    "unicode-width": "0.1 (miette, under protox) and 0.2 (annotate-snippets)",
}


def licence_ok(expression):
    """Whether an SPDX expression (OR, AND, WITH, parentheses, and the
    legacy "/" for OR) can be satisfied from LICENCES."""
    tokens = re.findall(r"\(|\)|[^\s()]+", expression.replace("/", " OR "))
    position = 0

    def peek():
        return tokens[position] if position < len(tokens) else None

    def take():
        nonlocal position
        position += 1
        return tokens[position - 1]

    def primary():
        if peek() == "(":
            take()
            value = disjunction()
            if take() != ")":
                raise ValueError(expression)
            return value
        name = take()
        if peek() == "WITH":
            take()
            name = f"{name} WITH {take()}"
        return name in LICENCES or name.removesuffix("+") in LICENCES

    def conjunction():
        value = primary()
        while peek() == "AND":
            take()
            value = primary() and value
        return value

    def disjunction():
        value = conjunction()
        while peek() == "OR":
            take()
            value = conjunction() or value
        return value

    result = disjunction()
    if position != len(tokens):
        raise ValueError(expression)
    return result


def main():
    metadata = json.loads(
        subprocess.check_output(
            [
                "cargo", "metadata", "--format-version", "1", "--locked",
                "--filter-platform", "x86_64-unknown-linux-gnu",
            ]
        )
    )
    packages = {p["id"]: p for p in metadata["packages"]}
    built = [packages[node["id"]] for node in metadata["resolve"]["nodes"]]
    problems = []
    versions = defaultdict(set)
    for package in built:
        name, version = package["name"], package["version"]
        versions[name].add(version)
        licence = package.get("license")
        if not licence:
            problems.append(f"{name} {version}: no SPDX licence in its Cargo.toml")
        else:
            try:
                if not licence_ok(licence):
                    problems.append(f"{name} {version}: licence {licence!r} is not in LICENCES")
            except (ValueError, IndexError):
                problems.append(f"{name} {version}: licence {licence!r} is not an SPDX expression")
        if name in BANNED:
            problems.append(f"{name} {version}: banned ({BANNED[name]})")
    for name, found in sorted(versions.items()):
        if len(found) > 1 and name not in DUPLICATES:
            problems.append(
                f"{name} in {len(found)} versions ({', '.join(sorted(found))}): "
                "align the dependencies, or add it to DUPLICATES with the reason"
            )
    for name in sorted(DUPLICATES):
        if len(versions.get(name, ())) < 2:
            problems.append(f"{name} is in one version now: remove it from DUPLICATES")
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{len(built)} crates checked: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
