//! A container engine for the tests, with nothing pulled: Podman from Debian's packages
//! (`scripts/deps/podman.sh`), its Docker Engine API served on a socket of the test's own
//! (`podman system service`), and an image built here from a rootfs assembled from the host's
//! own programs (`podman import`), whose `/etc/os-release` names it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, Context};

/// The image the tests build, and what its `/etc/os-release` says.
pub const IMAGE: &str = "localhost/ahpd-test-os:1";
/// Its `PRETTY_NAME`.
pub const PRETTY_NAME: &str = "ahpd test os 1";

/// The programs the image holds (with the libraries they load).
const PROGRAMS: [&str; 7] = ["dash", "sleep", "cat", "ls", "uname", "nproc", "echo"];

/// Podman, or why it is not here.
pub fn podman() -> Result<PathBuf, String> {
    let found = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|d| d.join("podman")).find(|p| p.is_file()));
    let podman = found.ok_or("podman is not installed: run scripts/deps/podman.sh")?;
    let works = Command::new(&podman).arg("info").stdout(Stdio::null()).stderr(Stdio::null()).status();
    match works {
        Ok(s) if s.success() => Ok(podman),
        _ => Err("podman is installed but `podman info` fails: run scripts/deps/podman.sh (as root)".into()),
    }
}

/// Builds [`IMAGE`] once per machine.
pub fn image(podman: &Path) -> anyhow::Result<&'static str> {
    let exists = Command::new(podman).args(["image", "exists", IMAGE]).status()?;
    if exists.success() {
        return Ok(IMAGE);
    }
    let root = tempfile::Builder::new().prefix("ahpd-rootfs-").tempdir()?;
    let r = root.path();
    for dir in ["usr/bin", "etc", "tmp"] {
        std::fs::create_dir_all(r.join(dir))?;
    }
    std::os::unix::fs::symlink("usr/bin", r.join("bin"))?;
    let mut copied = Vec::new();
    for program in PROGRAMS {
        let from = ["/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(program)).find(|p| p.is_file());
        let from = from.ok_or_else(|| anyhow!("{program} is not on this machine"))?;
        std::fs::copy(&from, r.join("usr/bin").join(program))?;
        copied.push(from);
    }
    std::os::unix::fs::symlink("dash", r.join("usr/bin/sh"))?;
    let ldd = Command::new("ldd").args(&copied).output().context("ldd")?;
    let libs: std::collections::BTreeSet<String> = String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/') && w.contains(".so"))
        .map(str::to_owned)
        .collect();
    for lib in libs {
        let to = r.join(lib.trim_start_matches('/'));
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(&lib, to)?;
    }
    std::fs::write(
        r.join("etc/os-release"),
        format!("NAME=\"ahpd test os\"\nID=ahpdtest\nPRETTY_NAME=\"{PRETTY_NAME}\"\n"),
    )?;
    let tar = Command::new("tar").arg("-C").arg(r).args(["-c", "."]).stdout(Stdio::piped()).spawn()?;
    let stdout = tar.stdout.ok_or_else(|| anyhow!("tar has no stdout"))?;
    let imported = Command::new(podman).args(["import", "-", IMAGE]).stdin(stdout).output()?;
    anyhow::ensure!(imported.status.success(), "podman import: {}", String::from_utf8_lossy(&imported.stderr));
    Ok(IMAGE)
}

/// `podman system service` on a socket of its own, stopped when dropped.
pub struct Engine {
    child: std::process::Child,
    _dir: tempfile::TempDir,
    /// `unix://<socket>`.
    pub url: String,
}

impl Engine {
    /// Starts the service and waits until it answers.
    pub async fn start(podman: &Path) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("ahpd-podman-").tempdir()?;
        let socket = dir.path().join("podman.sock");
        let url = format!("unix://{}", socket.display());
        let child = Command::new(podman)
            .args(["system", "service", "--time=0", &url])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let engine = Self { child, _dir: dir, url };
        // Ready once its socket answers a ping.
        loop {
            if let Ok(mut stream) = tokio::net::UnixStream::connect(&socket).await {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                stream.write_all(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n").await?;
                let mut answer = String::new();
                stream.read_to_string(&mut answer).await?;
                if answer.contains("OK") {
                    return Ok(engine);
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// A guard that, when dropped, removes what the daemon whose home is `home` made on any
    /// engine (its owner label): a test's daemon is killed when dropped, so nothing else would.
    pub fn leaves_nothing_of(&self, podman: &Path, home: &Path) -> Leftovers {
        let owner = home.join("data").join("ahpd");
        Leftovers { podman: podman.to_owned(), label: format!("ahpd.owner={}", owner.display()) }
    }

    /// The containers whose labels hold `label` (`key=value`), by id.
    pub fn labelled(&self, podman: &Path, label: &str) -> Vec<String> {
        let out = Command::new(podman)
            .args(["ps", "-a", "-q", "--filter", &format!("label={label}")])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        out.lines().map(str::to_owned).filter(|l| !l.is_empty()).collect()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes, when dropped, the containers a test's daemon made ([`Engine::leaves_nothing_of`]).
pub struct Leftovers {
    podman: PathBuf,
    label: String,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let listed = Command::new(&self.podman)
            .args(["ps", "-a", "-q", "--filter", &format!("label={}", self.label)])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let ids: Vec<&str> = listed.lines().filter(|l| !l.is_empty()).collect();
        if !ids.is_empty() {
            let _ = Command::new(&self.podman).args(["rm", "-f", "-t", "0"]).args(&ids).output();
        }
    }
}
