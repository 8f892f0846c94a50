#!/usr/bin/env bash
# Installs the official Python MCP SDK (a streamable-HTTP client nobody here wrote) into a venv
# under $AHPD_TEST_CACHE/mcp-venv; tests run $AHPD_TEST_CACHE/mcp-venv/bin/python with
# tests/mcp/client.py. Idempotent.
set -euo pipefail
VERSION="1.22.0"
CACHE="${AHPD_TEST_CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache}"
VENV="$CACHE/mcp-venv"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import mcp, importlib.metadata as m; assert m.version('mcp') == '$VERSION'" 2>/dev/null; then
  echo "mcp: the Python MCP SDK $VERSION is already installed in $VENV"
  exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "mcp==$VERSION"
echo "mcp: installed the Python MCP SDK $VERSION in $VENV"
