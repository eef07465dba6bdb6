#!/usr/bin/env bash
# `scripts/e2e-node-lines.sh [LINE ...]`: the end-to-end tests (test/e2e/) on each supported Node
# line other than the image's, or on the lines given, one after another. Each line's Node comes
# from scripts/node-line.sh. Run it after `npm ci`; it changes nothing in the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

lines=("$@")
[ ${#lines[@]} -gt 0 ] || mapfile -t lines < <(scripts/node-line.sh --others)

for line in "${lines[@]}"; do
  bin=$(scripts/node-line.sh "$line")
  echo "== the end-to-end tests on Node $("$bin/node" --version)"
  PATH="$bin:$PATH" node node_modules/vitest/vitest.mjs run test/e2e
done
