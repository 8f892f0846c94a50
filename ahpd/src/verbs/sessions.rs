//! `ahpd sessions [--json]`: the running daemon's sessions, as `listSessions` lists them (every
//! page), through the official client: one line each, or the list itself as JSON.

use std::process::ExitCode;

use serde_json::Value;

use super::remote::{self as client, Target};
use super::say;
use crate::cli::SessionsArgs;

/// Runs `ahpd sessions`.
pub async fn run(args: &SessionsArgs) -> ExitCode {
    client::run(&args.client, |target| list(target, args.json)).await
}

async fn list(target: Target, json: bool) -> Result<ExitCode, String> {
    let conn = client::connect(&target).await?;
    let items = conn.sessions().await?;
    conn.client.shutdown().await;
    if json {
        say(&serde_json::to_string_pretty(&items).map_err(|e| e.to_string())?);
        return Ok(ExitCode::SUCCESS);
    }
    if items.is_empty() {
        say("No sessions.");
    }
    for item in &items {
        say(&line(item));
    }
    Ok(ExitCode::SUCCESS)
}

/// `streaming   echo    Title of it   (ahp-session:/…)`.
fn line(item: &Value) -> String {
    let status = u32::try_from(item["status"].as_u64().unwrap_or(0)).unwrap_or(0);
    format!(
        "{:<11} {:<8} {}  ({})",
        state(status),
        item["provider"].as_str().unwrap_or("?"),
        item["title"].as_str().filter(|t| !t.is_empty()).unwrap_or("New session"),
        item["resource"].as_str().unwrap_or("?")
    )
}

/// A status in words: what a person would want to know first.
pub fn state(status: u32) -> &'static str {
    const IN_PROGRESS: u32 = 8;
    const INPUT_NEEDED: u32 = 24;
    const ERROR: u32 = 2;
    const ARCHIVED: u32 = 64;
    match status & 31 {
        INPUT_NEEDED => "needs you",
        IN_PROGRESS => "streaming",
        ERROR => "failed",
        _ if status & ARCHIVED != 0 => "archived",
        _ => "idle",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_reads_as_words() {
        assert_eq!(state(1), "idle");
        assert_eq!(state(8), "streaming");
        assert_eq!(state(24 | 32), "needs you");
        assert_eq!(state(2), "failed");
        assert_eq!(state(1 | 64), "archived");
    }
}
