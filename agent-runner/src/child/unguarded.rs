//! What starts without the guard ([`ChildCommand`]), each by its name, so nothing else in the
//! workspace calls `Command::spawn` (`clippy.toml` bans it outside this module): a short command
//! run to its end in a process group of its own ([`run_to_end`], [`run_within`]: a program's
//! version, a service manager's answer, a check of the daemon's options), and the one process
//! meant to outlive this one, the daemon `ahpd start` leaves running ([`detached`]).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::ChildCommand;

/// How often a short command is looked at while it has not ended.
const POLL: Duration = Duration::from_millis(20);

/// Runs a short-lived `command` to its end in a process group of its own, its stdout and stderr
/// read whole (its stdin as the caller set it).
pub fn run_to_end(command: Command) -> std::io::Result<Output> {
    let (mut child, readers) = start(command)?;
    let status = child.wait()?;
    Ok(readers.output(status))
}

/// Runs a short-lived `command` as [`run_to_end`] does, giving it `within`: when it has not ended
/// by then its whole group is killed and `None` answered.
pub fn run_within(command: Command, within: Duration) -> std::io::Result<Option<Output>> {
    let (mut child, readers) = start(command)?;
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(readers.output(status)));
        }
        if Instant::now() >= deadline {
            if let Some(group) = i32::try_from(child.id()).ok().filter(|id| *id > 0) {
                let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
            }
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

/// Starts the one process meant to outlive this one, the daemon `ahpd start` launches: not a
/// guard, not in this process's register, and not ended with it.
pub fn detached(command: &mut Command) -> std::io::Result<std::process::Child> {
    #[allow(clippy::disallowed_methods)] // the daemon outlives the verb that started it
    command.spawn()
}

/// The pipes of a short command, read on threads of their own so a full pipe never stalls it.
struct Readers {
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
}

impl Readers {
    fn output(self, status: std::process::ExitStatus) -> Output {
        let read = |reader: Option<JoinHandle<Vec<u8>>>| reader.and_then(|r| r.join().ok()).unwrap_or_default();
        Output { status, stdout: read(self.stdout), stderr: read(self.stderr) }
    }
}

fn start(mut command: Command) -> std::io::Result<(std::process::Child, Readers)> {
    command.stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    #[allow(clippy::disallowed_methods)] // the one place a short command starts
    let mut child = command.spawn()?;
    let read_whole = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let readers = Readers {
        stdout: child.stdout.take().map(|p| read_whole(Box::new(p))),
        stderr: child.stderr.take().map(|p| read_whole(Box::new(p))),
    };
    Ok((child, readers))
}

impl From<&Command> for ChildCommand {
    /// The guard's command for what a `std` (or, through `as_std`, a tokio) command names: its
    /// program, arguments, environment and folder.
    fn from(command: &Command) -> Self {
        let set = command.get_envs().filter_map(|(key, value)| value.map(|value| (key, value)));
        let removed = command.get_envs().filter(|(_, value)| value.is_none()).map(|(key, _)| key);
        let child = ChildCommand::new(command.get_program()).args(command.get_args()).envs(set).env_remove(removed);
        match command.get_current_dir() {
            Some(folder) => child.cwd(folder),
            None => child,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_command_is_read_to_its_end() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo out; echo err >&2; exit 3"]);
        let output = run_to_end(command).expect("sh runs");
        assert_eq!(
            (output.status.code(), output.stdout.as_slice(), output.stderr.as_slice()),
            (Some(3), &b"out\n"[..], &b"err\n"[..])
        );
    }
}
