#!/usr/bin/env bash
# Installs the real Claude Code CLI (npm `@anthropic-ai/claude-code@latest`) under
# $AHPD_TEST_CACHE/claude, for the agent-claude tests. Idempotent: an install less than a day old
# is kept as it is. The tests find the binary at $AHPD_TEST_CACHE/claude/node_modules/.bin/claude
# (or wherever AHPD_CLAUDE_BIN points).
#
# `@latest` is spelled out on purpose: a bare package name resolved to a months-old version here
# (a stale cached packument), see shared/research/backends.md §1.1.
set -euo pipefail
cd "$(dirname "$0")/../.."
cache="${AHPD_TEST_CACHE:-$PWD/.cache}"
prefix="$cache/claude"
bin="$prefix/node_modules/.bin/claude"
stamp="$prefix/.installed"
KNOWN_GOOD="2.1.332"

if [ -x "$bin" ] && [ -f "$stamp" ] && [ -z "$(find "$stamp" -mmin +1440 2>/dev/null)" ]; then
  echo "claude: $("$bin" --version 2>/dev/null || echo '?') at $bin (cached)"
  exit 0
fi

source "$(dirname "$0")/npm.bash"
if ! npm_into claude "$prefix" @anthropic-ai/claude-code@latest; then
  if [ -x "$bin" ]; then
    # Offline or the registry said no: keep what we have rather than fail the suite.
    echo "claude: keeping $("$bin" --version 2>/dev/null) at $bin"
    exit 0
  fi
  # The version the suite last passed with, in case `latest` is what the registry cannot serve
  # (a release whose platform package is not there yet).
  echo "claude: trying the known-good $KNOWN_GOOD instead" >&2
  npm_into claude "$prefix" "@anthropic-ai/claude-code@$KNOWN_GOOD"
fi
touch "$stamp"
echo "claude: installed $("$bin" --version 2>/dev/null || echo '?') at $bin"
