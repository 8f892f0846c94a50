//! The short commands features ask of the machine (Agent Merge's `git remote get-url` and `gh auth
//! token`, an automation's `git rev-parse` of a watched branch), each started with the one child guard (`agent_runner::child`), with a deadline and a cap on
//! what it may print. What a command prints is returned, never logged: `gh auth token` prints a
//! credential.

use std::path::Path;
use std::time::Duration;

use agent_runner::child::ChildCommand;
use tokio::io::AsyncReadExt;

/// How long one command may run.
const DEADLINE: Duration = Duration::from_secs(20);
/// The most a command may print.
const OUTPUT_CAP: u64 = 1 << 20;

/// What a finished command printed: its standard output trimmed, when it exited 0; otherwise
/// why not, in a sentence (its standard error's first line, never its output).
pub async fn output(program: &str, args: &[&str], dir: &Path) -> Result<String, String> {
    let command = ChildCommand::new(program)
        .args(args)
        .cwd(dir)
        // A daemon started from a Git hook must not read another repository than the folder's.
        .env_remove(["GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_CEILING_DIRECTORIES"])
        .envs([("GIT_TERMINAL_PROMPT", "0"), ("GH_PROMPT_DISABLED", "1"), ("LC_ALL", "C")])
        .stdin_null()
        .stderr_to_caller();
    let (child, pipes) = command.spawn().map_err(|e| e.to_string())?;
    let Some(mut stderr) = pipes.stderr else { return Err(format!("{program} has no stderr pipe")) };
    let run = async {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut capped = pipes.stdout.take(OUTPUT_CAP);
        let (read_out, read_err) = tokio::join!(capped.read_to_end(&mut out), stderr.read_to_end(&mut err));
        read_out.and(read_err).map_err(|e| e.to_string())?;
        let status = child.wait().await;
        if status.is_some_and(|s| s.success()) {
            Ok(String::from_utf8_lossy(&out).trim().to_owned())
        } else {
            let said = String::from_utf8_lossy(&err);
            Err(format!(
                "{program} {} failed: {}",
                args.first().unwrap_or(&""),
                said.lines().next().unwrap_or("").trim()
            ))
        }
    };
    // Given up on, its group is killed with its guard.
    tokio::time::timeout(DEADLINE, run).await.unwrap_or_else(|_| Err(format!("{program} took too long")))
}
