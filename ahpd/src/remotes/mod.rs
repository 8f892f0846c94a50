//! Remote hosts: other ahpd daemons whose agents and sessions this one serves as its own (seed
//! 004's relay; docs/remotes.md). Each `remotes.<name>` entry is one [`link::Link`]: a connection
//! this daemon holds as an AHP client, kept up with backoff, whose agents are offered here as
//! `<agent>@<name>` and whose sessions are listed here under their own URIs. A channel of a remote
//! session a client here watches is mirrored by the host (`host/mirrors.rs`); a client's command or
//! action on one is relayed as sent, and what the remote says back (the echo, the refusal, the
//! agent's stream) reaches the client through the host's one write path.
//!
//! The feature reaches the host through its facade alone, and the host knows it only as
//! [`crate::host::facade::Remotes`].

pub mod link;
pub mod spec;
pub mod transport;

use std::sync::Arc;

use ahp_types::actions::{ActionOrigin, StateAction};
use serde_json::Value;

use crate::host::facade::{AhpError, Pending, Relayed, Remotes as RemotesFacade};
use crate::host::Host;

pub use link::{Link, LinkStatus};
pub use spec::RemoteSpec;

/// The requests a client sends that address something a remote holds: by the channel they name
/// (or, for `createTerminal`, the session its claim names), or by the provider (`x@remote`).
const BY_CHANNEL: &[&str] =
    &["createChat", "disposeChat", "disposeSession", "completions", "invokeChangesetOperation", "disposeTerminal"];
const BY_PROVIDER: &[&str] = &["createSession", "resolveSessionConfig", "sessionConfigCompletions"];

/// What names the remote a request is for, when it names one: the channel, the provider, the
/// session a terminal's claim names, or a changeset file's URI.
fn relay_key(method: &str, params: &Value) -> Option<String> {
    let text = |key: &str| params.get(key).and_then(Value::as_str).map(str::to_owned);
    if BY_CHANNEL.contains(&method) {
        return text("channel");
    }
    if BY_PROVIDER.contains(&method) {
        return text("provider");
    }
    match method {
        "createTerminal" => params.pointer("/claim/session").and_then(Value::as_str).map(str::to_owned),
        "resourceRead" => text("uri"),
        _ => None,
    }
}

/// How often mirrored channels nobody watches are looked for.
const SWEEP: std::time::Duration = std::time::Duration::from_secs(60);

/// The remotes feature: one link per configured remote host.
pub struct Remotes {
    links: Vec<Arc<Link>>,
}

impl Remotes {
    /// The feature for `specs`, not started yet.
    pub fn new(specs: Vec<RemoteSpec>) -> Arc<Self> {
        Arc::new(Self { links: specs.into_iter().map(Link::new).collect() })
    }

    /// Starts every link (each a task of the host's, stopped with the daemon).
    pub fn start(self: &Arc<Self>, host: &Host) {
        for link in &self.links {
            let link = link.clone();
            let feature = self.clone();
            let weak = host.downgrade();
            host.spawn("a remote host's link", async move { link.run(weak, feature).await });
        }
        self.publish(host);
        let feature = self.clone();
        let weak = host.downgrade();
        host.spawn("unwatched remote channels let go", async move { feature.let_go_of_unwatched(weak).await });
    }

    /// Every [`SWEEP`], lets go of the mirrored channels nobody here watched through a whole
    /// sweep: unsubscribed on their remote and forgotten here, so a long-running daemon does not
    /// mirror every channel a client once opened. One watched again is opened again.
    async fn let_go_of_unwatched(&self, weak: crate::host::facade::WeakHost) {
        let mut unwatched_before: Vec<String> = Vec::new();
        loop {
            tokio::time::sleep(SWEEP).await;
            let Some(host) = weak.upgrade() else { return };
            let unwatched = host.lock().unwatched_mirrors();
            for channel in unwatched.iter().filter(|c| unwatched_before.contains(c)) {
                if let Some(link) = self.link_for(channel) {
                    link.let_go(&host, channel);
                }
            }
            unwatched_before = unwatched;
        }
    }

    /// The links, in the config's order.
    pub fn links(&self) -> &[Arc<Link>] {
        &self.links
    }

    /// The link that holds `key` (a channel, a provider `<agent>@<name>`, a claimed session).
    fn link_for(&self, key: &str) -> Option<&Arc<Link>> {
        self.links.iter().find(|link| link.holds(key))
    }

    /// Says every remote's agents and its link's state to the host (the root's agents and its
    /// config's `remoteLinks`).
    pub fn publish(&self, host: &Host) {
        let agents = self.links.iter().flat_map(|link| link.agents()).collect();
        let states = self.links.iter().map(|link| (link.name().to_owned(), Value::String(link.status().to_string())));
        let mut core = host.lock();
        core.set_remote_agents(agents);
        core.show_remote_links(states.collect());
    }
}

impl RemotesFacade for Remotes {
    fn holds(&self, key: &str) -> bool {
        self.link_for(key).is_some()
    }

    fn relays(&self, method: &str, params: &Value) -> bool {
        relay_key(method, params).is_some_and(|key| self.holds(&key))
    }

    fn open<'a>(&'a self, host: &'a Host, channel: &'a str) -> Pending<'a, Result<(), AhpError>> {
        Box::pin(async move {
            let Some(link) = self.link_for(channel) else {
                return Err(AhpError::not_found(format!("There is no channel {channel}")));
            };
            link.open(host, channel).await
        })
    }

    fn request(&self, host: &Host, method: &str, params: Value) -> Relayed {
        let key = relay_key(method, &params).unwrap_or_default();
        let link = self.link_for(&key).cloned();
        let method = method.to_owned();
        let weak = host.downgrade();
        Box::pin(async move {
            let link = link.ok_or_else(|| AhpError::not_found(format!("No remote host holds {key}")))?;
            link.request(weak, &method, params).await
        })
    }

    fn action(&self, host: &Host, conn: u64, channel: &str, action: StateAction, origin: ActionOrigin) {
        match self.link_for(channel) {
            Some(link) => link.relay_action(host, conn, channel, action, origin),
            None => {
                let why = format!("No remote host holds {channel}");
                host.lock().refuse_relayed(conn, channel, &action, origin, &why);
            }
        }
    }

    fn dispatch<'a>(
        &'a self,
        _host: &'a Host,
        channel: &'a str,
        action: StateAction,
    ) -> Pending<'a, Result<(), String>> {
        Box::pin(async move {
            let link = self.link_for(channel).ok_or_else(|| format!("No remote host holds {channel}"))?;
            let answered = link.relay_answered(channel, action)?;
            answered.await.unwrap_or_else(|_| Err(format!("{} forgot the action before it answered", link.name())))
        })
    }

    fn sessions(&self) -> Vec<Value> {
        self.links.iter().flat_map(|link| link.sessions()).collect()
    }

    fn describe(&self) -> Vec<Value> {
        self.links.iter().map(|link| link.describe()).collect()
    }
}
