//! `ahpd logs [-f] [-n N]`: the last lines of the daemon's log (`daemon.log` in the data folder,
//! and the files moved aside before it when it holds fewer), then, with `-f`, every line written
//! after them, across rotations, until interrupted.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use super::{fail, EXIT_CONFLICT, EXIT_USAGE};
use crate::paths::Paths;

/// How often a followed log is looked at again.
const POLL: Duration = Duration::from_millis(100);

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
    // Read through the handle that is followed next, so no line falls between the two.
    let mut newest = Vec::new();
    if let Err(e) = file.read_to_end(&mut newest) {
        return fail(EXIT_CONFLICT, &format!("could not read {}: {e}", log.display()));
    }
    let mut out = std::io::stdout().lock();
    for line in last_lines(&log, &String::from_utf8_lossy(&newest), lines) {
        if writeln!(out, "{line}").is_err() {
            return ExitCode::SUCCESS;
        }
    }
    if !follow || out.flush().is_err() {
        return ExitCode::SUCCESS;
    }
    loop {
        if copy_new(&mut file, &mut out).is_err() {
            // The reader went away (`ahpd logs -f | head`).
            return ExitCode::SUCCESS;
        }
        if rotated(&file, &log) {
            // What was written before the move is read to its end, then each newer file moved
            // aside since (several, when the log turned over quickly), then the new one from its
            // start.
            let newer = newer_files(&file, &log);
            if copy_new(&mut file, &mut out).is_err() {
                return ExitCode::SUCCESS;
            }
            for path in newer.iter().filter(|p| **p != log) {
                let copied = File::open(path).map(|mut f| copy_new(&mut f, &mut out));
                if matches!(copied, Ok(Err(_))) {
                    return ExitCode::SUCCESS;
                }
            }
            match File::open(&log) {
                Ok(next) => file = next,
                Err(_) => std::thread::sleep(POLL),
            }
            continue;
        }
        std::thread::sleep(POLL);
    }
}

/// The last `n` lines of the log whose newest file holds `newest`, reading the files moved aside
/// before it when it has fewer.
pub fn last_lines(log: &Path, newest: &str, n: usize) -> Vec<String> {
    let mut kept: Vec<String> = newest.lines().map(str::to_owned).collect();
    for file in crate::logging::files(log).into_iter().skip(1) {
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

/// The log's files newer than the one `file` reads, oldest first (every one when it is gone).
fn newer_files(file: &File, log: &Path) -> Vec<std::path::PathBuf> {
    let files = crate::logging::files(log);
    let ours = file.metadata().ok().map(|m| (m.dev(), m.ino()));
    let at = files.iter().position(|f| std::fs::metadata(f).ok().map(|m| (m.dev(), m.ino())) == ours);
    let mut newer = files[..at.unwrap_or(files.len())].to_vec();
    newer.reverse();
    newer
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
        assert_eq!(last_lines(&log, "d\ne\n", 1), ["e"]);
        assert_eq!(last_lines(&log, "d\ne\n", 4), ["b", "c", "d", "e"]);
        assert_eq!(last_lines(&log, "d\ne\n", 10), ["a", "b", "c", "d", "e"]);
    }
}
