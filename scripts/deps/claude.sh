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

if [ -x "$bin" ] && [ -f "$stamp" ] && [ -z "$(find "$stamp" -mmin +1440 2>/dev/null)" ]; then
  echo "claude: $("$bin" --version 2>/dev/null || echo '?') at $bin (cached)"
  exit 0
fi

mkdir -p "$prefix"
if ! npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error @anthropic-ai/claude-code@latest >"$prefix/npm.log" 2>&1; then
  if [ -x "$bin" ]; then
    # Offline or the registry said no: keep what we have rather than fail the suite.
    echo "claude: npm install failed (see $prefix/npm.log); keeping $("$bin" --version 2>/dev/null) at $bin"
    exit 0
  fi
  cat "$prefix/npm.log" >&2
  echo "claude: npm install @anthropic-ai/claude-code@latest failed" >&2
  exit 1
fi
touch "$stamp"
echo "claude: installed $("$bin" --version 2>/dev/null || echo '?') at $bin"
