#!/usr/bin/env bash
# Installs pi (`@mariozechner/pi-coding-agent`, pinned) for the pi backend's tests, under
# $AHPD_TEST_CACHE/pi. The tests find the CLI at $AHPD_TEST_CACHE/pi/node_modules/.bin/pi
# (or wherever $AHPD_PI_BIN points). Idempotent: does nothing when the pinned version is there.
set -euo pipefail
VERSION="0.73.1"
PACKAGE="@mariozechner/pi-coding-agent"
CACHE="${AHPD_TEST_CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache}"
DIR="$CACHE/pi"
BIN="$DIR/node_modules/.bin/pi"
INSTALLED="$DIR/node_modules/$PACKAGE/package.json"

if [ -x "$BIN" ] && [ -f "$INSTALLED" ] && grep -q "\"version\": \"$VERSION\"" "$INSTALLED"; then
  echo "pi: $PACKAGE@$VERSION already installed in $DIR"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "pi: npm is not installed; install Node.js >= 20.6 and npm, then run scripts/test again" >&2
  exit 1
fi
mkdir -p "$DIR"
cd "$DIR"
[ -f package.json ] || echo '{"name":"ahpd-test-pi","private":true}' > package.json
npm install --no-audit --no-fund --loglevel=error "$PACKAGE@$VERSION" >/dev/null
echo "pi: installed $PACKAGE@$VERSION in $DIR"
