//! A private `sshd` for a test: loopback only, its own host key, one client key whose
//! `authorized_keys` line is a key-only forced command running `ahpd --stdio` in a given home (as
//! docs/remotes.md sets a remote up). It runs only where it can (root, an `sshd` installed);
//! elsewhere [`Sshd::start`] answers why not, for the test to print and skip.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use agent_runner::lock;
use anyhow::{anyhow, bail, Context};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running `sshd -D`, killed when dropped.
pub struct Sshd {
    _child: Child,
    dir: tempfile::TempDir,
    port: u16,
    /// Everything it logged (`-e`): why a login was refused.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Sshd {
    /// Starts an sshd on a free loopback port whose one key runs `ahpd --stdio` with its folders
    /// under `home` (the layout [`crate::Daemon::start_in`] uses). `Ok(Err(why))` when this machine
    /// cannot run one for a test, the reason already printed (`skipped: …`): the test returns.
    pub async fn start(home: &Path) -> anyhow::Result<Result<Self, String>> {
        Self::start_forcing(ahpd_stdio(home)).await
    }

    /// Starts an sshd whose one key runs `command` (a shell line), whatever the client asks.
    pub async fn start_forcing(command: String) -> anyhow::Result<Result<Self, String>> {
        let started = Self::try_start(command).await?;
        if let Err(why) = &started {
            crate::skip::skipping(why);
        }
        Ok(started)
    }

    async fn try_start(command: String) -> anyhow::Result<Result<Self, String>> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(Err("not root: a private sshd cannot log in as this user without its own setup".into()));
        }
        let Some(sshd) = program("sshd", &["/usr/sbin", "/usr/local/sbin", "/sbin"]) else {
            return Ok(Err("no sshd installed (scripts/deps installs openssh-server where it can)".into()));
        };
        if program("ssh", &[]).is_none() || program("ssh-keygen", &[]).is_none() {
            return Ok(Err("no ssh client (ssh, ssh-keygen) installed".into()));
        }
        // Where sshd drops its privileges to; a machine that never ran one has none.
        std::fs::create_dir_all("/run/sshd").context("creating /run/sshd")?;
        let dir = tempfile::Builder::new().prefix("ahpd-sshd-").tempdir()?;
        keygen(&dir.path().join("host_key")).await?;
        keygen(&dir.path().join("client_key")).await?;
        let public = std::fs::read_to_string(dir.path().join("client_key.pub"))?;
        let line = format!("command=\"{}\",restrict {}\n", command.replace('"', "\\\""), public.trim());
        std::fs::write(dir.path().join("authorized_keys"), line)?;
        let port = crate::daemon::free_port()?;
        std::fs::write(dir.path().join("sshd_config"), config(dir.path(), port))?;
        let mut child = Command::new(&sshd)
            .args(["-D", "-e", "-f"])
            .arg(dir.path().join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", sshd.display()))?;
        let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready) = tokio::sync::oneshot::channel();
        {
            let log = log.clone();
            tokio::spawn(async move {
                let mut ready_tx = Some(ready_tx);
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.contains("Server listening on") {
                        if let Some(tx) = ready_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    lock(&log).push(line);
                }
            });
        }
        if tokio::time::timeout(crate::PATIENCE, ready).await.is_err() || child.try_wait()?.is_some() {
            bail!("sshd did not start listening; it said:\n{}", lock(&log).join("\n"));
        }
        Ok(Ok(Self { _child: child, dir, port, log }))
    }

    /// The `ssh` command line that logs in with the test's key, up to the host: a remote's
    /// `command` appends `ahpd --stdio` (the forced command runs that whatever is asked).
    pub fn ssh_argv(&self) -> Vec<String> {
        let key = self.dir.path().join("client_key").display().to_string();
        let port = self.port.to_string();
        [
            "ssh",
            "-F",
            "none",
            "-i",
            &key,
            "-p",
            &port,
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
            "-T",
            "root@127.0.0.1",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    }

    /// `ssh://root@127.0.0.1`: where a client that reads no options (a container engine's SSH
    /// address) logs in, through [`Sshd::ssh_on_path`], which names the port and the key.
    pub fn url(&self) -> String {
        "ssh://root@127.0.0.1".to_owned()
    }

    /// A folder holding an `ssh` that logs in with the test's key and asks nothing, for the front
    /// of a `PATH`: a program that runs `ssh` itself (ahpd's engine transport) takes no options.
    pub fn ssh_on_path(&self) -> anyhow::Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let folder = self.dir.path().join("bin");
        std::fs::create_dir_all(&folder)?;
        let ssh = program("ssh", &[]).ok_or_else(|| anyhow!("no ssh"))?;
        // Its options, but `-T` and the host (the client names it).
        let argv = self.ssh_argv();
        let options: Vec<String> = argv[1..17].iter().map(|o| format!("'{o}'")).collect();
        let script = format!("#!/bin/sh\nexec '{}' {} \"$@\"\n", ssh.display(), options.join(" "));
        let file = folder.join("ssh");
        std::fs::write(&file, script)?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755))?;
        Ok(folder)
    }

    /// What it logged so far.
    pub fn said(&self) -> String {
        lock(&self.log).join("\n")
    }
}

/// The forced command of a remote ahpd: `ahpd --stdio` in `home`, and nothing else.
fn ahpd_stdio(home: &Path) -> String {
    let bin = crate::daemon::ahpd_bin();
    let env = format!(
        "XDG_CONFIG_HOME='{}' XDG_DATA_HOME='{}' HOME='{}'",
        home.join("config").display(),
        home.join("data").display(),
        home.display()
    );
    format!("{env} exec '{}' --stdio", bin.display())
}

fn config(dir: &Path, port: u16) -> String {
    let at = |name: &str| dir.join(name).display().to_string();
    [
        "ListenAddress 127.0.0.1".to_owned(),
        format!("Port {port}"),
        format!("PidFile {}", at("sshd.pid")),
        format!("HostKey {}", at("host_key")),
        format!("AuthorizedKeysFile {}", at("authorized_keys")),
        "PubkeyAuthentication yes".to_owned(),
        "PasswordAuthentication no".to_owned(),
        "KbdInteractiveAuthentication no".to_owned(),
        "PermitRootLogin prohibit-password".to_owned(),
        "StrictModes no".to_owned(),
        "UsePAM no".to_owned(),
        String::new(),
    ]
    .join("\n")
}

async fn keygen(path: &Path) -> anyhow::Result<()> {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .await
        .context("running ssh-keygen")?;
    anyhow::ensure!(status.success(), "ssh-keygen exited {status}");
    Ok(())
}

/// `name` on `PATH`, else in one of `also`, as an absolute path (sshd insists on one).
fn program(name: &str, also: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(also.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .and_then(|found| std::path::absolute(found).ok())
}
