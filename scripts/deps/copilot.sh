#!/usr/bin/env bash
# Installs GitHub Copilot CLI (`@github/copilot`, pinned) for the `copilot` preset's test, under
# $AHPD_TEST_CACHE/copilot. npm fetches the native binary as the optional dependency for this
# platform (`@github/copilot-linux-x64`, ...). The tests find it at
# $AHPD_TEST_CACHE/copilot/node_modules/.bin/copilot (or wherever $AHPD_COPILOT_BIN points).
# Idempotent: does nothing when the pinned version is there.
set -euo pipefail
VERSION="1.0.102"
PACKAGE="@github/copilot"
CACHE="${AHPD_TEST_CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache}"
DIR="$CACHE/copilot"
BIN="$DIR/node_modules/.bin/copilot"
INSTALLED="$DIR/node_modules/$PACKAGE/package.json"

if [ -x "$BIN" ] && [ -f "$INSTALLED" ] && grep -q "\"version\": \"$VERSION\"" "$INSTALLED"; then
  echo "copilot: $PACKAGE@$VERSION already installed in $DIR"
  exit 0
fi
source "$(dirname "$0")/npm.bash"
npm_into copilot "$DIR" "$PACKAGE@$VERSION"
echo "copilot: installed $PACKAGE@$VERSION in $DIR"
