//! Confined sessions: a session whose `isolation` is a box's level (`sandbox`) works in a worktree
//! of its own, and everything started for it (its backend's CLI and all that runs, its `!`
//! commands, its terminals) runs inside a box that reaches that worktree and little else.
//!
//! The host asks this feature through [`crate::host::facade::Boxes`] (registered with
//! `Host::serve_boxes`) for a session's launcher, a [`protocol::Confined`]: an argv put before
//! every program run for the session. Behind it, each level is an [`Engine`]:
//!
//! - `sandbox.rs`: bubblewrap on Linux (the machine's files read-only, secrets and the data folder
//!   hidden, the worktree writable, no network of its own);
//! - `net.rs`: the network a box reaches, run by the daemon (relayed loopback ports and a proxy
//!   that lets through only allowed hosts);
//! - `relay.rs`: `ahpd box-run`, the first process inside a box;
//! - `engine.rs`: a container engine through the Docker Engine API (Docker, Podman; local, TCP or
//!   SSH, `ssh.rs`: an `ssh` child per connection, as the docker CLI does), with labels so a daemon
//!   sweeps at start what a past run left;
//! - `container.rs`: the `container` level on that engine (a container per session), and
//!   `exec.rs`, `ahpd box-exec`, its launcher (an `exec -i` into the session's container),
//!   `sweep.rs`, which ends inside the container what a launcher left running,
//!   and `devcontainer.rs`, the image it runs (the repository's own dev container, else the
//!   config's);
//! - `computer.rs`: the computer plugin's disposable computers on that engine.
//!
//! A cluster (a pod per session) is one more [`Engine`]: it answers the same launcher (an
//! `exec -i` into its box), and `docs/architecture.md` says what would change.

pub mod computer;
pub mod container;
pub mod devcontainer;
pub mod engine;
pub mod exec;
pub mod net;
pub mod relay;
pub mod sandbox;
pub mod ssh;
pub mod sweep;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use agent_runner::sync::lock;
use ahp_types::common::JsonObject;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::host::facade::Boxes;

/// The session setting that names the level (shared with the worktrees' `isolation`).
pub const ISOLATION: &str = crate::worktrees::ISOLATION;

/// The levels that are boxes (beside `folder` and `worktree`).
pub const LEVELS: [&str; 2] = ["sandbox", "container"];

/// One way of making boxes: bubblewrap today; a container engine or a cluster next.
pub trait Engine: Send + Sync + 'static {
    /// The level it serves (`sandbox`, `container`).
    fn level(&self) -> &'static str;
    /// What it is, in a word for `ahpd status` (`bubblewrap`, `podman at unix:///…`).
    fn name(&self) -> String;
    /// What a session in it can and cannot reach, in a sentence for the window.
    fn reaches(&self) -> String;
    /// Whether it can make boxes on this machine; `Err` says why not.
    fn ready(&self) -> Result<(), String>;
    /// Makes `session`'s box around `worktree`, answering its launcher and what keeps it; `ask`
    /// asks the person whether the box may reach a host it is not allowed (an engine that filters
    /// the network asks it; one that does not has no use for it).
    fn open(&self, session: &str, worktree: &Path, ask: Option<net::AskToReach>) -> Result<Opened, String>;
}

/// A box made for a session: its launcher, what `ahpd status` says of it, and what keeps it (its
/// network, its container), let go when the box is dropped.
pub struct Opened {
    /// The launcher every process of the session goes through.
    pub confined: protocol::Confined,
    /// What `ahpd status` and the window say of it (a container's id and image once it is made).
    pub described: Arc<Mutex<Value>>,
    /// What keeps the box (dropped with it).
    pub keep: Box<dyn Send + Sync>,
}

/// The feature: the engines this deployment has, and each session's box.
pub struct Confine {
    engines: Vec<Arc<dyn Engine>>,
    boxes: Mutex<HashMap<String, Opened>>,
    tracker: TaskTracker,
    /// The host whose person a box's proxy asks about a host it is not allowed.
    host: Mutex<Option<crate::host::facade::WeakHost>>,
}

impl Confine {
    /// The feature with `engines`; what it does after a session goes runs in `tracker`.
    pub fn new(engines: Vec<Arc<dyn Engine>>, tracker: TaskTracker) -> Arc<Self> {
        Arc::new(Self { engines, boxes: Mutex::default(), tracker, host: Mutex::default() })
    }

    /// Boxes opened from now on ask `host`'s person, in the session's running turn, whether they
    /// may reach a host they are not allowed (`Host::ask_in_session`).
    pub fn asking(&self, host: crate::host::facade::WeakHost) {
        *lock(&self.host) = Some(host);
    }

    /// What asks the person watching `session` whether its box may reach a host it may not.
    fn ask_for(&self, session: &str) -> Option<net::AskToReach> {
        let host = lock(&self.host).clone()?;
        let session = session.to_owned();
        Some(Arc::new(move |target: String, port: u16| {
            let (host, session) = (host.clone(), session.clone());
            Box::pin(async move {
                let host = host.upgrade()?;
                let message = format!(
                    "This sandboxed session wants to reach {target}:{port}, which it is not allowed to. Let it, for as long as the session's box lasts?"
                );
                host.ask_in_session(&session, "reach", message).await
            })
        }))
    }

    fn boxes(&self) -> MutexGuard<'_, HashMap<String, Opened>> {
        lock(&self.boxes)
    }

    /// The levels ready on this machine, each with what a session in it reaches: what the New
    /// session form offers beside `folder` and `worktree`.
    pub fn offered(&self) -> Vec<(String, String)> {
        self.engines.iter().filter(|e| e.ready().is_ok()).map(|e| (e.level().to_owned(), e.reaches())).collect()
    }

    /// A launcher that runs nothing and says why (a box that could not be made): a session that
    /// asked for a box never runs outside one.
    fn refused(level: &str, why: &str) -> protocol::Confined {
        let ahpd = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("ahpd"));
        let sentence = format!("This session's {level} could not be made, so nothing of it runs: {why}");
        protocol::Confined {
            level: level.to_owned(),
            wrap: vec![ahpd.display().to_string(), "box-run".into(), "--refuse".into(), sentence, "--".into()],
            env: Default::default(),
            shell: None,
        }
    }
}

impl Boxes for Confine {
    fn confine(&self, session: &str, settings: &JsonObject, folder: &Path) -> Option<protocol::Confined> {
        let level = settings.get(ISOLATION).and_then(Value::as_str).filter(|l| LEVELS.contains(l))?;
        if let Some(opened) = self.boxes().get(session) {
            return Some(opened.confined.clone());
        }
        let Some(engine) = self.engines.iter().find(|e| e.level() == level) else {
            return Some(Self::refused(level, "this host has no engine for it"));
        };
        if let Err(why) = engine.ready() {
            return Some(Self::refused(level, &why));
        }
        match engine.open(session, folder, self.ask_for(session)) {
            Ok(opened) => {
                let confined = opened.confined.clone();
                tracing::info!(session, level, "opened the session's box");
                self.boxes().insert(session.to_owned(), opened);
                Some(confined)
            }
            Err(why) => {
                tracing::warn!(session, level, "{why}");
                Some(Self::refused(level, &why))
            }
        }
    }

    fn session_removed(&self, session: &str) {
        if self.boxes().remove(session).is_some() {
            tracing::info!(session, "the session's box was let go");
        }
        // The computers it made go with it.
        let session = session.to_owned();
        self.tracker.spawn(async move { crate::tools::computer::session_removed(&session).await });
    }

    fn describe(&self, session: &str) -> Option<Value> {
        let computers = crate::tools::computer::of_session(session);
        let mut described = self.boxes().get(session).map(|o| lock(&o.described).clone());
        if !computers.is_empty() {
            described.get_or_insert_with(|| json!({}))["computers"] = json!(computers);
        }
        described
    }
}

/// What the `sandbox` level is made from, from the config.
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    /// The person's home folder.
    pub home: Option<PathBuf>,
    /// The ahpd data folder (hidden).
    pub data_dir: PathBuf,
    /// The agent's own state folders (`sandboxWritable`, `~` for the home folder).
    pub writable: Vec<PathBuf>,
    /// The hosts a box may reach (`sandboxAllowHosts`, the agents' model APIs, the daemon).
    pub allowed: Vec<net::Allowed>,
}

impl SandboxSettings {
    /// From the config: `sandboxWritable`, `sandboxAllowHosts`, and every agent entry's
    /// `*_BASE_URL` variable (its model API).
    pub fn of(config: &crate::config::Config, data_dir: &Path) -> Self {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let expand = |p: &str| match (p.strip_prefix("~/"), &home) {
            (Some(rest), Some(home)) => home.join(rest),
            _ => PathBuf::from(p),
        };
        let writable = config.strings("sandboxWritable").iter().map(|p| expand(p)).collect();
        let mut allowed: Vec<net::Allowed> =
            config.strings("sandboxAllowHosts").iter().filter_map(|h| net::Allowed::parse(h)).collect();
        allowed.extend(model_apis(&config.get("agents")).iter().filter_map(|u| net::Allowed::parse(u)));
        allowed.extend(
            std::env::vars().filter(|(k, _)| k.ends_with("_BASE_URL")).filter_map(|(_, v)| net::Allowed::parse(&v)),
        );
        Self { home, data_dir: data_dir.to_owned(), writable, allowed }
    }
}

/// The model APIs the agents' entries name: their `env`'s and `options.env`'s `*_BASE_URL`.
fn model_apis(agents: &Value) -> Vec<String> {
    let Some(agents) = agents.as_object() else { return Vec::new() };
    let envs = agents.values().flat_map(|entry| [&entry["env"], &entry["options"]["env"]]);
    envs.filter_map(Value::as_object)
        .flat_map(|env| env.iter())
        .filter(|(k, _)| k.ends_with("_BASE_URL"))
        .filter_map(|(_, v)| v.as_str().map(str::to_owned))
        .collect()
}

/// The `sandbox` level: bubblewrap.
pub struct Sandbox {
    settings: SandboxSettings,
    /// `bwrap`, found on the PATH.
    bwrap: Option<PathBuf>,
    /// The daemon's own port, once it listens (its `/ahp-mcp`).
    listening: Mutex<Option<u16>>,
    tracker: TaskTracker,
    cancel: CancellationToken,
}

impl Sandbox {
    /// The engine, with `bwrap` looked up on the PATH.
    pub fn new(settings: SandboxSettings, tracker: TaskTracker, cancel: CancellationToken) -> Arc<Self> {
        Arc::new(Self { settings, bwrap: which("bwrap"), listening: Mutex::new(None), tracker, cancel })
    }

    /// The daemon listens on `port`: boxes opened from now on reach its `/ahp-mcp`.
    pub fn listening(&self, port: u16) {
        *lock(&self.listening) = Some(port);
    }

    fn allowed(&self) -> Vec<net::Allowed> {
        let mut allowed = self.settings.allowed.clone();
        if let Some(port) = *lock(&self.listening) {
            allowed.push(net::Allowed { host: "127.0.0.1".into(), port: Some(port) });
        }
        allowed
    }
}

/// The port the proxy listens on inside a box: 3128, or the next one no relayed port takes.
fn proxy_port(relayed: &[u16]) -> u16 {
    (3128..u16::MAX).find(|p| !relayed.contains(p)).unwrap_or(3128)
}

impl Engine for Sandbox {
    fn level(&self) -> &'static str {
        "sandbox"
    }

    fn name(&self) -> String {
        "bubblewrap".into()
    }

    fn reaches(&self) -> String {
        let hosts: Vec<String> = self
            .allowed()
            .iter()
            .map(|a| a.port.map(|p| format!("{}:{p}", a.host)).unwrap_or_else(|| a.host.clone()))
            .collect();
        format!(
            "A worktree of its own, and everything the agent runs confined to it by bubblewrap: it can write only the worktree (and its own state), cannot read ~/.ssh or ahpd's data, and reaches the network only at {}. It may run without asking.",
            if hosts.is_empty() { "its model API".to_owned() } else { hosts.join(", ") }
        )
    }

    fn ready(&self) -> Result<(), String> {
        match &self.bwrap {
            Some(_) => Ok(()),
            None => Err("bubblewrap (bwrap) is not installed on this machine".into()),
        }
    }

    fn open(&self, session: &str, worktree: &Path, ask: Option<net::AskToReach>) -> Result<Opened, String> {
        let bwrap = self.bwrap.clone().ok_or("bubblewrap (bwrap) is not installed on this machine")?;
        let ahpd = std::env::current_exe().map_err(|e| format!("ahpd cannot find its own program: {e}"))?;
        let allowed = self.allowed();
        let network = net::Network::open(&allowed, ask, &self.tracker, self.cancel.child_token())
            .map_err(|e| format!("the sandbox's network could not be made: {e}"))?;
        let (git_dirs, git_read_only) = sandbox::git_dirs(worktree);
        let ports: Vec<(u16, PathBuf)> =
            network.ports.iter().map(|p| (*p, net::port_socket(network.dir.path(), *p))).collect();
        let proxy = proxy_port(&network.ports);
        let layout = sandbox::Layout {
            worktree: worktree.to_owned(),
            git_dirs,
            git_read_only,
            home: self.settings.home.clone(),
            hidden: vec![self.settings.data_dir.clone()],
            writable: self.settings.writable.clone(),
            sockets: network.dir.path().to_owned(),
            ahpd,
            ports,
            proxy: (proxy, net::proxy_socket(network.dir.path())),
        };
        make_state_folders(&layout.writable);
        let proxy_url = format!("http://127.0.0.1:{proxy}");
        let mut env = std::collections::BTreeMap::new();
        for key in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"] {
            env.insert(key.to_owned(), proxy_url.clone());
        }
        for key in ["NO_PROXY", "no_proxy"] {
            env.insert(key.to_owned(), "127.0.0.1,localhost,::1".to_owned());
        }
        // The agents' CLIs skip their own permission prompts as root only when told they are boxed.
        env.insert("IS_SANDBOX".into(), "1".into());
        let reaches: Vec<String> = allowed
            .iter()
            .map(|a| a.port.map(|p| format!("{}:{p}", a.host)).unwrap_or_else(|| a.host.clone()))
            .collect();
        let described = json!({
            "level": "sandbox",
            "engine": self.name(),
            "session": session,
            "worktree": worktree.display().to_string(),
            "reaches": reaches,
        });
        let confined = protocol::Confined {
            level: "sandbox".into(),
            wrap: sandbox::bwrap_args(&bwrap, &layout),
            env,
            shell: None,
        };
        Ok(Opened { confined, described: Arc::new(Mutex::new(described)), keep: Box::new(network) })
    }
}

/// Makes the agent's state folders (`sandboxWritable`) it has not made yet, so a box can mount
/// them: only one whose parent is there (`~/.claude` in the home folder; `~/.pi/agent` once pi
/// made `~/.pi`), so a machine that never ran an agent gets no folder of it. A name with an
/// extension is a file, and is left alone.
fn make_state_folders(writable: &[PathBuf]) {
    for dir in writable {
        let parent_is_there = dir.parent().is_some_and(Path::is_dir);
        if dir.extension().is_none() && !dir.exists() && parent_is_there {
            let _ = std::fs::create_dir(dir);
        }
    }
}

/// `program` on the PATH.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A hidden verb's arguments (`box-run`, `box-exec`), read as the binary reads them.
#[cfg(test)]
fn parse_verb<P: clap::Args>(verb: &str, args: &[&str]) -> Result<P, clap::Error> {
    use clap::Parser;
    #[derive(Parser)]
    struct Verb<P: clap::Args> {
        #[command(flatten)]
        plan: P,
    }
    Verb::<P>::try_parse_from(std::iter::once(verb).chain(args.iter().copied())).map(|v| v.plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_model_apis_are_read_from_their_entries() {
        let agents = json!({
            "claude": {"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:4000", "OTHER": "x"}},
            "pi": {"options": {"env": {"OPENAI_BASE_URL": "https://api.example.com/v1"}}},
        });
        let mut apis = model_apis(&agents);
        apis.sort();
        assert_eq!(apis, ["http://127.0.0.1:4000", "https://api.example.com/v1"]);
    }

    #[test]
    fn the_proxy_takes_a_port_no_relay_takes() {
        assert_eq!(proxy_port(&[80]), 3128);
        assert_eq!(proxy_port(&[3128, 3129]), 3130);
    }
}
