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
source "$(dirname "$0")/npm.bash"
npm_into gemini "$DIR" "$PACKAGE@$VERSION"
echo "gemini: installed $PACKAGE@$VERSION in $DIR"
