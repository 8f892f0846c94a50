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
source "$(dirname "$0")/npm.bash"
npm_into pi "$DIR" "$PACKAGE@$VERSION"
echo "pi: installed $PACKAGE@$VERSION in $DIR"
