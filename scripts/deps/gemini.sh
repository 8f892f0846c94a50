#!/usr/bin/env bash
# Installs Gemini CLI (`@google/gemini-cli`, pinned) for the `gemini` ACP preset's tests, under
# $AHPD_TEST_CACHE/gemini. The tests find the CLI at $AHPD_TEST_CACHE/gemini/node_modules/.bin/gemini
# (or wherever $AHPD_GEMINI_BIN points) and run it as `gemini --acp` against the project's mock
# Gemini API. Idempotent: does nothing when the pinned version is there.
set -euo pipefail
VERSION="0.61.0"
PACKAGE="@google/gemini-cli"
CACHE="${AHPD_TEST_CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache}"
DIR="$CACHE/gemini"
BIN="$DIR/node_modules/.bin/gemini"
INSTALLED="$DIR/node_modules/$PACKAGE/package.json"

if [ -x "$BIN" ] && [ -f "$INSTALLED" ] && grep -q "\"version\": \"$VERSION\"" "$INSTALLED"; then
  echo "gemini: $PACKAGE@$VERSION already installed in $DIR"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "gemini: npm is not installed; install Node.js >= 20 and npm, then run scripts/test again" >&2
  exit 1
fi
mkdir -p "$DIR"
cd "$DIR"
[ -f package.json ] || echo '{"name":"ahpd-test-gemini","private":true}' > package.json
if ! npm install --no-audit --no-fund --loglevel=error "$PACKAGE@$VERSION" >"$DIR/npm.log" 2>&1; then
  cat "$DIR/npm.log" >&2
  echo "gemini: npm install of $PACKAGE@$VERSION failed" >&2
  exit 1
fi
echo "gemini: installed $PACKAGE@$VERSION in $DIR"
