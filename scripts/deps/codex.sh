#!/usr/bin/env bash
# Installs Zed's Codex ACP adapter (`@zed-industries/codex-acp`, pinned) for the `codex` preset's
# test, under $AHPD_TEST_CACHE/codex. The package is a small launcher; npm fetches the native
# binary as the optional dependency for this platform (`@zed-industries/codex-acp-linux-x64`, ...).
# The tests find it at $AHPD_TEST_CACHE/codex/node_modules/.bin/codex-acp (or wherever
# $AHPD_CODEX_ACP_BIN points). Idempotent: does nothing when the pinned version is there.
set -euo pipefail
VERSION="0.16.0"
PACKAGE="@zed-industries/codex-acp"
CACHE="${AHPD_TEST_CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache}"
DIR="$CACHE/codex"
BIN="$DIR/node_modules/.bin/codex-acp"
INSTALLED="$DIR/node_modules/$PACKAGE/package.json"

if [ -x "$BIN" ] && [ -f "$INSTALLED" ] && grep -q "\"version\": \"$VERSION\"" "$INSTALLED"; then
  echo "codex: $PACKAGE@$VERSION already installed in $DIR"
  exit 0
fi
source "$(dirname "$0")/npm.bash"
npm_into codex "$DIR" "$PACKAGE@$VERSION"
echo "codex: installed $PACKAGE@$VERSION in $DIR"
