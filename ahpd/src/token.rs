//! The connection token: given (`--connection-token`), read from a file (`--connection-token-file`,
//! made with a random token when missing), or — with no choice made — made once into the data
//! folder's `connection-token` (0600) and kept there, so a daemon on loopback is never open to the
//! other accounts of the machine. `--without-connection-token` turns it off, with a warning.
//!
//! The token is never printed, logged or recorded; the record names the file it is kept in, so a
//! client on this machine running as the same person ([`for_clients`]) can present it.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::config::{Config, Source as KeySource};
use crate::paths::Paths;

/// The file in the data folder that keeps the token made when no choice was given.
pub const FILE_NAME: &str = "connection-token";

/// Where the token came from, for the announcement (never the token itself).
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// No token: `--without-connection-token` (`loopback`: bound to this machine alone).
    Without {
        /// The daemon listens on loopback alone.
        loopback: bool,
    },
    /// One connection over stdio, which is its own door.
    Stdio,
    /// `--connection-token` or `connectionToken`.
    Given,
    /// Read from the file `--connection-token-file` names.
    Read(PathBuf),
    /// Written to the file `--connection-token-file` names, which did not exist.
    Written(PathBuf),
    /// No choice was made: the token kept in the data folder.
    Kept(PathBuf),
    /// No choice was made and none was kept yet: made now and kept in the data folder.
    Made(PathBuf),
}

impl Source {
    /// The file the token is kept in, when it is kept in one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Source::Read(p) | Source::Written(p) | Source::Kept(p) | Source::Made(p) => Some(p),
            Source::Without { .. } | Source::Stdio | Source::Given => None,
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Without { loopback: true } => {
                f.write_str("no token: every account on this machine may connect (--without-connection-token)")
            }
            Source::Without { loopback: false } => f.write_str("no token: any connection is accepted"),
            Source::Stdio => f.write_str("no token: one connection over stdio"),
            Source::Given => f.write_str("token: from the command line or config"),
            Source::Read(p) => write!(f, "token: read from {}", p.display()),
            Source::Written(p) => write!(f, "token: written to {}", p.display()),
            Source::Kept(p) => write!(f, "token: kept in {}", p.display()),
            Source::Made(p) => write!(f, "token: made and kept in {}", p.display()),
        }
    }
}

/// The token in force.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The token clients must present; `None` admits every connection the door lets in.
    pub token: Option<String>,
    /// Where it came from.
    pub source: Source,
    /// What a person should be warned of (a token on the command line, no token at all).
    pub warnings: Vec<String>,
}

/// A warning for a token on the command line: `ps` shows every process's arguments to every account.
pub const ON_THE_COMMAND_LINE: &str = "--connection-token puts the token in this process's arguments, which every account on this machine can read (ps); keep it in a file and pass --connection-token-file instead";

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Works out the token from the config, refusing the combinations that make no sense. `base` is
/// the folder a relative `connectionTokenFile` is read from; `paths` says where a made token is
/// kept.
pub fn resolve(config: &Config, base: &Path, paths: &Paths) -> Result<Resolved, String> {
    let host = config.string("host").unwrap_or_else(|| "127.0.0.1".into());
    let without = config.bool("withoutConnectionToken");
    let given = config.string("connectionToken");
    let file = config.string("connectionTokenFile").map(|f| base.join(f));
    let mut warnings = Vec::new();
    let (token, source) = match (given, file, without) {
        (Some(_), _, true) | (_, Some(_), true) => {
            return Err("--without-connection-token contradicts the token you also passed.".into())
        }
        (Some(_), Some(_), _) => return Err("Pass --connection-token or --connection-token-file, not both.".into()),
        (Some(token), None, false) => {
            if config.source("connectionToken") == KeySource::Flag {
                warnings.push(ON_THE_COMMAND_LINE.to_owned());
            }
            (Some(token), Source::Given)
        }
        (None, Some(file), false) => {
            let (token, made) = read_or_make(&file)?;
            (Some(token), if made { Source::Written(file) } else { Source::Read(file) })
        }
        (None, None, true) => {
            let loopback = is_loopback(&host);
            warnings.push(if loopback {
                "no connection token: every program of every account on this machine can connect and drive your agents (your files, your shell)".to_owned()
            } else {
                format!("no connection token on {host}: anyone who can reach it can drive your agents (your files, your shell)")
            });
            (None, Source::Without { loopback })
        }
        // Exposure beyond this machine is a choice said in so many words; a users directory is
        // one (people present their own tokens).
        (None, None, false) if is_loopback(&host) || config.string("users").is_some() => {
            let file = paths.data_dir.join(FILE_NAME);
            let (token, made) = read_or_make(&file)?;
            (Some(token), if made { Source::Made(file) } else { Source::Kept(file) })
        }
        (None, None, false) => {
            return Err(format!(
                "Binding {host} exposes this host beyond this machine.\nPass --connection-token, --connection-token-file, or --without-connection-token."
            ))
        }
    };
    Ok(Resolved { token, source, warnings })
}

/// The token a client of the daemon for `paths` presents: the one in the file its record names,
/// else the one kept in its data folder. `None` when the daemon keeps none in a file (no token, or
/// one given on its command line).
pub fn for_clients(paths: &Paths) -> Result<Option<String>, String> {
    let recorded = crate::control::Record::read(&paths.record()).ok().flatten().and_then(|r| r.token_file);
    let file = recorded.unwrap_or_else(|| paths.data_dir.join(FILE_NAME));
    match read(&file) {
        Ok(token) => Ok(Some(token)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("could not read {}: {e}", file.display())),
    }
}

/// Reads the token in `file`; makes a random one there (0600) when there is no file. Answers the
/// token and whether it was made now.
fn read_or_make(file: &Path) -> Result<(String, bool), String> {
    match read(file) {
        Ok(token) => Ok((token, false)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = uuid::Uuid::new_v4().simple().to_string();
            crate::fsutil::write_private(file, token.as_bytes())
                .map_err(|e| format!("could not write {}: {e}", file.display()))?;
            Ok((token, true))
        }
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(format!("{} is empty.", file.display())),
        Err(e) => Err(format!("could not read {}: {e}", file.display())),
    }
}

fn read(file: &Path) -> std::io::Result<String> {
    let token = std::fs::read_to_string(file)?.trim().to_owned();
    if token.is_empty() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "empty"));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn setup() -> (tempfile::TempDir, Paths) {
        let dir = tempfile::tempdir().expect("temp dir");
        let paths = Paths { config_dir: dir.path().join("config"), data_dir: dir.path().join("data") };
        (dir, paths)
    }

    fn config(dir: &Path, pairs: &[(&str, Value)]) -> Config {
        let mut config = Config::load(dir, Some(&write_empty(dir))).expect("loads");
        for (key, value) in pairs {
            config.set_flag(key, value.clone()).expect("flag");
        }
        config
    }

    fn write_empty(dir: &Path) -> PathBuf {
        let file = dir.join("empty.json");
        std::fs::write(&file, "{}").expect("write");
        file
    }

    #[test]
    fn with_no_choice_a_token_is_made_once_kept_private_and_reused() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, paths) = setup();
        let first = resolve(&config(dir.path(), &[]), dir.path(), &paths).expect("resolves");
        let file = paths.data_dir.join(FILE_NAME);
        assert_eq!(first.source, Source::Made(file.clone()));
        let token = first.token.expect("a token");
        assert_eq!(token.len(), 32);
        let mode = std::fs::metadata(&file).expect("the file").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = resolve(&config(dir.path(), &[]), dir.path(), &paths).expect("resolves");
        assert_eq!(again.source, Source::Kept(file));
        assert_eq!(again.token.as_deref(), Some(token.as_str()));
        assert_eq!(for_clients(&paths).expect("reads"), Some(token));
        assert!(first.warnings.is_empty());
    }

    #[test]
    fn without_a_token_or_with_one_on_the_command_line_a_person_is_warned() {
        let (dir, paths) = setup();
        let open = resolve(&config(dir.path(), &[("withoutConnectionToken", Value::from(true))]), dir.path(), &paths)
            .expect("resolves");
        assert_eq!(open.token, None);
        assert!(open.warnings[0].contains("every account on this machine"), "{:?}", open.warnings);
        assert!(!paths.data_dir.join(FILE_NAME).exists(), "nothing is kept");
        let flag = resolve(&config(dir.path(), &[("connectionToken", Value::from("s3cret"))]), dir.path(), &paths)
            .expect("resolves");
        assert_eq!(flag.source, Source::Given);
        assert_eq!(flag.warnings, vec![ON_THE_COMMAND_LINE.to_owned()]);
        assert!(!flag.source.to_string().contains("s3cret"));
        let public = resolve(&config(dir.path(), &[("host", Value::from("0.0.0.0"))]), dir.path(), &paths);
        assert!(public.expect_err("refused").starts_with("Binding 0.0.0.0 exposes this host"));
    }
}
