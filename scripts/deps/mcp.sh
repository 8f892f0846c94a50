#!/usr/bin/env bash
# Installs the official Python MCP SDK (a streamable-HTTP client nobody here wrote) twice, into
# venvs under $AHPD_TEST_CACHE: mcp-venv holds 1.22.0, whose newest revision is 2025-06-18, and
# mcp-venv-latest the newest release we test against, which speaks the newest revision. Tests run
# each venv's python with tests/mcp/client.py. Idempotent.
set -euo pipefail
CACHE="${AHPD_TEST_CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache}"

install() {
  local venv="$CACHE/$1" version="$2"
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import mcp, importlib.metadata as m; assert m.version('mcp') == '$version'" 2>/dev/null; then
    echo "mcp: the Python MCP SDK $version is already installed in $venv"
    return
  fi
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$version"
  echo "mcp: installed the Python MCP SDK $version in $venv"
}

install mcp-venv 1.22.0
install mcp-venv-latest 2.3.0
