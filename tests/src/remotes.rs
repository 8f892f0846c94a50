//! Two real daemons on this machine for issue 31's remote hosts: a "remote" one in a home of its
//! own (echo and notes), and a "local" one whose config names it as `remotes.remote`, reached in
//! either form the contract gives: a command speaking AHP on its stdio (`ahpd --stdio` run with the
//! remote's folders, bridging to the running remote daemon) or the remote's `ws://` URL with its
//! token file. The test can cut the link and hold it down, as a network that drops does; and
//! helpers wait, by folding what the official client receives, for the local root to offer the
//! remote's agents, for a remote's state, and for the local mirror of a remote channel to equal the
//! remote daemon's own snapshot.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ahp_types::state::{Snapshot, SnapshotState};
use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::client::{strip_nulls, Mirror, TestClient, PATIENCE};
use crate::daemon::{ahpd_bin, cmdline, descendants, run_ahpd, until_exited, Daemon, DaemonOptions, VerbRun};

/// The name the local daemon's config gives the remote (`echo@remote`, `notes@remote`).
pub const NAME: &str = "remote";

/// How the local daemon reaches the remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `remotes.remote.command`: `ahpd --stdio` with the remote's folders (the far end bridges to
    /// the running remote daemon), as `ssh devbox ahpd --stdio` would run it there.
    Command,
    /// `remotes.remote.url` with `tokenFile`: the remote's WebSocket, through a relay that stands
    /// in for the network between the machines.
    Url,
    /// `remotes.remote.command` as a person writes it: `ssh … root@127.0.0.1 ahpd --stdio`, through
    /// a private sshd on loopback whose key's forced command is the remote's `ahpd --stdio`
    /// (`tests::sshd`); only where this machine can run one.
    Ssh,
}

/// What an error starting a form this machine cannot run begins with.
const SKIPPED: &str = "skipped";

/// How the pair is set up.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The remote echo's pause between words (`paceMs`): long enough for a test to act mid-turn.
    pub echo_pace_ms: u64,
}

impl Default for Setup {
    fn default() -> Self {
        Self { echo_pace_ms: 20 }
    }
}

/// What the link between the daemons runs through, for cutting it and holding it down.
enum Link {
    /// The command runs `ahpd --stdio` unless this file exists, when it fails at once, saying so on
    /// stderr (a host that cannot be reached).
    Command { down_flag: PathBuf },
    /// The URL is the relay's.
    Url { relay: Relay },
    /// The command is `ssh` to a private sshd.
    Ssh { _sshd: crate::sshd::Sshd },
}

/// The two daemons and the link between them.
pub struct Pair {
    /// How the local daemon reaches the remote.
    pub form: Form,
    /// The local daemon (its config names the remote).
    pub local: Daemon,
    /// The remote daemon: echo and notes, in a home of its own.
    pub remote: Daemon,
    /// The folder the remote's notes agent keeps its notes in.
    pub notes_dir: tempfile::TempDir,
    local_home: tempfile::TempDir,
    local_options: DaemonOptions,
    remote_home: tempfile::TempDir,
    remote_options: DaemonOptions,
    link: Link,
}

/// The remote daemon's agents: echo at `pace_ms` and notes keeping notes in `notes_dir`.
fn remote_config(setup: &Setup, notes_dir: &Path) -> Value {
    json!({ "agents": {
        "echo": crate::agents::echo_paced(setup.echo_pace_ms),
        "notes": crate::agents::notes_in(notes_dir) } })
}

/// The local daemon's own agents (notes revealing its tools endpoint, and a quick echo), and the
/// remote as `remotes.remote`.
fn local_config(remote_entry: Value) -> Value {
    json!({
        "agents": {
            "notes": crate::agents::notes_revealing_endpoint(),
            "echo": crate::agents::echo_paced(0) },
        "remotes": { NAME: remote_entry },
    })
}

/// The file the daemon whose folders are under `home` keeps its connection token in (the file
/// its record names, else the one it makes in its data folder), as the client verbs find it.
pub fn token_file(home: &Path) -> PathBuf {
    let data = home.join("data").join("ahpd");
    let record: Option<Value> =
        std::fs::read(data.join("daemon.json")).ok().and_then(|b| serde_json::from_slice(&b).ok());
    record.and_then(|r| r["tokenFile"].as_str().map(PathBuf::from)).unwrap_or_else(|| data.join("connection-token"))
}

/// The command form's argv: `ahpd --stdio` with the remote's folders (as `tests::daemon` sets a
/// daemon's), behind a guard that fails at once while `down_flag` exists.
fn stdio_command(remote_home: &Path, down_flag: &Path) -> Vec<String> {
    let guard = r#"if [ -e "$1" ]; then echo "the test holds the link down" >&2; exit 1; fi; shift; exec "$@""#;
    let mut argv: Vec<String> = vec!["sh".into(), "-c".into(), guard.into(), "link".into()];
    argv.push(down_flag.display().to_string());
    argv.extend(["env".into(), "-u".into(), "AHPD_CONFIG".into()]);
    argv.push(format!("XDG_CONFIG_HOME={}", remote_home.join("config").display()));
    argv.push(format!("XDG_DATA_HOME={}", remote_home.join("data").display()));
    argv.push(format!("HOME={}", remote_home.display()));
    argv.push(ahpd_bin().display().to_string());
    argv.push("--stdio".into());
    argv
}

/// `ws://host:port/...` → `host:port`.
fn authority(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

impl Pair {
    /// Starts both daemons with the default setup, the local one reaching the remote in `form`.
    pub async fn start(form: Form) -> anyhow::Result<Self> {
        Self::start_with(form, Setup::default()).await
    }

    /// Starts both daemons in `form`, or `None` (the reason printed) where this machine cannot
    /// run that form (an sshd for [`Form::Ssh`]).
    pub async fn start_if_possible(form: Form) -> anyhow::Result<Option<Self>> {
        match Self::start_with(form, Setup::default()).await {
            Ok(pair) => Ok(Some(pair)),
            Err(e) if e.to_string().starts_with(SKIPPED) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Starts the remote daemon, then the local one whose config names it in `form`.
    pub async fn start_with(form: Form, setup: Setup) -> anyhow::Result<Self> {
        let notes_dir = tempfile::Builder::new().prefix("ahpd-remote-notes-").tempdir()?;
        let remote_home = tempfile::Builder::new().prefix("ahpd-remote-").tempdir()?;
        let remote_options = DaemonOptions::with_config(remote_config(&setup, notes_dir.path()));
        let remote = Daemon::start_in(remote_home.path(), remote_options.clone()).await?;
        let local_home = tempfile::Builder::new().prefix("ahpd-local-").tempdir()?;
        let (link, entry) = match form {
            Form::Command => {
                let down_flag = local_home.path().join("link-down");
                let entry = json!({ "command": stdio_command(&remote.home, &down_flag) });
                (Link::Command { down_flag }, entry)
            }
            Form::Ssh => {
                let sshd = match crate::sshd::Sshd::start(&remote.home).await? {
                    Ok(sshd) => sshd,
                    Err(why) => bail!("{SKIPPED}: {why}"),
                };
                let mut argv = sshd.ssh_argv();
                argv.extend(["ahpd".to_owned(), "--stdio".to_owned()]);
                (Link::Ssh { _sshd: sshd }, json!({ "command": argv }))
            }
            Form::Url => {
                let relay = Relay::start(authority(&remote.url)).await?;
                let url = format!("ws://127.0.0.1:{}/", relay.port);
                let entry = json!({ "url": url, "tokenFile": token_file(&remote.home) });
                (Link::Url { relay }, entry)
            }
        };
        let local_options = DaemonOptions::with_config(local_config(entry));
        let local = Daemon::start_in(local_home.path(), local_options.clone()).await?;
        Ok(Self { form, local, remote, notes_dir, local_home, local_options, remote_home, remote_options, link })
    }

    /// A client of the local daemon, initialized and watching the root.
    pub async fn local_client(&self, client_id: &str) -> anyhow::Result<TestClient> {
        TestClient::connect(&self.local.url, client_id).await
    }

    /// The usual start of a scenario: a local client `here` once the remote is connected, a
    /// session on `<agent>@remote` it made, and a client `there` of the remote daemon itself
    /// watching that session and its chat. Answers (here, there, session, chat).
    pub async fn opened(&self, agent: &str) -> anyhow::Result<(TestClient, TestClient, String, String)> {
        let mut here = self.local_client("here").await?;
        until_connected(&mut here).await?;
        let (session, chat) = here.create_session(&format!("{agent}@{NAME}"), None).await?;
        let mut there = self.remote_client("there").await?;
        there.subscribe(&session).await?;
        there.subscribe(&chat).await?;
        Ok((here, there, session, chat))
    }

    /// A client of the remote daemon itself.
    pub async fn remote_client(&self, client_id: &str) -> anyhow::Result<TestClient> {
        TestClient::connect(&self.remote.url, client_id).await
    }

    /// How the local daemon reaches the remote, as `ahpd status`/`ahpd agents` should name it:
    /// the URL, or the command's program.
    pub fn reached_by(&self) -> String {
        match &self.link {
            Link::Command { .. } | Link::Ssh { .. } => "--stdio".to_owned(),
            Link::Url { relay } => format!("ws://127.0.0.1:{}/", relay.port),
        }
    }

    /// The local daemon's `--stdio` children (the command form's link), by pid.
    pub fn stdio_links(&self) -> Vec<i32> {
        descendants(self.local.pid()).into_iter().filter(|pid| cmdline(*pid).contains("--stdio")).collect()
    }

    /// Cuts the link as it stands: kills the local daemon's `--stdio` child (command form; an
    /// error when there is none) and waits for it to be gone, or drops every connection through
    /// the relay (URL form).
    pub async fn cut(&self) -> anyhow::Result<()> {
        match &self.link {
            Link::Command { .. } | Link::Ssh { .. } => {
                let links = self.stdio_links();
                if links.is_empty() {
                    bail!("the local daemon runs no `--stdio` child to cut");
                }
                for pid in &links {
                    nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL)?;
                }
                for pid in links {
                    until_exited(pid).await?;
                }
            }
            Link::Url { relay } => relay.cut(),
        }
        Ok(())
    }

    /// The relay the URL form runs through (none in the other forms).
    pub fn relay(&self) -> Option<&Relay> {
        match &self.link {
            Link::Url { relay } => Some(relay),
            _ => None,
        }
    }

    /// Holds the link down: each new attempt to reach the remote fails at once until
    /// [`Pair::bring_up`] (what is open stays open: [`Pair::cut`] it).
    pub fn hold_down(&self) -> anyhow::Result<()> {
        match &self.link {
            Link::Command { down_flag } => std::fs::write(down_flag, b"down").context("writing the down flag")?,
            Link::Url { relay } => relay.set_up(false),
            Link::Ssh { .. } => bail!("the ssh form is not held down"),
        }
        Ok(())
    }

    /// Lets the next attempt to reach the remote through.
    pub fn bring_up(&self) -> anyhow::Result<()> {
        match &self.link {
            Link::Command { down_flag } => match std::fs::remove_file(down_flag) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e).context("removing the down flag"),
                _ => {}
            },
            Link::Url { relay } => relay.set_up(true),
            Link::Ssh { .. } => {}
        }
        Ok(())
    }

    /// Kills the local daemon with SIGKILL (no chance to tidy up).
    pub async fn kill9_local(&mut self) -> anyhow::Result<()> {
        self.local.kill9().await
    }

    /// Starts the local daemon again in the same home, with the same config.
    pub async fn restart_local(&mut self) -> anyhow::Result<()> {
        self.local = Daemon::start_in(self.local_home.path(), self.local_options.clone()).await?;
        Ok(())
    }

    /// Stops the remote daemon (SIGTERM, as `ahpd restart` does) and starts it again in its home
    /// on the same port, as the remote's own `ahpd restart` would: a new process, numbering its
    /// actions afresh.
    pub async fn restart_remote(&mut self) -> anyhow::Result<()> {
        let port = authority(&self.remote.url).rsplit_once(':').map(|(_, p)| p.to_owned()).unwrap_or_default();
        self.remote.terminate().await?;
        let mut options = self.remote_options.clone();
        options.args.extend(["--port".to_owned(), port]);
        self.remote = Daemon::start_in(self.remote_home.path(), options).await?;
        Ok(())
    }

    /// Runs `ahpd <args>` as the local daemon's user (its folders).
    pub async fn local_verb(&self, args: &[&str]) -> anyhow::Result<VerbRun> {
        run_ahpd(&self.local.home, args).await
    }
}

/// The remote's state as the local root config's read-only `remoteLinks` says it (`connected`,
/// `reconnecting: <reason>`, `refused: <reason>`).
pub fn remote_state(m: &Mirror) -> Option<String> {
    let values = &m.root()?.config.as_ref()?.values;
    values.get("remoteLinks")?.get(NAME)?.as_str().map(str::to_owned)
}

/// True when the local root offers `provider`.
pub fn offers(m: &Mirror, provider: &str) -> bool {
    m.root().is_some_and(|r| r.agents.iter().any(|a| a.provider == provider))
}

/// Waits until the local root offers the remote's agents and says the remote is connected.
pub async fn until_connected(local: &mut TestClient) -> anyhow::Result<()> {
    let echo = format!("echo@{NAME}");
    let waited = local
        .until("the remote's agents offered and the remote connected", move |m| {
            offers(m, &echo) && remote_state(m).as_deref() == Some("connected")
        })
        .await;
    waited.map_err(|e| anyhow!("{e}; the remote's state is {:?}", remote_state(&local.mirror)))
}

/// Waits until the remote's state starts with `prefix`; answers it.
pub async fn until_state(local: &mut TestClient, prefix: &str) -> anyhow::Result<String> {
    let p = prefix.to_owned();
    let waited = local
        .until(&format!("the remote's state to start with {prefix:?}"), move |m| {
            remote_state(m).is_some_and(|s| s.starts_with(&p))
        })
        .await;
    let state = remote_state(&local.mirror);
    waited.map_err(|e| anyhow!("{e}; it is {state:?}"))?;
    state.ok_or_else(|| anyhow!("no state"))
}

/// Waits until `listSessions` answers a row for session `uri` (asking again after each event the
/// client receives: a `root/sessionAdded` says it is there); answers the row.
pub async fn until_listed(client: &mut TestClient, uri: &str) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let rows = client.listed_sessions(None).await?;
        if let Some(row) = rows.iter().find(|r| r["resource"] == uri) {
            return Ok(row.clone());
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            bail!("waited {PATIENCE:?} for {uri} in listSessions; it lists {rows:?}");
        }
        let _ = client.next_event(left).await;
    }
}

/// A channel's state as `client`'s daemon snapshots it now (a fresh `subscribe`), nulls stripped.
pub async fn snapshot_state(client: &TestClient, uri: &str) -> anyhow::Result<Value> {
    let answer = client
        .request("subscribe", json!({ "channel": uri }))
        .await
        .map_err(|e| anyhow!("fresh subscribe {uri}: {e}"))?;
    let snapshot: Snapshot = serde_json::from_value(answer["snapshot"].clone()).context("snapshot")?;
    Ok(strip_nulls(serde_json::to_value(&snapshot.state)?))
}

/// A folded state as JSON, nulls stripped and, for a session, without its `provider` (the one
/// thing the contract lets differ between the mirror and the remote).
fn comparable(state: &SnapshotState) -> Value {
    let mut value = strip_nulls(serde_json::to_value(state).unwrap_or(Value::Null));
    if matches!(state, SnapshotState::Session(_)) {
        if let Some(keys) = value.as_object_mut() {
            keys.remove("provider");
        }
    }
    value
}

/// Waits until what `local` folded of channel `uri` equals the remote daemon's own snapshot of
/// it, taken with `remote` (the official client, connected to the remote itself); for a session,
/// equal but for `provider`, which is the remote's with `@remote` added.
pub async fn until_mirrors(local: &mut TestClient, remote: &TestClient, uri: &str) -> anyhow::Result<()> {
    let answer = remote
        .request("subscribe", json!({ "channel": uri }))
        .await
        .map_err(|e| anyhow!("the remote's snapshot of {uri}: {e}"))?;
    let theirs: Snapshot = serde_json::from_value(answer["snapshot"].clone()).context("snapshot")?;
    if let SnapshotState::Session(s) = &theirs.state {
        let want = format!("{}@{NAME}", s.provider);
        let u = uri.to_owned();
        local
            .until(&format!("{uri}'s provider to be {want}"), move |m| {
                m.session(&u).is_some_and(|ours| ours.provider == want)
            })
            .await?;
    }
    let want = comparable(&theirs.state);
    let (u, w) = (uri.to_owned(), want.clone());
    let waited = local
        .until(&format!("{uri} folded here to equal the remote's snapshot"), move |m| {
            m.states.get(&u).map(comparable).as_ref() == Some(&w)
        })
        .await;
    if let Err(e) = waited {
        let ours = local.mirror.states.get(uri).map(comparable).unwrap_or(Value::Null);
        bail!(
            "{e}:\nfolded here:        {}\nthe remote's snapshot: {}",
            serde_json::to_string(&ours)?,
            serde_json::to_string(&want)?
        );
    }
    Ok(())
}

/// The actions `client` received on `chat` for turn `turn_id`, in order, as JSON (the host's
/// sequence numbers and origins left out: they are each daemon's own). Refused ones are left out.
pub fn turn_actions(client: &TestClient, chat: &str, turn_id: &str) -> Vec<Value> {
    client
        .envelopes
        .iter()
        .filter(|e| e.channel == chat && e.rejection_reason.is_none())
        .filter_map(|e| serde_json::to_value(&e.action).ok())
        .filter(|a| a["turnId"] == turn_id)
        .collect()
}

/// A TCP relay the URL form reaches the remote through, standing in for the network between the
/// machines: it can drop every connection open through it ([`Relay::cut`]) and close new ones as
/// soon as they come ([`Relay::set_up`] false), as a link that drops does. Bytes pass unchanged.
pub struct Relay {
    /// The port it listens on (loopback).
    pub port: u16,
    up: Arc<AtomicBool>,
    cuts: watch::Sender<u64>,
    /// While true, what the local side sends is read and thrown away (a link losing it).
    stalled: Arc<AtomicBool>,
    /// Bytes thrown away so far.
    swallowed: watch::Sender<u64>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// Listens on a free loopback port and relays each connection to `target` (`host:port`).
    pub async fn start(target: String) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("binding the relay")?;
        let port = listener.local_addr()?.port();
        let up = Arc::new(AtomicBool::new(true));
        let (cuts, _) = watch::channel(0u64);
        let stalled = Arc::new(AtomicBool::new(false));
        let (swallowed, _) = watch::channel(0u64);
        let ends = Ends { up: up.clone(), cuts: cuts.clone(), stalled: stalled.clone(), swallowed: swallowed.clone() };
        let accepting = tokio::spawn(relay_each(listener, target, ends));
        Ok(Self { port, up, cuts, stalled, swallowed, accepting })
    }

    /// While `on`, what the local daemon sends through the relay is lost on the way.
    pub fn stall(&self, on: bool) {
        self.stalled.store(on, Ordering::SeqCst);
    }

    /// Waits until the relay lost something the local daemon sent.
    pub async fn until_swallowed(&self) -> anyhow::Result<()> {
        let mut swallowed = self.swallowed.subscribe();
        tokio::time::timeout(crate::PATIENCE, swallowed.wait_for(|n| *n > 0))
            .await
            .context("waiting for the relay to lose what the local daemon sent")?
            .context("the relay is gone")?;
        Ok(())
    }

    /// Drops every connection open through it.
    pub fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// While false, each new connection is closed as soon as it is accepted.
    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accepting.abort();
        self.cut();
    }
}

/// What each relayed connection shares with the relay.
#[derive(Clone)]
struct Ends {
    up: Arc<AtomicBool>,
    cuts: watch::Sender<u64>,
    stalled: Arc<AtomicBool>,
    swallowed: watch::Sender<u64>,
}

async fn relay_each(listener: TcpListener, target: String, ends: Ends) {
    while let Ok((inbound, _)) = listener.accept().await {
        if !ends.up.load(Ordering::SeqCst) {
            drop(inbound);
            continue;
        }
        let mut cut = ends.cuts.subscribe();
        let target = target.clone();
        let ends = ends.clone();
        tokio::spawn(async move {
            let Ok(outbound) = TcpStream::connect(&target).await else { return };
            let (mut from_local, mut to_local) = inbound.into_split();
            let (mut from_remote, mut to_remote) = outbound.into_split();
            let forward = async {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match tokio::io::AsyncReadExt::read(&mut from_local, &mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if ends.stalled.load(Ordering::SeqCst) {
                        ends.swallowed.send_modify(|total| *total += n as u64);
                        continue;
                    }
                    if tokio::io::AsyncWriteExt::write_all(&mut to_remote, &buf[..n]).await.is_err() {
                        break;
                    }
                }
            };
            let back = tokio::io::copy(&mut from_remote, &mut to_local);
            tokio::select! {
                _ = forward => {}
                _ = back => {}
                _ = cut.changed() => {}
            }
        });
    }
}
