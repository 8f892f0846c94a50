//! What ends, inside a session's container, what one `ahpd box-exec` started there once that
//! launcher is gone (its program exited, or it was killed with its session's command, a `kill -9`
//! alike). A container engine's exec has no way to end what it started, and what a program leaves
//! running (a stopped `!` command's program, a server put in the background) would otherwise live
//! on until the container goes. So every process a launcher starts carries its mark in its
//! environment ([`MARK`]), and the daemon, when the launcher's hold on the gate ends, runs
//! [`argv`] in the container: every process carrying the mark is sent SIGTERM, given a second,
//! then SIGKILL, as the host's child guard ends a group. It is a POSIX shell script needing only
//! `sh` and `cat`, so it runs in any image the session's own shell runs in. A program that
//! empties its environment escapes it (docs/security.md says so).

/// The variable that carries a launcher's mark into everything it starts.
pub const MARK: &str = "AHPD_EXEC_MARK";

/// The sweep, its mark as `$1`. A process's `/proc/PID/environ` is read through a command
/// substitution, which drops its NUL separators: the mark is a fixed-length token, so the whole
/// `AHPD_EXEC_MARK=<mark>` appearing in the joined text is this mark and no other. What it
/// ended is printed, for the daemon's log.
const SCRIPT: &str = r#"entry="AHPD_EXEC_MARK=$1"
marked() {
  for dir in /proc/[0-9]*; do
    [ "$dir" = "/proc/$$" ] && continue
    case "$(cat "$dir/environ" 2>/dev/null)" in
      *"$entry"*) printf '%s ' "${dir#/proc/}" ;;
    esac
  done
}
found=$(marked)
[ -z "$found" ] && { echo "nothing left"; exit 0; }
kill -TERM $found 2>/dev/null
sleep 1
left=$(marked)
[ -n "$left" ] && kill -KILL $left 2>/dev/null
echo "ended: $found; killed: ${left:-none}"
"#;

/// The command line that ends, in a container, every process carrying `mark`.
pub fn argv(mark: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), SCRIPT.into(), "sh".into(), mark.into()]
}

/// A new launcher's mark: fixed-length, so no mark is a prefix of another.
pub fn new_mark() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::os::unix::process::ExitStatusExt;

    use agent_runner::child::{run_to_end, ChildCommand};
    use nix::sys::signal::Signal;

    /// Runs the sweep of `mark` here (this machine's `/proc`); answers what it printed.
    async fn sweep(mark: &str) -> String {
        let argv = argv(mark);
        let ran = tokio::task::spawn_blocking(move || {
            let mut command = std::process::Command::new(&argv[0]);
            command.args(&argv[1..]);
            run_to_end(command)
        });
        let output = ran.await.expect("joined").expect("the sweep runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    #[tokio::test]
    async fn what_carries_the_mark_is_ended_and_nothing_else() {
        let (mark, other) = (new_mark(), new_mark());
        let start =
            |mark: &str| ChildCommand::new("sleep").args(["60"]).envs([(MARK, mark)]).spawn().expect("sleep starts");
        let (marked, _pipes) = start(&mark);
        let (unmarked, _other_pipes) = start(&other);
        let said = sweep(&mark).await;
        assert!(said.contains(&marked.pid().to_string()), "{said}");
        let status = marked.wait().await.expect("reaped");
        assert_eq!(status.signal(), Some(Signal::SIGTERM as i32), "{status:?}");
        assert!(!unmarked.has_exited(), "another launcher's process is left alone");
        assert!(sweep(&mark).await.contains("nothing left"));
    }

    #[test]
    fn marks_are_all_of_one_length() {
        assert_eq!(new_mark().len(), new_mark().len());
        assert_ne!(new_mark(), new_mark());
    }
}
