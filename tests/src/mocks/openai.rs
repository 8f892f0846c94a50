//! A scripted mock of an OpenAI-compatible chat completions API (issue 9): not built yet.
