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
if ! command -v npm >/dev/null 2>&1; then
  echo "codex: npm is not installed; install Node.js >= 20 and npm, then run scripts/test again" >&2
  exit 1
fi
mkdir -p "$DIR"
cd "$DIR"
[ -f package.json ] || echo '{"name":"ahpd-test-codex","private":true}' > package.json
if ! npm install --no-audit --no-fund --loglevel=error "$PACKAGE@$VERSION" >"$DIR/npm.log" 2>&1; then
  cat "$DIR/npm.log" >&2
  echo "codex: npm install of $PACKAGE@$VERSION failed" >&2
  exit 1
fi
echo "codex: installed $PACKAGE@$VERSION in $DIR"
