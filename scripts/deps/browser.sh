#!/usr/bin/env bash
# Installs headless Chromium for the web window's tests, pinned, under $AHPD_TEST_CACHE/browser:
#   @sparticuz/chromium - a Chromium build inside the npm package (no download at run time)
#   puppeteer-core      - drives it over the DevTools protocol
# tests/browser/driver.mjs loads both from $AHPD_TEST_CACHE/browser/node_modules. The browser is
# unpacked once, here, into $AHPD_TEST_CACHE/browser/unpacked (the package would otherwise unpack
# it into /tmp on first use, and tests running side by side would race). Idempotent: does nothing
# when the pinned versions are there and unpacked.
# 143.0.4 is the newest @sparticuz/chromium that runs on Node 20 (later ones need Node 22).
set -euo pipefail
CHROMIUM="@sparticuz/chromium"
CHROMIUM_VERSION="143.0.4"
PUPPETEER="puppeteer-core"
PUPPETEER_VERSION="24.43.1"
CACHE="${AHPD_TEST_CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache}"
DIR="$CACHE/browser"

installed() { # package version
  local manifest="$DIR/node_modules/$1/package.json"
  [ -f "$manifest" ] && grep -q "\"version\": \"$2\"" "$manifest"
}

unpack() {
  mkdir -p "$DIR/unpacked"
  (cd "$DIR" && TMPDIR="$DIR/unpacked" node -e \
    "require('$CHROMIUM').executablePath().catch((e) => { console.error(e); process.exit(1); })")
  [ -x "$DIR/unpacked/chromium" ]
}

if installed "$CHROMIUM" "$CHROMIUM_VERSION" && installed "$PUPPETEER" "$PUPPETEER_VERSION" \
  && [ -x "$DIR/unpacked/chromium" ] && [ -f "$DIR/unpacked/.version" ] \
  && [ "$(cat "$DIR/unpacked/.version")" = "$CHROMIUM_VERSION" ]; then
  echo "browser: $CHROMIUM@$CHROMIUM_VERSION and $PUPPETEER@$PUPPETEER_VERSION already installed in $DIR"
  exit 0
fi
source "$(dirname "$0")/npm.bash"
npm_into browser "$DIR" "$CHROMIUM@$CHROMIUM_VERSION" "$PUPPETEER@$PUPPETEER_VERSION"
rm -rf "$DIR/unpacked"
if ! unpack; then
  echo "browser: could not unpack $CHROMIUM@$CHROMIUM_VERSION into $DIR/unpacked" >&2
  exit 1
fi
echo "$CHROMIUM_VERSION" > "$DIR/unpacked/.version"
echo "browser: installed $CHROMIUM@$CHROMIUM_VERSION and $PUPPETEER@$PUPPETEER_VERSION in $DIR"
