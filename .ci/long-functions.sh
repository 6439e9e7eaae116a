#!/usr/bin/env bash
# Function size: clippy's too_many_lines over the non-test code of every
# crate (libraries and binaries, not tests or benches), with the threshold of
# clippy.toml (80 lines, blank lines and comments not counted). Fails listing
# every function over it. A function that must stay longer says why next to
# an `#[expect(clippy::too_many_lines, reason = "…")]` on it.
#
# The lint warns rather than denies so that one crate's long function does
# not stop the crates that depend on it from being checked: every one is
# listed, then the count decides.
set -euo pipefail
cd "$(dirname "$0")/.."

out=$(mktemp)
trap 'rm -f "$out"' EXIT
cargo clippy --workspace --lib --bins --message-format=short -- -W clippy::too_many_lines 2>&1 | tee "$out"
long=$(grep -c 'this function has too many lines' "$out" || true)
if [ "$long" -gt 0 ]; then
    echo "$long functions over the limit of clippy.toml's too-many-lines-threshold: split them at their seams" >&2
    exit 1
fi
