//! Where ahpd keeps things: the platform's config and data folders. On Linux, XDG:
//! `~/.config/ahpd` and `~/.local/share/ahpd` (a test gives each daemon its own by setting
//! `XDG_CONFIG_HOME` and `XDG_DATA_HOME`); on macOS both are `~/Library/Application Support/ahpd`.
//! `ahpd config` prints them; `--help` and the README name them so.

use std::path::PathBuf;

/// The folders one daemon uses.
#[derive(Debug, Clone)]
pub struct Paths {
    /// `config.json` lives here.
    pub config_dir: PathBuf,
    /// Sessions, worker folders, the daemon record, its socket and log live here.
    pub data_dir: PathBuf,
}

impl Paths {
    /// The platform's folders for ahpd.
    pub fn platform() -> anyhow::Result<Self> {
        let dirs = directories::ProjectDirs::from("", "", "ahpd")
            .ok_or_else(|| anyhow::anyhow!("could not find a home folder for ahpd's configuration and data"))?;
        Ok(Self { config_dir: dirs.config_dir().to_owned(), data_dir: dirs.data_dir().to_owned() })
    }

    /// The session store.
    pub fn store(&self) -> PathBuf {
        self.data_dir.join("sessions.db")
    }

    /// The record of the running daemon.
    pub fn record(&self) -> PathBuf {
        self.data_dir.join("daemon.json")
    }

    /// The control socket the verbs reach the daemon through.
    pub fn socket(&self) -> PathBuf {
        self.data_dir.join("ahpd.sock")
    }

    /// A detached daemon's log.
    pub fn log(&self) -> PathBuf {
        self.data_dir.join("daemon.log")
    }
}
