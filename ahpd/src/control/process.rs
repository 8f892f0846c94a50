//! Questions about another process by its pid: is it alive, is it an ahpd, stop it.

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn pid_of(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().filter(|p| *p > 0).map(Pid::from_raw)
}

/// True while the process exists and has not exited. A detached daemon's parent is gone, and
/// whoever adopted it may be slow to reap it (or never do so, in a container whose first process
/// reaps nothing): a zombie counts as exited.
pub fn alive(pid: u32) -> bool {
    let Some(p) = pid_of(pid) else { return false };
    match kill(p, None) {
        Ok(()) | Err(Errno::EPERM) => !is_zombie(pid),
        Err(_) => false,
    }
}

fn is_zombie(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may hold anything.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) == Some("Z")
}

/// True when the process looks like an ahpd (its program is named `ahpd…`), so a recorded pid
/// that the system has since given to another program is never signalled. Where `/proc` cannot
/// tell, it is taken to be one.
pub fn looks_like_ahpd(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return !std::path::Path::new("/proc/self").exists();
    };
    let program = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    let program = String::from_utf8_lossy(program);
    let name = program.rsplit('/').next().unwrap_or_default();
    name.starts_with("ahpd")
}

/// Sends SIGTERM.
pub fn terminate(pid: u32) -> Result<(), Errno> {
    let p = pid_of(pid).ok_or(Errno::ESRCH)?;
    kill(p, Signal::SIGTERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_made_up_one_is_not() {
        assert!(alive(std::process::id()));
        assert!(!alive(0));
        assert!(!alive(u32::MAX));
    }
}
