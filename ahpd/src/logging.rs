//! The daemon's log: where it goes and what it lets through. In a terminal (or under a test) it
//! goes to stderr; a daemon started by `ahpd start` or run by a service manager writes
//! `daemon.log` in the data folder, rotated by size while it runs (`logMaxBytes`, `logFiles` kept
//! beside it, by the `file-rotate` crate), where `ahpd logs` reads it.
//!
//! The filter is `AHPD_LOG`, else `RUST_LOG`, else `info`; one that does not parse stops the start
//! with a sentence (exit 2), before anything runs.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use file_rotate::compression::Compression;
use file_rotate::suffix::AppendCount;
use file_rotate::{ContentLimit, FileRotate};
use tracing_subscriber::EnvFilter;

use crate::config::Config;
use crate::control::server::{DETACHED_ENV, SERVICE_ENV};

/// The variables the filter is read from, first found wins.
pub const FILTER_VARS: [&str; 2] = ["AHPD_LOG", "RUST_LOG"];

/// Where the log goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Destination {
    /// Standard error (a terminal, a test, a parent that reads it).
    Stderr,
    /// The rotated file in the data folder.
    File(PathBuf),
}

/// Where this daemon logs: the file when `ahpd start` detached it or a service manager runs it.
pub fn destination(log_file: &Path) -> Destination {
    let detached = std::env::var(DETACHED_ENV).is_ok_and(|v| v == "1");
    let service = std::env::var_os(SERVICE_ENV).is_some_and(|v| !v.is_empty());
    if detached || service {
        Destination::File(log_file.to_owned())
    } else {
        Destination::Stderr
    }
}

/// The filter in force, as written: `AHPD_LOG`, else `RUST_LOG`, else `info`. One that does not
/// parse is refused with the variable's name.
pub fn filter_from_env() -> Result<String, String> {
    for var in FILTER_VARS {
        if let Ok(value) = std::env::var(var) {
            if value.trim().is_empty() {
                continue;
            }
            return parse(&value).map(|_| value.clone()).map_err(|e| {
                format!("{var}={value} is not a log filter ({e}); try {var}=info, or {var}=ahpd=debug,info")
            });
        }
    }
    Ok("info".to_owned())
}

fn parse(filter: &str) -> Result<EnvFilter, tracing_subscriber::filter::ParseError> {
    EnvFilter::builder().parse(filter)
}

/// How the log file is rotated.
#[derive(Debug, Clone, Copy)]
pub struct Rotation {
    /// A file past this many bytes is moved aside (at a line's end).
    pub max_bytes: usize,
    /// How many moved-aside files are kept (`daemon.log.1` the newest).
    pub keep: usize,
}

impl Rotation {
    /// From the `logMaxBytes` and `logFiles` keys.
    pub fn from_config(config: &Config) -> Self {
        let size = |key: &str| usize::try_from(config.u64(key)).unwrap_or(usize::MAX).max(1);
        Self { max_bytes: size("logMaxBytes"), keep: size("logFiles") }
    }
}

/// Sets up the log. `filter` was checked by [`filter_from_env`]. Workers read `AHPD_LOG`, so a
/// filter from `RUST_LOG` is handed on to them there.
pub fn init(filter: &str, destination: &Destination, rotation: Rotation) -> Result<(), String> {
    if std::env::var_os(FILTER_VARS[0]).is_none() {
        // Before any thread starts: the workers this daemon runs inherit it.
        std::env::set_var(FILTER_VARS[0], filter);
    }
    let filter = parse(filter).map_err(|e| e.to_string())?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    let result = match destination {
        Destination::Stderr => {
            // No colour codes in a file or a pipe.
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            builder.with_writer(std::io::stderr).with_ansi(ansi).try_init()
        }
        Destination::File(path) => {
            let writer = rotating(path, rotation)?;
            let result = builder.with_writer(Mutex::new(writer)).with_ansi(false).try_init();
            log_panics();
            result
        }
    };
    // Already set (a test in the same process): that one stays.
    let _ = result;
    Ok(())
}

/// The rotated log at `path`, 0600, `rotation.keep` old files beside it.
fn rotating(path: &Path, rotation: Rotation) -> Result<FileRotate<AppendCount>, String> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true).create(true).append(true).mode(crate::fsutil::FILE_MODE);
    // Opened once here so a log that cannot be written is a sentence, not a silent loss.
    options.open(path).map_err(|e| format!("could not open the log {}: {e}", path.display()))?;
    Ok(FileRotate::new(
        path,
        AppendCount::new(rotation.keep),
        ContentLimit::BytesSurpassed(rotation.max_bytes),
        Compression::None,
        Some(options),
    ))
}

/// A panic in a daemon that logs to a file is logged there too (its stderr may be a file that was
/// rotated away long ago).
fn log_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        tracing::error!("panic: {info}");
        default(info);
    }));
}

/// The log files at `path`, newest first: `daemon.log`, `daemon.log.1`, ….
pub fn files(path: &Path) -> Vec<PathBuf> {
    let mut files = vec![path.to_owned()];
    for n in 1.. {
        let mut old = path.as_os_str().to_owned();
        old.push(format!(".{n}"));
        let old = PathBuf::from(old);
        if !old.exists() {
            break;
        }
        files.push(old);
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_that_does_not_parse_is_refused_and_a_good_one_is_kept() {
        assert!(parse("info").is_ok());
        assert!(parse("ahpd=debug,warn").is_ok());
        assert!(parse("ahpd=loud").is_err());
    }

    #[test]
    fn the_log_rotates_by_size_and_keeps_so_many_files() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("daemon.log");
        let mut log = rotating(&path, Rotation { max_bytes: 100, keep: 2 }).expect("opens");
        for n in 0..40 {
            log.write_all(format!("line {n:02} of the log, about forty bytes\n").as_bytes()).expect("writes");
        }
        let files = files(&path);
        assert_eq!(files.len(), 3, "daemon.log and two old ones: {files:?}");
        assert!(!dir.path().join("daemon.log.3").exists());
        let newest = std::fs::read_to_string(&path).expect("reads");
        assert!(newest.ends_with("line 39 of the log, about forty bytes\n"), "{newest}");
        for file in files {
            let mode = std::fs::metadata(&file).expect("exists").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", file.display());
        }
    }
}
