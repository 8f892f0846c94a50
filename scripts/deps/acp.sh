#!/usr/bin/env bash
# Installs the two real ACP agents the agent-acp tests drive against the project's mock Anthropic
# API, pinned, under $AHPD_TEST_CACHE/acp:
#   @agentclientprotocol/claude-agent-acp  - the current Claude adapter (runs Bash itself)
#   @zed-industries/claude-code-acp        - the older adapter, which routes Read/Write/Bash through
#                                            the client's fs/* and terminal/* methods
# The tests find them at $AHPD_TEST_CACHE/acp/node_modules/.bin/{claude-agent-acp,claude-code-acp}
# (or wherever $AHPD_CLAUDE_AGENT_ACP_BIN / $AHPD_CLAUDE_CODE_ACP_BIN point). Idempotent: does nothing
# when the pinned versions are there. Versions are the ones shared/research/backends.md §2.3 verified.
set -euo pipefail
AGENT_ACP="@agentclientprotocol/claude-agent-acp"
AGENT_ACP_VERSION="0.101.0"
CODE_ACP="@zed-industries/claude-code-acp"
CODE_ACP_VERSION="0.16.2"
CACHE="${AHPD_TEST_CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache}"
DIR="$CACHE/acp"

installed() { # package version
  local manifest="$DIR/node_modules/$1/package.json"
  [ -f "$manifest" ] && grep -q "\"version\": \"$2\"" "$manifest"
}

if installed "$AGENT_ACP" "$AGENT_ACP_VERSION" && installed "$CODE_ACP" "$CODE_ACP_VERSION" \
  && [ -x "$DIR/node_modules/.bin/claude-agent-acp" ] && [ -x "$DIR/node_modules/.bin/claude-code-acp" ]; then
  echo "acp: $AGENT_ACP@$AGENT_ACP_VERSION and $CODE_ACP@$CODE_ACP_VERSION already installed in $DIR"
  exit 0
fi
source "$(dirname "$0")/npm.bash"
npm_into acp "$DIR" "$AGENT_ACP@$AGENT_ACP_VERSION" "$CODE_ACP@$CODE_ACP_VERSION"
echo "acp: installed $AGENT_ACP@$AGENT_ACP_VERSION and $CODE_ACP@$CODE_ACP_VERSION in $DIR"
