//! A scripted mock of the Anthropic Messages API (issue 7): not built yet.
