//! A world for host-rule scenarios: the bare host (`ahpd::bare`) with its agents served in
//! process, named clients that speak to it only through frames (`Host::handle_frame`), and a
//! manual clock. Every client folds what it was sent through the official reducers
//! (`ahp::reducers`); [`World::until_idle`] waits until nothing more will happen and then holds
//! each client's folds against a fresh snapshot the host answers, so every step of a scenario is
//! checked for folding without the test asking.
//!
//! How "nothing more will happen" is known: the tests run on tokio's paused clock
//! (`#[tokio::test(start_paused = true)]`), which moves only when every task of the runtime is
//! parked (and never while a blocking task runs). A timer of one tick firing is therefore proof
//! that the host, its in-process agents and its store had nothing left to do: no wall-clock wait,
//! no guess. The one piece of work the runtime cannot see is a child process (the worktrees'
//! git, after each turn): while the bare host says its features are busy, the world waits for
//! them before it counts a quiet tick. The host's own timers are on its manual clock
//! ([`World::advance`]), which moves only when a scenario says so.
//!
//! Reused by `ahpd/tests/rules/` (the host's rules, one test each); another test file takes it
//! with `#[path = "world/mod.rs"] mod world;`.

#![allow(dead_code)]

pub mod snapshot;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ahp::reducers::{
    apply_action_to_annotations, apply_action_to_changeset, apply_action_to_chat, apply_action_to_root,
    apply_action_to_session, ReduceOutcome,
};
use ahp_types::actions::ActionEnvelope;
use ahp_types::state::{
    ActiveTurn, ChatState, ResponsePart, RootState, SessionState, Snapshot, SnapshotState, ToolCallState, Turn,
};
use ahpd::bare::{BareAgent, BareConn, BareHost};
use ahpd::host::HostConfig;
use ahpd::users::Principal;
use serde_json::{json, Value};

/// The root channel.
pub const ROOT: &str = "ahp-root://";

/// How many frames one connection may have queued before the host counts it as not reading: more
/// than any scenario sends between two looks.
const OUTBOX: usize = 1 << 20;

/// Rounds of settling before a scenario is called hung (a guard against a host that keeps itself
/// busy for ever, not a measure of time).
const BUSY_ROUNDS: usize = 100_000;

/// A client of the world, by the name it gave as its `clientId`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    index: usize,
    /// Its `clientId`.
    pub id: String,
}

/// A session and its default chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// `ahp-session:/…`
    pub uri: String,
    /// `ahp-chat:/…`, its default chat.
    pub chat: String,
}

/// A JSON-RPC error the host answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The error's code.
    pub code: i64,
    /// The error's message.
    pub message: String,
    /// The error's data.
    pub data: Option<Value>,
}

/// What the host said of a client's action.
#[derive(Debug, Clone, PartialEq)]
pub enum Echo {
    /// Said to every client of the channel as the client sent it.
    Accepted,
    /// Refused, with the host's reason.
    Refused(String),
}

impl Echo {
    /// The refusal's reason; panics on an accepted action.
    pub fn reason(&self) -> &str {
        match self {
            Echo::Refused(reason) => reason,
            Echo::Accepted => panic!("the action was accepted, not refused"),
        }
    }
}

/// Channel states as one client folded them.
#[derive(Default)]
struct Mirror {
    states: BTreeMap<String, SnapshotState>,
    from_seq: HashMap<String, u64>,
    /// Envelopes the reducer called invalid: a fold that failed.
    invalid: Vec<String>,
}

impl Mirror {
    fn seed(&mut self, snapshot: Snapshot) {
        self.from_seq.insert(snapshot.resource.clone(), u64::try_from(snapshot.from_seq).unwrap_or(0));
        self.states.insert(snapshot.resource, snapshot.state);
    }

    fn fold(&mut self, envelope: &ActionEnvelope) {
        if envelope.rejection_reason.is_some() {
            return;
        }
        let Some(from) = self.from_seq.get(&envelope.channel) else { return };
        if envelope.server_seq <= *from {
            return;
        }
        let Some(state) = self.states.get_mut(&envelope.channel) else { return };
        let outcome = match state {
            SnapshotState::Root(r) => apply_action_to_root(r, &envelope.action),
            SnapshotState::Session(s) => apply_action_to_session(s, &envelope.action),
            SnapshotState::Chat(c) => apply_action_to_chat(c, &envelope.action),
            SnapshotState::Annotations(a) => apply_action_to_annotations(a, &envelope.action),
            SnapshotState::Changeset(c) => apply_action_to_changeset(c, &envelope.action),
            _ => ReduceOutcome::OutOfScope,
        };
        if let ReduceOutcome::Invalid(e) = outcome {
            self.invalid.push(format!("{}: {e}", serde_json::to_string(envelope).unwrap_or_default()));
        }
    }

    fn forget(&mut self, channel: &str) {
        self.states.remove(channel);
        self.from_seq.remove(channel);
    }
}

/// What an answer that arrives is for.
enum Purpose {
    /// Kept for the request that waits for it.
    Plain,
    /// A subscription: its snapshot seeds the mirror.
    Subscribe,
    /// A fresh snapshot to hold the mirror against.
    Check(String),
}

/// One connection, as a client sees it.
struct Conn {
    id: String,
    bare: BareConn,
    open: bool,
    next_id: u64,
    next_seq: i64,
    /// Every frame received, in order.
    frames: Vec<Value>,
    answers: HashMap<u64, Value>,
    purposes: HashMap<u64, Purpose>,
    mirror: Mirror,
    /// The chat `send`, `queue`, `steer` and `stop` act on: the last one created or opened.
    current: Option<String>,
    /// Folds that differed from the host's snapshot.
    differences: Vec<String>,
}

/// How a world is made.
pub struct Builder {
    agents: Vec<BareAgent>,
    config: HostConfig,
    users: Option<Vec<(String, String)>>,
    roles: Vec<(String, Vec<String>)>,
}

impl Builder {
    /// Adds the built-in agent `kind` as the provider of the same name (echo unpaced).
    pub fn agent(mut self, kind: &str) -> Self {
        self.agents.push(BareAgent::new(kind));
        self
    }

    /// Adds a provider `provider` served by the built-in `kind` with `options`.
    pub fn agent_named(mut self, provider: &str, kind: &str, options: Value) -> Self {
        self.agents.push(BareAgent::named(provider, kind, options));
        self
    }

    /// Adds `slow`: echo pausing an hour of tokio's clock before each word, so a turn on it runs
    /// until it is stopped (the paused clock never gets that far).
    pub fn slow(self) -> Self {
        self.agent_named("slow", "echo", json!({ "paceMs": 3_600_000 }))
    }

    /// Changes the host's configuration.
    pub fn config(mut self, change: impl FnOnce(&mut HostConfig)) -> Self {
        change(&mut self.config);
        self
    }

    /// A users directory of `(id, role)` pairs.
    pub fn users(mut self, people: &[(&str, &str)]) -> Self {
        self.users = Some(people.iter().map(|(id, role)| ((*id).to_owned(), (*role).to_owned())).collect());
        self
    }

    /// A role of the deployment's own, named `name`, holding `grants`, for the users directory.
    pub fn role(mut self, name: &str, grants: &[&str]) -> Self {
        self.roles.push((name.to_owned(), grants.iter().map(|g| (*g).to_owned()).collect()));
        self
    }

    /// Starts the world.
    pub async fn start(self) -> World {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let mut config = self.config;
        config.clock = ahpd::clock::Clock::manual();
        if config.default_directory.is_none() {
            let work = dir.path().join("work");
            std::fs::create_dir_all(&work).expect("the work folder");
            config.default_directory = Some(work);
        }
        if let Some(people) = &self.users {
            config.users = Some(write_users(dir.path(), people, &self.roles));
        }
        let mut world = World {
            dir,
            agents: self.agents,
            config,
            roles: self.roles,
            host: None,
            conns: Vec::new(),
            next_turn: 0,
            next_session: 0,
        };
        world.boot().await;
        world
    }
}

fn write_users(dir: &Path, people: &[(String, String)], roles: &[(String, Vec<String>)]) -> ahpd::users::Users {
    let users: Vec<Value> = people.iter().map(|(id, role)| json!({ "id": id, "roles": [role] })).collect();
    let roles: serde_json::Map<String, Value> =
        roles.iter().map(|(name, grants)| (name.clone(), json!(grants))).collect();
    let path = dir.join("users.json");
    std::fs::write(&path, json!({ "roles": roles, "users": users }).to_string()).expect("the users file");
    ahpd::users::Users::load(&path).expect("a users directory")
}

/// The bare host, its clients and its clock.
pub struct World {
    dir: tempfile::TempDir,
    agents: Vec<BareAgent>,
    config: HostConfig,
    roles: Vec<(String, Vec<String>)>,
    host: Option<BareHost>,
    conns: Vec<Conn>,
    next_turn: u64,
    next_session: u64,
}

impl World {
    /// A world to configure.
    pub fn builder() -> Builder {
        Builder { agents: Vec::new(), config: HostConfig::default(), users: None, roles: Vec::new() }
    }

    /// A world whose one agent is echo.
    pub async fn echo() -> World {
        Self::builder().agent("echo").start().await
    }

    /// A world with echo, notes and slow.
    pub async fn all() -> World {
        Self::builder().agent("echo").agent("notes").slow().start().await
    }

    async fn boot(&mut self) {
        let host = BareHost::start_agents(self.dir.path(), &self.agents, self.config.clone())
            .await
            .expect("a bare host starts");
        self.host = Some(host);
    }

    /// The host, for what a scenario cannot reach through frames (its configuration). A rule is
    /// asserted on what clients were sent, never on the host's insides.
    pub fn host(&self) -> &ahpd::host::Host {
        &self.bare().host
    }

    fn bare(&self) -> &BareHost {
        self.host.as_ref().expect("the host is running")
    }

    /// The folder the host keeps its store and its agents' data in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The folder sessions work in unless told otherwise.
    pub fn work_dir(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// Rewrites the users directory with `(id, role)` pairs; the host reads it again at the next
    /// door it checks.
    pub fn set_users(&mut self, people: &[(&str, &str)]) {
        let people: Vec<(String, String)> =
            people.iter().map(|(id, role)| ((*id).to_owned(), (*role).to_owned())).collect();
        write_users(self.dir.path(), &people, &self.roles);
    }

    /// Stops the host and starts another on the same store; every client is disconnected.
    pub async fn restart(&mut self) {
        self.stop_host().await;
        self.start_host().await;
    }

    /// Stops the host; every client is disconnected. [`World::start_host`] starts another on the
    /// same store and the same clock.
    pub async fn stop_host(&mut self) {
        self.settle().await;
        for index in 0..self.conns.len() {
            self.conns[index].open = false;
        }
        if let Some(host) = self.host.take() {
            host.stop().await;
        }
    }

    /// Starts a host on the world's store after [`World::stop_host`].
    pub async fn start_host(&mut self) {
        assert!(self.host.is_none(), "a host is running already");
        self.boot().await;
    }

    /// Moves the manual clock while no host runs (what fell due while the daemon was down).
    pub fn advance_stopped(&self, by: Duration) {
        assert!(self.host.is_none(), "a running host's clock moves with World::advance");
        self.config.clock.advance(by);
    }

    // ---- connections ----

    /// Connects and initializes `name` as root (the deployment's own token), watching the root.
    pub async fn connect(&mut self, name: &str) -> Client {
        self.connect_as_principal(name, Principal::Root).await.expect("initialize is answered")
    }

    /// Connects and initializes `name` as the person `person` of the users directory.
    pub async fn connect_as(&mut self, name: &str, person: &str) -> Client {
        self.connect_as_principal(name, Principal::Person(person.to_owned())).await.expect("initialize is answered")
    }

    /// Connects `name` as nobody signed in; answers the handshake's refusal if there is one.
    pub async fn connect_nobody(&mut self, name: &str) -> Result<Client, Refusal> {
        self.connect_as_principal(name, Principal::Nobody).await
    }

    /// Opens a connection and initializes it as `name` for `principal`.
    pub async fn connect_as_principal(&mut self, name: &str, principal: Principal) -> Result<Client, Refusal> {
        let client = self.open(name, principal);
        let params = json!({
            "channel": ROOT,
            "protocolVersions": ["1.0.0"],
            "clientId": name,
            "initialSubscriptions": [ROOT],
        });
        self.request(&client, "initialize", params).await?;
        Ok(client)
    }

    /// Opens a connection without its handshake.
    pub fn open(&mut self, name: &str, principal: Principal) -> Client {
        let bare = self.bare().connect_as(OUTBOX, principal);
        self.conns.push(Conn {
            id: name.to_owned(),
            bare,
            open: true,
            next_id: 1,
            next_seq: 1,
            frames: Vec::new(),
            answers: HashMap::new(),
            purposes: HashMap::new(),
            mirror: Mirror::default(),
            current: None,
            differences: Vec::new(),
        });
        Client { index: self.conns.len() - 1, id: name.to_owned() }
    }

    /// Closes a client's connection.
    pub fn disconnect(&mut self, who: &Client) {
        let conn = &mut self.conns[who.index];
        if conn.open {
            conn.open = false;
            let id = conn.bare.state.id;
            self.bare().host.disconnect(id);
        }
    }

    /// True while the host has not closed the client's connection (nor the client).
    pub fn is_open(&self, who: &Client) -> bool {
        let conn = &self.conns[who.index];
        conn.open && !conn.bare.kicked.is_cancelled() && !conn.bare.outbox.is_closed()
    }

    // ---- frames ----

    /// Hands the host one frame of text from `who`, as its socket would.
    pub fn send_frame(&mut self, who: &Client, text: &str) {
        let host = self.host.as_ref().expect("the host is running");
        let conn = &mut self.conns[who.index];
        assert!(conn.open && !conn.bare.kicked.is_cancelled(), "{} is not connected", conn.id);
        host.host.handle_frame(&mut conn.bare.state, text);
    }

    /// Sends a request and answers its result, or the error the host answered.
    pub async fn request(&mut self, who: &Client, method: &str, params: Value) -> Result<Value, Refusal> {
        let id = self.send_request(who, method, params, Purpose::Plain);
        let answer = self.await_answer(who, id, method).await;
        match answer.get("error") {
            Some(error) => Err(Refusal {
                code: error["code"].as_i64().unwrap_or(0),
                message: error["message"].as_str().unwrap_or_default().to_owned(),
                data: error.get("data").cloned(),
            }),
            None => Ok(answer.get("result").cloned().unwrap_or(Value::Null)),
        }
    }

    /// Sends a request that must succeed; answers its result.
    pub async fn ok(&mut self, who: &Client, method: &str, params: Value) -> Value {
        match self.request(who, method, params.clone()).await {
            Ok(result) => result,
            Err(e) => panic!("{method} {params} was refused: {e:?}"),
        }
    }

    /// Sends a request that must be refused; answers the refusal.
    pub async fn refused(&mut self, who: &Client, method: &str, params: Value) -> Refusal {
        match self.request(who, method, params.clone()).await {
            Ok(result) => panic!("{method} {params} was answered, not refused: {result}"),
            Err(e) => e,
        }
    }

    fn send_request(&mut self, who: &Client, method: &str, params: Value, purpose: Purpose) -> u64 {
        let conn = &mut self.conns[who.index];
        let id = conn.next_id;
        conn.next_id += 1;
        conn.purposes.insert(id, purpose);
        let frame = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string();
        self.send_frame(who, &frame);
        id
    }

    async fn await_answer(&mut self, who: &Client, id: u64, what: &str) -> Value {
        for _ in 0..BUSY_ROUNDS {
            self.pump();
            if let Some(answer) = self.conns[who.index].answers.remove(&id) {
                return answer;
            }
            if !self.conns[who.index].open {
                panic!("{} was disconnected before {what} was answered", who.id);
            }
            if self.quiet_round().await {
                self.pump();
                if let Some(answer) = self.conns[who.index].answers.remove(&id) {
                    return answer;
                }
                panic!("the host went idle without answering {}'s {what}", who.id);
            }
        }
        panic!("the host stayed busy and never answered {}'s {what}", who.id);
    }

    /// Sends `text` as one frame and answers the host's reply to the request id `id` it carries
    /// (for a frame the host must refuse before it reads it: too large, too deep).
    pub async fn raw_request(&mut self, who: &Client, id: u64, text: &str) -> Value {
        self.send_frame(who, text);
        self.await_answer(who, id, "a raw request").await
    }

    /// Sends a notification.
    pub fn notify(&mut self, who: &Client, method: &str, params: Value) {
        let frame = json!({ "jsonrpc": "2.0", "method": method, "params": params }).to_string();
        self.send_frame(who, &frame);
    }

    /// Takes every frame the host queued for every connection, folding the envelopes.
    fn pump(&mut self) -> bool {
        let mut got = false;
        for conn in &mut self.conns {
            loop {
                match conn.bare.outbox.try_recv() {
                    Ok(frame) => {
                        got = true;
                        let value: Value = serde_json::from_str(frame.as_str()).unwrap_or_else(|e| {
                            panic!("the host sent {} something not JSON ({e}): {}", conn.id, frame.as_str())
                        });
                        assert_eq!(
                            value["jsonrpc"], "2.0",
                            "the host sent {} something not JSON-RPC 2.0: {value}",
                            conn.id
                        );
                        take(conn, value);
                    }
                    Err(tokio::sync::mpsc::error::TryRecvError::Empty) => {
                        // What was queued went out; then the socket closes, as the listener's would.
                        if conn.bare.kicked.is_cancelled() || conn.bare.state.close_after_flush {
                            conn.open = false;
                        }
                        break;
                    }
                    Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => {
                        conn.open = false;
                        break;
                    }
                }
            }
        }
        got
    }

    /// One tick of tokio's paused clock: answers true when nothing was queued for any client
    /// before it and nothing after it (the runtime was idle in between).
    async fn quiet_round(&mut self) -> bool {
        if let Some(host) = self.host.as_ref().filter(|h| h.busy()) {
            // Git runs as a child process: the paused clock would move on without it.
            host.until_features_idle().await;
            self.pump();
            return false;
        }
        let before = self.pump();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let after = self.pump();
        !before && !after
    }

    /// Waits until the host, its agents and its store have nothing left to do, taking what each
    /// client was sent; checks nothing.
    pub async fn settle(&mut self) {
        for _ in 0..BUSY_ROUNDS {
            if self.quiet_round().await && self.quiet_round().await {
                return;
            }
        }
        panic!("the host never went idle");
    }

    /// Waits until nothing more will happen, then holds what every client folded against the
    /// host's own snapshot of each channel it watches.
    pub async fn until_idle(&mut self) {
        self.settle().await;
        self.assert_folds().await;
    }

    /// Holds what every client folded against a fresh snapshot of each channel it watches, asked
    /// on its own connection (a second `subscribe` answers the channel as the host holds it).
    pub async fn assert_folds(&mut self) {
        for index in 0..self.conns.len() {
            if !self.conns[index].open {
                continue;
            }
            let invalid = std::mem::take(&mut self.conns[index].mirror.invalid);
            assert!(
                invalid.is_empty(),
                "{}'s reducer refused what it was sent:\n{}",
                self.conns[index].id,
                invalid.join("\n")
            );
            let channels: Vec<String> = self.conns[index].mirror.states.keys().cloned().collect();
            let who = Client { index, id: self.conns[index].id.clone() };
            for channel in channels {
                let id = self.send_request(
                    &who,
                    "subscribe",
                    json!({ "channel": channel }),
                    Purpose::Check(channel.clone()),
                );
                let answer = self.await_answer(&who, id, "a fresh snapshot").await;
                if let Some(error) = answer.get("error") {
                    panic!("{} watches {channel}, and the host refused it a fresh snapshot: {error}", who.id);
                }
            }
            let differences = std::mem::take(&mut self.conns[index].differences);
            assert!(
                differences.is_empty(),
                "{}'s folds differ from the host's snapshots:\n{}",
                who.id,
                differences.join("\n")
            );
        }
    }

    /// Moves the host's manual clock forward (through `ahpd/test/advanceClock` on a root
    /// connection of the world's own), then waits until idle.
    pub async fn advance(&mut self, by: Duration) {
        let clock = self.clock_conn().await;
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.ok(&clock, "ahpd/test/advanceClock", json!({ "channel": ROOT, "ms": ms })).await;
        self.until_idle().await;
    }

    async fn clock_conn(&mut self) -> Client {
        if let Some(index) = self.conns.iter().position(|c| c.id == "the-clock" && c.open) {
            return Client { index, id: "the-clock".into() };
        }
        let client = self.open("the-clock", Principal::Root);
        let params = json!({ "channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": "the-clock" });
        self.request(&client, "initialize", params).await.expect("the clock connects");
        client
    }

    // ---- subscriptions and sessions ----

    /// Subscribes `who` to `channel`, folding from the snapshot answered.
    pub async fn subscribe(&mut self, who: &Client, channel: &str) -> Result<(), Refusal> {
        let id = self.send_request(who, "subscribe", json!({ "channel": channel }), Purpose::Subscribe);
        let answer = self.await_answer(who, id, "subscribe").await;
        match answer.get("error") {
            Some(error) => Err(Refusal {
                code: error["code"].as_i64().unwrap_or(0),
                message: error["message"].as_str().unwrap_or_default().to_owned(),
                data: error.get("data").cloned(),
            }),
            None => {
                if channel.starts_with("ahp-chat:") {
                    self.conns[who.index].current = Some(channel.to_owned());
                }
                Ok(())
            }
        }
    }

    /// Unsubscribes `who` from `channel`; it stops folding it.
    pub fn unsubscribe(&mut self, who: &Client, channel: &str) {
        self.notify(who, "unsubscribe", json!({ "channel": channel }));
        self.conns[who.index].mirror.forget(channel);
    }

    /// Opens a session and its chat for `who`: subscribes to both, and makes the chat the one
    /// `send` acts on.
    pub async fn open_session(&mut self, who: &Client, session: &Session) {
        self.subscribe(who, &session.uri).await.expect("the session may be watched");
        self.subscribe(who, &session.chat).await.expect("the chat may be watched");
    }

    /// Watches a session something else made (a tool, a wakeup) and its default chat, making the
    /// chat the one `who` acts on.
    pub async fn watch_session(&mut self, who: &Client, uri: &str) -> Session {
        self.subscribe(who, uri).await.expect("the session may be watched");
        self.until_idle().await;
        let chat = self.session(who, uri).default_chat.clone().unwrap_or_else(|| panic!("{uri} has no default chat"));
        self.subscribe(who, &chat).await.expect("the chat may be watched");
        Session { uri: uri.to_owned(), chat }
    }

    /// A fresh session id (`s1`, `s2`, …).
    pub fn next_session(&mut self) -> Session {
        self.next_session += 1;
        let id = format!("s{}", self.next_session);
        Session { uri: format!("ahp-session:/{id}"), chat: format!("ahp-chat:/{id}") }
    }

    /// `who` creates a session on `provider` and opens it.
    pub async fn create_session(&mut self, who: &Client, provider: &str) -> Session {
        self.create_session_with(who, provider, json!({})).await.expect("createSession is answered")
    }

    /// `who` creates a session on `provider` with more params (`config`, …); opens it once made.
    pub async fn create_session_with(&mut self, who: &Client, provider: &str, more: Value) -> Result<Session, Refusal> {
        let session = self.next_session();
        let mut params = json!({ "channel": session.uri, "provider": provider });
        if let (Some(params), Value::Object(more)) = (params.as_object_mut(), more) {
            params.extend(more);
        }
        self.request(who, "createSession", params).await?;
        self.open_session(who, &session).await;
        Ok(session)
    }

    // ---- actions ----

    /// Dispatches an action from `who` on `channel`; answers its `clientSeq`.
    pub fn dispatch(&mut self, who: &Client, channel: &str, action: Value) -> i64 {
        let conn = &mut self.conns[who.index];
        let seq = conn.next_seq;
        conn.next_seq += 1;
        self.notify(who, "dispatchAction", json!({ "channel": channel, "clientSeq": seq, "action": action }));
        seq
    }

    /// What the host said of `who`'s action `seq`: accepted or refused with its reason. Settles
    /// first; panics when the host said nothing of it.
    pub async fn echo_of(&mut self, who: &Client, seq: i64) -> Echo {
        self.settle().await;
        let found = self.conns[who.index].frames.iter().find(|f| {
            f["method"] == "action"
                && f["params"]["origin"]["clientId"] == who.id.as_str()
                && f["params"]["origin"]["clientSeq"] == seq
        });
        match found {
            Some(f) => match f["params"]["rejectionReason"].as_str() {
                Some(reason) => Echo::Refused(reason.to_owned()),
                None => Echo::Accepted,
            },
            None => panic!("the host said nothing of {}'s action {seq}", who.id),
        }
    }

    /// The reason the host refused `who`'s action `seq`; panics when it was accepted.
    pub async fn refusal(&mut self, who: &Client, seq: i64) -> String {
        self.echo_of(who, seq).await.reason().to_owned()
    }

    /// The chat `who` acts on.
    pub fn current(&self, who: &Client) -> String {
        self.conns[who.index].current.clone().unwrap_or_else(|| panic!("{} has opened no chat", who.id))
    }

    /// Makes `chat` the one `who` acts on (it must watch it).
    pub fn focus(&mut self, who: &Client, chat: &str) {
        self.conns[who.index].current = Some(chat.to_owned());
    }

    /// A fresh turn id (`t1`, `t2`, …).
    pub fn next_turn(&mut self) -> String {
        self.next_turn += 1;
        format!("t{}", self.next_turn)
    }

    /// `who` sends `text` as a new turn in its chat; answers the turn's id.
    pub fn send(&mut self, who: &Client, text: &str) -> String {
        let chat = self.current(who);
        self.send_to(who, &chat, text)
    }

    /// `who` sends `text` as a new turn in `chat`; answers the turn's id.
    pub fn send_to(&mut self, who: &Client, chat: &str, text: &str) -> String {
        let turn = self.next_turn();
        self.dispatch(who, chat, turn_started(&turn, text));
        turn
    }

    /// `who` sends `text` in its chat and waits until idle; answers the turn's id.
    pub async fn turn(&mut self, who: &Client, text: &str) -> String {
        let turn = self.send(who, text);
        self.until_idle().await;
        turn
    }

    /// `who` leaves `text` as a pending message of `kind` (`queued`, `steering`) in its chat;
    /// answers the message's id and the action's `clientSeq`.
    pub fn pending(&mut self, who: &Client, kind: &str, text: &str) -> (String, i64) {
        let chat = self.current(who);
        let id = format!("{kind}-{}", self.next_turn());
        let action = json!({
            "type": "chat/pendingMessageSet",
            "kind": kind,
            "id": id,
            "message": { "text": text, "origin": { "kind": "user" } },
        });
        let seq = self.dispatch(who, &chat, action);
        (id, seq)
    }

    /// `who` queues `text` behind its chat's running turn; answers the message's id.
    pub fn queue(&mut self, who: &Client, text: &str) -> String {
        self.pending(who, "queued", text).0
    }

    /// `who` steers its chat's running turn with `text`; answers the message's id.
    pub fn steer(&mut self, who: &Client, text: &str) -> String {
        self.pending(who, "steering", text).0
    }

    /// `who` stops the turn its chat runs, as it folded it; answers the action's `clientSeq`.
    pub fn stop(&mut self, who: &Client) -> i64 {
        let chat = self.current(who);
        let turn = self.chat_of(who, &chat).active_turn.as_ref().map(|t| t.id.clone()).expect("a turn runs");
        self.stop_turn(who, &turn)
    }

    /// `who` stops the turn `turn` of its chat; answers the action's `clientSeq`.
    pub fn stop_turn(&mut self, who: &Client, turn: &str) -> i64 {
        let chat = self.current(who);
        self.dispatch(who, &chat, json!({ "type": "chat/turnCancelled", "turnId": turn, "duration": 0 }))
    }

    /// `who` allows or denies the tool call `call` of its chat's running turn.
    pub fn confirm(&mut self, who: &Client, call: &str, approved: bool) -> i64 {
        let chat = self.current(who);
        let turn = self.chat_of(who, &chat).active_turn.as_ref().map(|t| t.id.clone()).unwrap_or_default();
        let action = json!({
            "type": "chat/toolCallConfirmed",
            "turnId": turn,
            "toolCallId": call,
            "approved": approved,
            "confirmed": if approved { Some("user-action") } else { None },
            "selectedOptionId": if approved { "allow" } else { "deny" },
        });
        self.dispatch(who, &chat, action)
    }

    /// `who` allows every call its chat's running turn waits on, again as long as the turn asks
    /// (a destructive host tool waits for a person in every mode, `ask: never` among them).
    pub async fn allow_waiting(&mut self, who: &Client) {
        loop {
            let chat = self.current(who);
            let waiting = waiting_calls(self.chat_of(who, &chat));
            if waiting.is_empty() {
                return;
            }
            for call in waiting {
                self.confirm(who, &call, true);
            }
            self.until_idle().await;
        }
    }

    /// `who` becomes an active client of `session`, announcing tools named `tools` (each taking an
    /// object); answers the action's `clientSeq`.
    pub fn activate(&mut self, who: &Client, session: &str, tools: &[&str]) -> i64 {
        let tools: Vec<Value> = tools
            .iter()
            .map(|name| json!({ "name": name, "description": format!("{name}, run by {}", who.id), "inputSchema": { "type": "object" } }))
            .collect();
        let action = json!({
            "type": "session/activeClientSet",
            "activeClient": { "clientId": who.id, "displayName": format!("{}'s editor", who.id), "tools": tools },
        });
        self.dispatch(who, session, action)
    }

    /// `who` completes the client tool call `call` of `turn` in its chat with `text`.
    pub fn complete_call(&mut self, who: &Client, turn: &str, call: &str, text: &str) -> i64 {
        let chat = self.current(who);
        let action = json!({
            "type": "chat/toolCallComplete",
            "turnId": turn,
            "toolCallId": call,
            "result": {
                "success": true,
                "pastTenseMessage": "Done it",
                "content": [{ "type": "text", "text": text }],
            },
        });
        self.dispatch(who, &chat, action)
    }

    /// `who` answers the question `request` of its chat's running turn with `text`, or declines
    /// it (`None`).
    pub fn answer(&mut self, who: &Client, request: &str, text: Option<&str>) -> i64 {
        let chat = self.current(who);
        let action = match text {
            Some(text) => json!({
                "type": "chat/inputCompleted",
                "requestId": request,
                "response": "accept",
                "answers": { "answer": { "state": "submitted", "value": { "kind": "text", "value": text } } },
            }),
            None => json!({ "type": "chat/inputCompleted", "requestId": request, "response": "decline" }),
        };
        self.dispatch(who, &chat, action)
    }

    // ---- what a client folded ----

    /// The state `who` folded for `channel`.
    pub fn state(&self, who: &Client, channel: &str) -> &SnapshotState {
        self.conns[who.index]
            .mirror
            .states
            .get(channel)
            .unwrap_or_else(|| panic!("{} does not watch {channel}", who.id))
    }

    /// True when `who` folds `channel`.
    pub fn watches(&self, who: &Client, channel: &str) -> bool {
        self.conns[who.index].mirror.states.contains_key(channel)
    }

    /// The chat `who` folded.
    pub fn chat_of(&self, who: &Client, chat: &str) -> &ChatState {
        match self.state(who, chat) {
            SnapshotState::Chat(c) => c,
            other => panic!("{chat} is not a chat: {other:?}"),
        }
    }

    /// `who`'s current chat, as it folded it.
    pub fn chat(&self, who: &Client) -> &ChatState {
        self.chat_of(who, &self.current(who))
    }

    /// The session `who` folded.
    pub fn session(&self, who: &Client, session: &str) -> &SessionState {
        match self.state(who, session) {
            SnapshotState::Session(s) => s,
            other => panic!("{session} is not a session: {other:?}"),
        }
    }

    /// The root `who` folded.
    pub fn root(&self, who: &Client) -> &RootState {
        match self.state(who, ROOT) {
            SnapshotState::Root(r) => r,
            other => panic!("the root is not a root: {other:?}"),
        }
    }

    /// The finished turns of `who`'s current chat.
    pub fn turns(&self, who: &Client) -> &[Turn] {
        &self.chat(who).turns
    }

    /// The last finished turn of `who`'s current chat.
    pub fn last_turn(&self, who: &Client) -> &Turn {
        self.turns(who).last().unwrap_or_else(|| panic!("{} folded no finished turn", who.id))
    }

    /// The running turn of `who`'s current chat.
    pub fn running(&self, who: &Client) -> Option<&ActiveTurn> {
        self.chat(who).active_turn.as_ref()
    }

    /// Every frame `who` received, in order.
    pub fn frames(&self, who: &Client) -> &[Value] {
        &self.conns[who.index].frames
    }

    /// The action envelopes `who` received on `channel`, in order (refusals among them).
    pub fn envelopes(&self, who: &Client, channel: &str) -> Vec<ActionEnvelope> {
        self.conns[who.index]
            .frames
            .iter()
            .filter(|f| f["method"] == "action" && f["params"]["channel"] == channel)
            .map(|f| serde_json::from_value(f["params"].clone()).expect("an action envelope"))
            .collect()
    }

    /// The action types `who` received on `channel` and folded (refusals left out), in order.
    pub fn said(&self, who: &Client, channel: &str) -> Vec<String> {
        self.conns[who.index]
            .frames
            .iter()
            .filter(|f| {
                f["method"] == "action" && f["params"]["channel"] == channel && f["params"]["rejectionReason"].is_null()
            })
            .map(|f| f["params"]["action"]["type"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// The notifications (not actions) `who` received with `method`, their params in order.
    pub fn notifications(&self, who: &Client, method: &str) -> Vec<Value> {
        self.conns[who.index]
            .frames
            .iter()
            .filter(|f| f["method"] == method && f.get("id").is_none())
            .map(|f| f["params"].clone())
            .collect()
    }

    /// Forgets every frame `who` received so far (its folds stay).
    pub fn clear_frames(&mut self, who: &Client) {
        self.conns[who.index].frames.clear();
    }

    /// The open session-level input requests `who` folded for `session`.
    pub fn input_needed(&self, who: &Client, session: &str) -> Vec<Value> {
        let state = self.session(who, session);
        state.input_needed.iter().flatten().map(|r| serde_json::to_value(r).expect("JSON")).collect()
    }
}

/// Files a frame where it belongs: an answer by its id (a subscription's snapshot seeds the
/// mirror, a check's is compared with it), an envelope folded, everything kept in order.
fn take(conn: &mut Conn, value: Value) {
    conn.frames.push(value.clone());
    if value["method"] == "action" {
        if let Ok(envelope) = serde_json::from_value::<ActionEnvelope>(value["params"].clone()) {
            conn.mirror.fold(&envelope);
        }
        return;
    }
    if value["method"] == "root/sessionRemoved" {
        if let Some(session) = value["params"]["session"].as_str() {
            forget_session(&mut conn.mirror, session);
        }
    }
    let Some(id) = value.get("id").and_then(Value::as_u64) else { return };
    if value.get("method").is_some() {
        return; // a request the host makes of the client
    }
    match conn.purposes.remove(&id) {
        Some(Purpose::Subscribe) => {
            if let Ok(snapshot) = serde_json::from_value::<Snapshot>(value["result"]["snapshot"].clone()) {
                conn.mirror.seed(snapshot);
            }
        }
        Some(Purpose::Check(channel)) => {
            if let Ok(snapshot) = serde_json::from_value::<Snapshot>(value["result"]["snapshot"].clone()) {
                compare(conn, &channel, &snapshot);
            }
        }
        Some(Purpose::Plain) | None => {
            for snapshot in value["result"]["snapshots"].as_array().into_iter().flatten() {
                if let Ok(snapshot) = serde_json::from_value::<Snapshot>(snapshot.clone()) {
                    conn.mirror.seed(snapshot);
                }
            }
        }
    }
    conn.answers.insert(id, value);
}

/// Forgets a removed session and every chat of it the mirror folds (its channels are gone).
fn forget_session(mirror: &mut Mirror, session: &str) {
    let mut chats: Vec<String> = match mirror.states.get(session) {
        Some(SnapshotState::Session(s)) => s.chats.iter().map(|c| c.resource.clone()).collect(),
        _ => Vec::new(),
    };
    chats.push(session.replacen("ahp-session:", "ahp-chat:", 1));
    for chat in chats {
        mirror.forget(&chat);
    }
    mirror.forget(session);
}

fn compare(conn: &mut Conn, channel: &str, snapshot: &Snapshot) {
    let Some(folded) = conn.mirror.states.get(channel) else { return };
    let ours = strip_nulls(serde_json::to_value(folded).expect("JSON"));
    let theirs = strip_nulls(serde_json::to_value(&snapshot.state).expect("JSON"));
    if ours != theirs {
        conn.differences
            .push(format!("{channel} at seq {}:\n  folded:   {ours}\n  snapshot: {theirs}", snapshot.from_seq));
    }
}

/// Removes `null` values (absent and `null` mean the same to a client).
pub fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, strip_nulls(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

// ---- actions and readings, as plain functions ----

/// A client's `chat/turnStarted` for `text`.
pub fn turn_started(turn: &str, text: &str) -> Value {
    json!({
        "type": "chat/turnStarted",
        "turnId": turn,
        "startedAt": "2026-01-01T00:00:00.000Z",
        "message": { "text": text, "origin": { "kind": "user" } },
    })
}

/// The text of a turn's markdown parts, joined.
pub fn text_of(turn: &Turn) -> String {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Markdown(m) => Some(m.content.as_str()),
            _ => None,
        })
        .collect()
}

/// The tool calls among a turn's parts, in order.
pub fn calls_of(parts: &[ResponsePart]) -> Vec<&ToolCallState> {
    parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(tc) => Some(&tc.tool_call),
            _ => None,
        })
        .collect()
}

/// A tool call's id.
pub fn call_id(call: &ToolCallState) -> String {
    serde_json::to_value(call).expect("JSON")["toolCallId"].as_str().unwrap_or_default().to_owned()
}

/// A tool call's status word (`pending-confirmation`, `running`, `completed`, …).
pub fn call_status(call: &ToolCallState) -> String {
    serde_json::to_value(call).expect("JSON")["status"].as_str().unwrap_or_default().to_owned()
}

/// The completed calls of a turn as (success, text or error).
pub fn results_of(turn: &Turn) -> Vec<(bool, String)> {
    calls_of(&turn.response_parts)
        .into_iter()
        .filter_map(|call| match call {
            ToolCallState::Completed(done) => {
                let text = match (&done.error, &done.content) {
                    (Some(error), _) => error.as_str().map(str::to_owned).unwrap_or_else(|| error.to_string()),
                    (None, Some(content)) => serde_json::to_value(content)
                        .ok()
                        .and_then(|c| c.as_array().cloned())
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c["text"].as_str().map(str::to_owned))
                        .collect(),
                    (None, None) => String::new(),
                };
                Some((done.success, text))
            }
            _ => None,
        })
        .collect()
}

/// The session a tool's answer links to (`… (agent-host-session://<provider>/<id>).`).
pub fn session_in(text: &str) -> String {
    let start = text.find("agent-host-session://").unwrap_or_else(|| panic!("no session link in {text:?}"));
    let link = text[start..].trim_end_matches(").").trim_end_matches(')');
    let id = link.split('/').nth(3).unwrap_or_default().split('?').next().unwrap_or_default();
    format!("ahp-session:/{id}")
}

/// The calls of the running turn waiting to be allowed.
pub fn waiting_calls(chat: &ChatState) -> Vec<String> {
    let Some(turn) = &chat.active_turn else { return Vec::new() };
    calls_of(&turn.response_parts)
        .into_iter()
        .filter(|c| matches!(c, ToolCallState::PendingConfirmation(_)))
        .map(call_id)
        .collect()
}

/// The questions of the running turn waiting for an answer.
pub fn open_questions(chat: &ChatState) -> Vec<String> {
    let Some(turn) = &chat.active_turn else { return Vec::new() };
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::InputRequest(r) if r.response.is_none() => Some(r.request.id.clone()),
            _ => None,
        })
        .collect()
}
