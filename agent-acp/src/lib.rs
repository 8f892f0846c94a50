//! The ACP backend: any Agent Client Protocol agent (Gemini CLI, Codex, goose, claude-agent-acp, ...) as a worker, reaching host tools over /ahp-mcp (issue 8).
//!
//! Not built yet: this crate will own one backend on `agent-runner`, and must never depend on `ahpd`.
