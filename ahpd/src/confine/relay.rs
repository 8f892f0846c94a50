//! `ahpd box-run`: the first process inside a sandbox. A box has a loopback of its own and nothing
//! else; this listens there on each port the daemon relays (`--port N=SOCKET`: the model API, the
//! daemon's `/ahp-mcp`) and on the proxy's (`--proxy N=SOCKET`), forwards every connection to its
//! socket (`net.rs` serves the other end), runs the program after `--` with stdio untouched, and
//! exits as it did. It never starts a new process group: stopping the group that started the box
//! stops everything in it.
//!
//! With `--refuse SENTENCE` it says the sentence on stderr and fails (126): the launcher a session
//! gets when its box could not be made, so nothing of it ever runs outside.

use std::path::PathBuf;
use std::process::ExitCode;

use tokio::net::{TcpListener, UnixStream};

/// The exit code of a program that could not be started in its box (a shell's "cannot execute").
const CANNOT_RUN: u8 = 126;

/// What `ahpd box-run` was asked to do (its command line).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct Plan {
    /// A loopback port of the box and the socket outside it that it leads to (the model API, the
    /// daemon's `/ahp-mcp`).
    #[arg(long = "port", value_name = "PORT=SOCKET", value_parser = relay_of)]
    ports: Vec<(u16, PathBuf)>,
    /// The proxy's port in the box and its socket outside.
    #[arg(long = "proxy", value_name = "PORT=SOCKET", value_parser = relay_of)]
    proxies: Vec<(u16, PathBuf)>,
    /// Why the box could not be made: said, and nothing runs.
    #[arg(long, value_name = "SENTENCE", allow_hyphen_values = true)]
    refuse: Option<String>,
    /// The program and its arguments.
    #[arg(last = true, value_name = "PROGRAM")]
    command: Vec<String>,
}

/// One `PORT=SOCKET` relay.
fn relay_of(value: &str) -> Result<(u16, PathBuf), String> {
    let (port, socket) = value.split_once('=').ok_or("a relay is PORT=SOCKET")?;
    let port = port.parse().map_err(|_| format!("{port} is not a port"))?;
    Ok((port, PathBuf::from(socket)))
}

/// Runs `ahpd box-run ARGS`.
pub fn run(plan: Plan) -> ExitCode {
    if let Some(why) = plan.refuse {
        eprintln!("{why}");
        return ExitCode::from(CANNOT_RUN);
    }
    let Some((program, args)) = plan.command.split_first() else {
        eprintln!("ahpd box-run: name a program after --");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("ahpd box-run: {e}");
            return ExitCode::from(CANNOT_RUN);
        }
    };
    runtime.block_on(async move {
        for (port, socket) in plan.ports.into_iter().chain(plan.proxies) {
            match TcpListener::bind(("127.0.0.1", port)).await {
                Ok(listener) => {
                    tokio::spawn(forward(listener, socket));
                }
                Err(e) => eprintln!("ahpd box-run: could not listen on 127.0.0.1:{port} in the box: {e}"),
            }
        }
        // The one process this launcher exists for, on the box's own stdio: it is the box's
        // whole lifetime (bubblewrap's group is killed as one by the worker's child guard), so it
        // is run here and waited for, not started through the guard a second time.
        #[allow(clippy::disallowed_methods)]
        let status = tokio::process::Command::new(program).args(args).status().await;
        match status {
            Ok(status) => exit_code(status),
            Err(e) => {
                eprintln!("ahpd box-run: {program} could not be started: {e}");
                ExitCode::from(CANNOT_RUN)
            }
        }
    })
}

/// The program's exit as this process's own (128 + a signal's number, as a shell says it).
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    let code = status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(1);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Forwards every connection to `listener` to `socket`.
async fn forward(listener: TcpListener, socket: PathBuf) {
    while let Ok((mut inside, _)) = listener.accept().await {
        let socket = socket.clone();
        tokio::spawn(async move {
            if let Ok(mut outside) = UnixStream::connect(&socket).await {
                let _ = tokio::io::copy_bidirectional(&mut inside, &mut outside).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Plan, clap::Error> {
        super::super::parse_verb("box-run", args)
    }

    #[test]
    fn the_relays_and_the_program_are_read_from_the_command_line() {
        let plan = parse(&["--port", "80=/s/a", "--proxy", "3128=/s/p", "--", "claude", "-p"]);
        assert_eq!(
            plan.ok(),
            Some(Plan {
                ports: vec![(80, "/s/a".into())],
                proxies: vec![(3128, "/s/p".into())],
                refuse: None,
                command: vec!["claude".into(), "-p".into()],
            })
        );
        assert!(parse(&["--port", "x=/s"]).is_err());
        assert!(parse(&["--nothing"]).is_err());
    }
}
