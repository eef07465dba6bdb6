#!/usr/bin/env bash
# Builds envoyproxy/ratelimit at its change that adds is_negative_hits (pull request #1140, commit
# 5a56d24), the oracle of test/reference/refunds.test.ts, into .cache/reference-refunds/
# (git-ignored). That commit is on no release and the Go module proxy does not serve it, so it is
# built from a clone of the repository that holds it: REFERENCE_REFUNDS_SRC names that clone (a
# work tree, or a bare repository; fetch refs/pull/1140/head into it first). Needs Go 1.26.4 or
# newer. Idempotent: a built binary is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
COMMIT=5a56d2413072a0614aa8c4383c97f024885fde3b
OUT=.cache/reference-refunds
BIN=$OUT/service_cmd
if [[ -x $BIN && -f $OUT/version && $(cat "$OUT/version") == "$COMMIT" ]]; then
  exit 0
fi
SRC=${REFERENCE_REFUNDS_SRC:?"reference-refunds.sh: set REFERENCE_REFUNDS_SRC to a clone of envoyproxy/ratelimit that holds commit $COMMIT"}
command -v go >/dev/null || { echo "reference-refunds.sh: Go is needed" >&2; exit 1; }
git --git-dir="$SRC/.git" rev-parse --verify -q "$COMMIT^{commit}" >/dev/null 2>&1 && GIT_DIR="$SRC/.git" || GIT_DIR="$SRC"
git --git-dir="$GIT_DIR" rev-parse --verify -q "$COMMIT^{commit}" >/dev/null || {
  echo "reference-refunds.sh: $SRC does not hold $COMMIT (fetch refs/pull/1140/head)" >&2
  exit 1
}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
git --git-dir="$GIT_DIR" archive "$COMMIT" | tar -x -C "$WORK"
# Its go.mod names a pseudo-version of go-control-plane's envoy module; v1.38.0 has the field.
(cd "$WORK" && go mod edit -require=github.com/envoyproxy/go-control-plane/envoy@v1.38.0 &&
  GOFLAGS=-mod=mod go build -o service_cmd ./src/service_cmd)
mkdir -p "$OUT"
mv "$WORK/service_cmd" "$BIN"
echo "$COMMIT" > "$OUT/version"
