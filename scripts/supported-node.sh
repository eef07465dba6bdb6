#!/usr/bin/env bash
# `scripts/supported-node.sh COMMAND [ARG...]`: runs COMMAND on a Node line that tollgate supports
# (package.json's engines, scripts/node-line.sh's RELEASES). On such a line it runs COMMAND as it
# is. On another, it says so in one line and runs COMMAND with the image's line first on PATH
# (scripts/node-line.sh image, which installs it into .cache/ the first time), unless
# TOLLGATE_ALLOW_UNSUPPORTED_NODE is true: then COMMAND runs as it is, and the service warns.
# `npm start`, `npm test` and the npm scripts that start the service run through it, so that they
# work on a machine whose own node is older.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

current=$(node -p 'process.versions.node' 2>/dev/null || echo none)
allow=${TOLLGATE_ALLOW_UNSUPPORTED_NODE:-}
if [[ ${allow,,} =~ ^(true|1|yes|on)$ ]] || "$here/node-line.sh" --supports "${current%%.*}"; then
  exec "$@"
fi
bin=$("$here/node-line.sh" image)
lines=$("$here/node-line.sh" --lines | paste -sd, - | sed 's/,/, /g')
echo "tollgate: Node $current is not a supported line ($lines): running on Node $("$bin/node" -p 'process.versions.node') from scripts/node-line.sh" >&2
PATH="$bin:$PATH" exec "$@"
