#!/usr/bin/env bash
# Builds envoyproxy/ratelimit's server, the oracle of test/reference, into .cache/reference/
# (git-ignored). Needs Go and its module proxy. Idempotent: a built binary is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=v1.4.1-0.20260122083618-3fb702589d36
BIN=.cache/reference/service_cmd
STAMP=.cache/reference/version
if [[ -x $BIN && -f $STAMP && $(cat "$STAMP") == "$VERSION" ]]; then
  exit 0
fi
command -v go >/dev/null || { echo "reference.sh: Go is needed to build the reference server" >&2; exit 1; }
mkdir -p .cache/reference
GOBIN="$PWD/.cache/reference" go install "github.com/envoyproxy/ratelimit/src/service_cmd@$VERSION"
echo "$VERSION" > "$STAMP"
