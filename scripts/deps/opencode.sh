#!/usr/bin/env bash
# Installs the two opencode-family ACP agents the preset tests drive against the project's mock
# OpenAI Chat Completions API, pinned, each in a folder of its own under $AHPD_TEST_CACHE:
#   opencode-ai   (`opencode acp`)  in $AHPD_TEST_CACHE/opencode
#   @kilocode/cli (`kilo acp`)      in $AHPD_TEST_CACHE/kilo   (a fork of opencode)
# Both ship their program as a platform package among their optionalDependencies (a registry
# package, nothing downloaded at install or run time). The tests find them at
# $AHPD_TEST_CACHE/{opencode,kilo}/node_modules/.bin/{opencode,kilo} (or wherever
# $AHPD_OPENCODE_BIN / $AHPD_KILO_BIN point). Idempotent: does nothing when the pinned versions are there.
set -euo pipefail
CACHE="${AHPD_TEST_CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache}"

installed() { # folder package version bin
  local manifest="$CACHE/$1/node_modules/$2/package.json"
  [ -f "$manifest" ] && grep -q "\"version\": \"$3\"" "$manifest" && [ -x "$CACHE/$1/node_modules/.bin/$4" ]
}

install() { # folder package version bin
  local dir="$CACHE/$1"
  if installed "$@"; then
    echo "$2@$3 already installed in $dir"
    return 0
  fi
  npm_into "$1" "$dir" "$2@$3" || return 1
  echo "installed $2@$3 in $dir"
}

source "$(dirname "$0")/npm.bash"
opencode=$(install opencode opencode-ai 1.18.33 opencode)
# Not 7.8.1, the newest: its platform package (@kilocode/cli-linux-x64@7.8.1) is not in the npm
# registry the test machines reach, so its postinstall fails there.
kilo=$(install kilo @kilocode/cli 7.7.7 kilo)
echo "opencode: $opencode; $kilo"
