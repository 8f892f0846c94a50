#!/usr/bin/env bash
# Installs the ACP adapter for pi (`pi-acp`, pinned) for the `pi` ACP preset's test, under
# $AHPD_TEST_CACHE/pi-acp. The adapter runs the `pi` CLI that scripts/deps/pi.sh installs (found on
# the PATH). The tests find it at $AHPD_TEST_CACHE/pi-acp/node_modules/.bin/pi-acp (or wherever
# $AHPD_PI_ACP_BIN points). Idempotent: does nothing when the pinned version is there.
# Pinned to 0.0.24, not the newest (0.0.34): 0.0.34 asks pi for `get_available_thinking_levels`,
# which only pi 1.x (`@earendil-works/pi-coding-agent`, Node >= 22.19) answers; the pi 0.73.1
# installed here answers it as unknown without the request's id, and 0.0.34 waits for ever.
set -euo pipefail
VERSION="0.0.24"
PACKAGE="pi-acp"
CACHE="${AHPD_TEST_CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache}"
DIR="$CACHE/pi-acp"
BIN="$DIR/node_modules/.bin/pi-acp"
INSTALLED="$DIR/node_modules/$PACKAGE/package.json"

if [ -x "$BIN" ] && [ -f "$INSTALLED" ] && grep -q "\"version\": \"$VERSION\"" "$INSTALLED"; then
  echo "pi-acp: $PACKAGE@$VERSION already installed in $DIR"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "pi-acp: npm is not installed; install Node.js >= 20 and npm, then run scripts/test again" >&2
  exit 1
fi
mkdir -p "$DIR"
cd "$DIR"
[ -f package.json ] || echo '{"name":"ahpd-test-pi-acp","private":true}' > package.json
if ! npm install --no-audit --no-fund --loglevel=error "$PACKAGE@$VERSION" >"$DIR/npm.log" 2>&1; then
  cat "$DIR/npm.log" >&2
  echo "pi-acp: npm install of $PACKAGE@$VERSION failed" >&2
  exit 1
fi
echo "pi-acp: installed $PACKAGE@$VERSION in $DIR"
