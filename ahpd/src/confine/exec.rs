//! `ahpd box-exec`: the launcher of a `container` session's processes. It runs on the daemon's
//! machine as the child any process of the session would be (started by the one guard, its own
//! group, its stderr tail kept), and runs the program after `--` inside the session's container
//! through the engine's exec, with its stdin, stdout and stderr attached (`exec -i`): the worker
//! protocol and a CLI's stream are stdio, so what runs inside is a child like any other.
//!
//! It first asks the daemon, on the session's gate socket, which container is the session's: the
//! daemon answers once the container is made (an image may be built first), or says why it could
//! not be. It then exits as the program did. It holds the gate's connection while it lives, and
//! everything it starts carries the mark the gate gave it: when the connection ends (an exit and
//! a `kill -9` alike), the daemon ends what is left of it in the container (`sweep.rs`).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::engine::{Attach, ContainerEngine};

/// The exit code of a program that could not be started in its container.
const CANNOT_RUN: u8 = 126;

/// What the daemon answers on a session's gate, one JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Gate {
    /// The session's container, made and running, and the mark of this launcher (what it starts
    /// carries it in `AHPD_EXEC_MARK`).
    Container { id: String, mark: String },
    /// Why it could not be made.
    Refused(String),
}

/// Variables of the daemon's machine that mean nothing inside a container (or would point its
/// programs back at the machine), never carried in.
const LEFT_OUTSIDE: [&str; 16] = [
    "PATH",
    "USER",
    "LOGNAME",
    "SHELL",
    "HOSTNAME",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    "TMPDIR",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "MAIL",
    "LS_COLORS",
    "SSH_AUTH_SOCK",
    "DOCKER_HOST",
];

/// Whether variable `key` is carried into the container (the mark is this launcher's own).
fn carried(key: &str) -> bool {
    !LEFT_OUTSIDE.contains(&key) && key != super::sweep::MARK && !key.starts_with("XDG_") && !key.starts_with("DBUS_")
}

/// What `ahpd box-exec` was asked to do (its command line).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Plan {
    /// The container engine's URL (`unix://`, `tcp://`, `ssh://`).
    #[arg(long, value_name = "URL")]
    engine: String,
    /// The session's gate socket, where the daemon says which container is the session's.
    #[arg(long, value_name = "SOCKET")]
    gate: PathBuf,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    command: Vec<String>,
}

/// Runs `ahpd box-exec ARGS`.
pub fn run(plan: Plan) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("ahpd box-exec: {e}");
            return ExitCode::from(CANNOT_RUN);
        }
    };
    let ran = runtime.block_on(relay(plan));
    // The read of our stdin may still wait (a terminal never ends): it is not waited for.
    runtime.shutdown_background();
    match ran {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(why) => {
            eprintln!("{why}");
            ExitCode::from(CANNOT_RUN)
        }
    }
}

/// The session's container as the gate names it: its id, this launcher's mark, and the gate's
/// connection, to be held while this launcher lives.
struct Admitted {
    id: String,
    mark: String,
    _held: BufReader<UnixStream>,
}

/// Asks the gate which container is the session's.
async fn container(gate: &std::path::Path) -> Result<Admitted, String> {
    let gone = |e: std::io::Error| {
        format!("This session's container is not there: the daemon that makes it does not answer ({e}).")
    };
    let mut stream = BufReader::new(UnixStream::connect(gate).await.map_err(gone)?);
    let mut said = String::new();
    stream.read_line(&mut said).await.map_err(gone)?;
    match serde_json::from_str(&said) {
        Ok(Gate::Container { id, mark }) => Ok(Admitted { id, mark, _held: stream }),
        Ok(Gate::Refused(why)) => Err(why),
        Err(_) => Err("This session's container is not there: the daemon stopped before it was made.".into()),
    }
}

/// Runs the program inside and relays its stdio; answers its exit code.
async fn relay(plan: Plan) -> Result<i64, String> {
    let admitted = container(&plan.gate).await?;
    let engine = ContainerEngine::connect(&plan.engine, "")?;
    let workdir = std::env::current_dir().ok().map(|d| d.display().to_string());
    let mut env: Vec<String> = std::env::vars().filter(|(k, _)| carried(k)).map(|(k, v)| format!("{k}={v}")).collect();
    env.push(format!("{}={}", super::sweep::MARK, admitted.mark));
    let tty = std::io::stdin().is_terminal();
    let attached = engine.attach(&admitted.id, Attach { argv: plan.command, env, workdir, tty }).await?;
    let mut input = attached.input;
    // Its stdin, until ours ends: then its own ends too (a worker's parent is gone).
    let feeding = tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let _ = tokio::io::copy(&mut stdin, &mut input).await;
        let _ = input.shutdown().await;
    });
    let mut output = attached.output;
    let (mut stdout, mut stderr) = (tokio::io::stdout(), tokio::io::stderr());
    while let Some(piece) = output.next().await {
        use bollard::container::LogOutput;
        let written = match piece.map_err(|e| format!("the engine at {} stopped answering: {e}", plan.engine))? {
            LogOutput::StdErr { message } => stderr.write_all(&message).await.and(stderr.flush().await),
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                stdout.write_all(&message).await.and(stdout.flush().await)
            }
            LogOutput::StdIn { .. } => Ok(()),
        };
        if written.is_err() {
            // Nobody reads it any more: the session let go of it.
            break;
        }
    }
    feeding.abort();
    Ok(engine.exit_code(&attached.id).await.unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Plan, clap::Error> {
        super::super::parse_verb("box-exec", args)
    }

    #[test]
    fn the_engine_the_gate_and_the_program_are_read_from_the_command_line() {
        let plan = parse(&["--engine", "unix:///e.sock", "--gate", "/g/gate.sock", "--", "sh", "-c", "x"]);
        assert_eq!(
            plan.ok(),
            Some(Plan {
                engine: "unix:///e.sock".into(),
                gate: "/g/gate.sock".into(),
                command: vec!["sh".into(), "-c".into(), "x".into()]
            })
        );
        assert!(parse(&["--gate", "/g", "--", "sh"]).is_err());
        assert!(parse(&["--engine", "unix:///e", "--gate", "/g"]).is_err());
    }

    #[test]
    fn the_machines_own_variables_stay_outside() {
        assert!(carried("ANTHROPIC_BASE_URL") && carried("HOME") && carried("IS_SANDBOX"));
        assert!(!carried("PATH") && !carried("XDG_RUNTIME_DIR") && !carried("SSH_AUTH_SOCK"));
        assert!(!carried("AHPD_EXEC_MARK"), "a launcher's mark is its own, never one it inherited");
    }
}
