//! `ahpd logs [-f] [-n N]`: the last lines of the daemon's log (`daemon.log` in the data folder,
//! and the files moved aside before it when it holds fewer), then, with `-f`, every line written
//! after them, across rotations, until interrupted.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use super::{fail, EXIT_CONFLICT, EXIT_USAGE};
use crate::paths::Paths;

/// How often a followed log is looked at again.
const POLL: Duration = Duration::from_millis(200);

/// Runs `ahpd logs`.
pub fn run(lines: usize, follow: bool) -> ExitCode {
    let paths = match Paths::platform() {
        Ok(paths) => paths,
        Err(e) => return fail(EXIT_USAGE, &e.to_string()),
    };
    let log = paths.log();
    let mut file = match File::open(&log) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return fail(
                EXIT_CONFLICT,
                &format!(
                    "No log at {}: a daemon started by ahpd start or run as a service logs there; one in the foreground logs to its terminal.",
                    log.display()
                ),
            )
        }
        Err(e) => return fail(EXIT_CONFLICT, &format!("could not read {}: {e}", log.display())),
    };
    let mut out = std::io::stdout().lock();
    for line in last_lines(&log, lines) {
        if writeln!(out, "{line}").is_err() {
            return ExitCode::SUCCESS;
        }
    }
    if !follow {
        return ExitCode::SUCCESS;
    }
    if file.seek(SeekFrom::End(0)).is_err() {
        return ExitCode::SUCCESS;
    }
    let _ = out.flush();
    loop {
        if copy_new(&mut file, &mut out).is_err() {
            // The reader went away (`ahpd logs -f | head`).
            return ExitCode::SUCCESS;
        }
        if rotated(&file, &log) {
            // What was written before the move is read to its end, then the new file from its start.
            if copy_new(&mut file, &mut out).is_err() {
                return ExitCode::SUCCESS;
            }
            match File::open(&log) {
                Ok(next) => file = next,
                Err(_) => {
                    std::thread::sleep(POLL);
                    continue;
                }
            }
            continue;
        }
        std::thread::sleep(POLL);
    }
}

/// The last `n` lines of the log, reading the files moved aside before it when it has fewer.
pub fn last_lines(log: &Path, n: usize) -> Vec<String> {
    let mut kept: Vec<String> = Vec::new();
    for file in crate::logging::files(log) {
        if kept.len() >= n {
            break;
        }
        let text = std::fs::read(&file).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
        let mut older: Vec<String> = text.lines().map(str::to_owned).collect();
        older.append(&mut kept);
        kept = older;
    }
    let from = kept.len().saturating_sub(n);
    kept.split_off(from)
}

/// Copies what was appended to `file` since it was last read; an error means the reader is gone.
fn copy_new(file: &mut File, out: &mut impl Write) -> std::io::Result<()> {
    let mut buf = Vec::new();
    file.read_to_end(&mut buf)?;
    if !buf.is_empty() {
        out.write_all(&buf)?;
        out.flush()?;
    }
    Ok(())
}

/// The file at `path` is no longer the one `file` reads (it was moved aside, or is gone).
fn rotated(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(now)) => open.ino() != now.ino() || open.dev() != now.dev(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_lines_reach_into_the_files_moved_aside() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("daemon.log");
        std::fs::write(dir.path().join("daemon.log.1"), "a\nb\nc\n").expect("write");
        std::fs::write(&log, "d\ne\n").expect("write");
        assert_eq!(last_lines(&log, 1), ["e"]);
        assert_eq!(last_lines(&log, 4), ["b", "c", "d", "e"]);
        assert_eq!(last_lines(&log, 10), ["a", "b", "c", "d", "e"]);
    }
}
