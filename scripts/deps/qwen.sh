#!/usr/bin/env bash
# Installs Qwen Code (`@qwen-code/qwen-code`, pinned) for the `qwen` ACP preset's tests, under
# $AHPD_TEST_CACHE/qwen. The tests find the CLI at $AHPD_TEST_CACHE/qwen/node_modules/.bin/qwen
# (or wherever $AHPD_QWEN_BIN points) and run it as `qwen --acp` against the project's mock
# OpenAI Chat Completions API. Idempotent: does nothing when the pinned version is there.
set -euo pipefail
VERSION="0.24.4"
PACKAGE="@qwen-code/qwen-code"
CACHE="${AHPD_TEST_CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache}"
DIR="$CACHE/qwen"
BIN="$DIR/node_modules/.bin/qwen"
INSTALLED="$DIR/node_modules/$PACKAGE/package.json"

if [ -x "$BIN" ] && [ -f "$INSTALLED" ] && grep -q "\"version\": \"$VERSION\"" "$INSTALLED"; then
  echo "qwen: $PACKAGE@$VERSION already installed in $DIR"
  exit 0
fi
source "$(dirname "$0")/npm.bash"
npm_into qwen "$DIR" "$PACKAGE@$VERSION"
echo "qwen: installed $PACKAGE@$VERSION in $DIR"
