#!/usr/bin/env bash
# The plugin API, checked with buf: `buf lint`, then `buf breaking` against
# the API's first committed version (every change since must be additive).
# buf comes from the npm registry's @bufbuild/buf, pinned, installed once into
# a cache directory.
set -euo pipefail
cd "$(dirname "$0")/.."

BUF_VERSION=1.75.0
BUF_DIR="${ROLLOUT_HOOKS_BUF_DIR:-$HOME/.cache/rollout-hooks-buf}"
BUF="$BUF_DIR/node_modules/.bin/buf"
if [[ ! -x "$BUF" ]] || [[ "$("$BUF" --version)" != "$BUF_VERSION" ]]; then
  echo "installing buf $BUF_VERSION (npm @bufbuild/buf) into $BUF_DIR"
  mkdir -p "$BUF_DIR"
  npm install --prefix "$BUF_DIR" --no-save --no-audit --no-fund --loglevel=error \
    "@bufbuild/buf@$BUF_VERSION"
fi

PROTO=proto/ocm/rolloutplugin/v1alpha1/rollout_plugin.proto
echo "buf lint"
(cd proto && "$BUF" lint)

# Each baseline is a tree of the repository at one commit, extracted with git
# archive (works in a worktree and needs no buf support for git).
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
baseline() {
  local commit=$1
  mkdir -p "$WORK/$commit"
  git archive "$commit" proto | tar -x -C "$WORK/$commit"
}

first=$(git log --diff-filter=A --format=%H -- "$PROTO" | tail -1)
if [[ -z "$first" ]]; then
  echo "buf breaking: the first commit of $PROTO is not in this clone's history (a shallow clone?)" >&2
  exit 1
fi
echo "buf breaking against the first version ($first)"
# That version had no go_package (no Go code was generated from it), so the
# one rule about go_package is checked against the first version that set it.
baseline "$first"
(cd proto && "$BUF" breaking --against "$WORK/$first/proto" \
  --config '{"version":"v2","breaking":{"use":["FILE"],"except":["FILE_SAME_GO_PACKAGE"]}}')

gofirst=$(git log --format=%H -S'option go_package' -- "$PROTO" | tail -1)
if [[ -n "$gofirst" ]]; then
  echo "buf breaking against the first version with go_package ($gofirst)"
  baseline "$gofirst"
  (cd proto && "$BUF" breaking --against "$WORK/$gofirst/proto")
fi
echo "buf: the API is lint-clean and additive"
