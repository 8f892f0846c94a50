//! The host's logic in process, on the bare host (`ahpd::bare`): frames handed straight to
//! `Host::handle_frame`, the in-process echo and notes agents as backends, no socket and no
//! child process — the layer between the unit tests and the end-to-end ones. Each test folds the
//! actions a connection was sent through the official reducers and holds them against what the
//! host holds, and the host's clock is a manual one the tests move.

use std::time::Duration;

use ahp::reducers::apply_action_to_chat;
use ahp_types::actions::StateAction;
use ahp_types::state::{ChatState, Snapshot, SnapshotState, ToolCallState, TurnState};
use ahpd::bare::{BareConn, BareHost};
use ahpd::host::HostConfig;
use serde_json::{json, Value};

/// How long a test waits for a frame before it calls the host hung (a guard, not a measure).
const HUNG: Duration = Duration::from_secs(30);

/// One connection to a bare host, as a client sees it.
struct Client {
    conn: BareConn,
    next_id: u64,
    /// Every frame received that was not the answer a request waited for.
    seen: Vec<Value>,
}

impl Client {
    /// Connects and initializes as `client_id`.
    async fn connect(host: &BareHost, client_id: &str) -> Self {
        let mut client = Self { conn: host.connect(4096), next_id: 1, seen: Vec::new() };
        let init = json!({ "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": client_id });
        let answer = client.request(host, "initialize", init).await;
        assert!(answer.get("result").is_some(), "initialize: {answer}");
        client
    }

    fn send(&mut self, host: &BareHost, message: &Value) {
        host.host.handle_frame(&mut self.conn.state, &message.to_string());
    }

    /// Sends a request and answers the host's answer to it (`result` or `error` inside).
    async fn request(&mut self, host: &BareHost, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(host, &json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        loop {
            let frame = self.next().await;
            if frame["id"] == id {
                return frame;
            }
            self.seen.push(frame);
        }
    }

    /// Dispatches a client action.
    fn dispatch(&mut self, host: &BareHost, channel: &str, client_seq: i64, action: Value) {
        let params = json!({ "channel": channel, "clientSeq": client_seq, "action": action });
        self.send(host, &json!({ "jsonrpc": "2.0", "method": "dispatchAction", "params": params }));
    }

    async fn next(&mut self) -> Value {
        let frame = tokio::time::timeout(HUNG, self.conn.outbox.recv())
            .await
            .expect("the host answered in time")
            .expect("the connection is open");
        serde_json::from_str(frame.as_str()).expect("JSON")
    }

    /// Receives until a frame matches `what`; answers it (every frame is kept in `seen`).
    async fn until(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        if let Some(found) = self.seen.iter().find(|f| matches(f)) {
            return found.clone();
        }
        loop {
            let frame = self.next().await;
            self.seen.push(frame.clone());
            if matches(&frame) {
                return frame;
            }
            assert!(self.seen.len() < 100_000, "never saw {what}");
        }
    }

    /// Takes what the host has queued for this connection so far, without waiting.
    fn drain(&mut self) {
        while let Ok(frame) = self.conn.outbox.try_recv() {
            self.seen.push(serde_json::from_str(frame.as_str()).expect("JSON"));
        }
    }

    /// The action envelopes received on `channel`, in order.
    fn envelopes(&self, channel: &str) -> Vec<Value> {
        self.seen
            .iter()
            .filter(|f| f["method"] == "action" && f["params"]["channel"] == channel)
            .map(|f| f["params"].clone())
            .collect()
    }

    /// Receives until `n` frames received match `what`.
    async fn until_count(&mut self, what: &str, n: usize, matches: impl Fn(&Value) -> bool) {
        while self.seen.iter().filter(|f| matches(f)).count() < n {
            let frame = self.next().await;
            self.seen.push(frame);
            assert!(self.seen.len() < 100_000, "never saw {n} of {what}");
        }
    }

    /// Subscribes to a chat; answers its snapshot's state and the sequence number it holds.
    async fn subscribe_chat(&mut self, host: &BareHost, chat: &str) -> (ChatState, u64) {
        let answer = self.request(host, "subscribe", json!({ "channel": chat })).await;
        let snapshot: Snapshot = serde_json::from_value(answer["result"]["snapshot"].clone()).expect("a snapshot");
        let from = u64::try_from(snapshot.from_seq).unwrap_or(0);
        match snapshot.state {
            SnapshotState::Chat(state) => (*state, from),
            other => panic!("not a chat: {other:?}"),
        }
    }
}

fn is_action(frame: &Value, channel: &str, kind: &str) -> bool {
    frame["method"] == "action" && frame["params"]["channel"] == channel && frame["params"]["action"]["type"] == kind
}

fn turn_started(turn_id: &str, text: &str) -> Value {
    json!({
        "type": "chat/turnStarted",
        "turnId": turn_id,
        "startedAt": "2026-01-01T00:00:00.000Z",
        "message": { "text": text, "origin": { "kind": "user" } },
    })
}

/// Folds the envelopes `client` received on `chat` into `state`, through the official reducer.
fn fold(client: &Client, chat: &str, mut state: ChatState, after_seq: u64) -> ChatState {
    for envelope in client.envelopes(chat) {
        if envelope["serverSeq"].as_u64().unwrap_or(0) <= after_seq || envelope.get("rejectionReason").is_some() {
            continue;
        }
        let action: StateAction = serde_json::from_value(envelope["action"].clone()).expect("an action");
        apply_action_to_chat(&mut state, &action);
    }
    state
}

/// What the host holds for `chat`.
fn held(host: &BareHost, chat: &str) -> Value {
    serde_json::to_value(host.host.lock().chat_state(chat).expect("the chat is loaded")).expect("JSON")
}

/// A bare host with the given in-process agents on a manual clock.
async fn bare(dir: &std::path::Path, kinds: &[&str], config: HostConfig) -> BareHost {
    let config = HostConfig { clock: ahpd::clock::Clock::manual(), ..config };
    BareHost::start_with(dir, kinds, config).await.expect("a bare host")
}

async fn create_session(client: &mut Client, host: &BareHost, id: &str, provider: &str) -> (String, String) {
    let session = format!("ahp-session:/{id}");
    let answer = client.request(host, "createSession", json!({ "channel": session, "provider": provider })).await;
    assert!(answer.get("error").is_none(), "createSession: {answer}");
    (session, format!("ahp-chat:/{id}"))
}

/// An echo session whose chat client `a` watches from the snapshot it was answered.
struct Watched {
    _dir: tempfile::TempDir,
    host: BareHost,
    a: Client,
    chat: String,
    snapshot: ChatState,
    from: u64,
}

async fn watched_echo_chat() -> Watched {
    let dir = tempfile::tempdir().expect("temp dir");
    let host = bare(dir.path(), &["echo"], HostConfig::default()).await;
    let mut a = Client::connect(&host, "a").await;
    let (_session, chat) = create_session(&mut a, &host, "s1", "echo").await;
    let (snapshot, from) = a.subscribe_chat(&host, &chat).await;
    Watched { _dir: dir, host, a, chat, snapshot, from }
}

#[tokio::test]
async fn a_clients_turn_is_said_with_its_origin_and_folds_to_what_the_host_holds() {
    let Watched { _dir, host, mut a, chat, snapshot, from } = watched_echo_chat().await;

    a.dispatch(&host, &chat, 1, turn_started("t1", "hello there"));
    a.until("the turn's end", |f| is_action(f, &chat, "chat/turnComplete")).await;
    a.drain();

    let started = a.envelopes(&chat).into_iter().find(|e| e["action"]["type"] == "chat/turnStarted").expect("a start");
    assert_eq!(started["origin"], json!({ "clientId": "a", "clientSeq": 1 }), "said as the client sent it: {started}");
    let folded = fold(&a, &chat, snapshot, from);
    assert_eq!(serde_json::to_value(&folded).expect("JSON"), held(&host, &chat), "the fold is the host's state");
    assert_eq!(folded.turns.len(), 1);
    assert_eq!(folded.turns[0].state, TurnState::Complete);
    host.stop().await;
}

#[tokio::test]
async fn a_refused_action_goes_back_to_its_sender_alone_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let host = bare(dir.path(), &["echo"], HostConfig::default()).await;
    let mut a = Client::connect(&host, "a").await;
    let mut b = Client::connect(&host, "b").await;
    let (session, _chat) = create_session(&mut a, &host, "s1", "echo").await;
    for client in [&mut a, &mut b] {
        let answer = client.request(&host, "subscribe", json!({ "channel": session })).await;
        assert!(answer.get("result").is_some(), "{answer}");
    }
    let title = host.host.lock().session_state(&session).map(|s| s.title.clone());

    a.dispatch(&host, &session, 7, json!({ "type": "session/titleChanged", "title": "   " }));
    let refused = a.until("the refusal", |f| is_action(f, &session, "session/titleChanged")).await;
    assert_eq!(refused["params"]["rejectionReason"], "A session's title must not be empty", "{refused}");
    assert_eq!(refused["params"]["origin"], json!({ "clientId": "a", "clientSeq": 7 }));

    // Whatever the host sent b before this ping's answer is in b's queue ahead of it.
    b.request(&host, "ping", json!({})).await;
    assert!(b.envelopes(&session).is_empty(), "another client hears nothing of it: {:?}", b.seen);
    assert_eq!(host.host.lock().session_state(&session).map(|s| s.title.clone()), title, "nothing changed");
    host.stop().await;
}

#[tokio::test]
async fn a_message_queued_behind_a_running_turn_starts_when_it_ends() {
    let Watched { _dir, host, mut a, chat, snapshot, from } = watched_echo_chat().await;

    // Back to back, with nothing awaited between: the first turn is running when the second
    // message is queued behind it.
    a.dispatch(&host, &chat, 1, turn_started("t1", "first"));
    let queued = json!({
        "type": "chat/pendingMessageSet",
        "kind": "queued",
        "id": "q1",
        "message": { "text": "second", "origin": { "kind": "user" } },
    });
    a.dispatch(&host, &chat, 2, queued);
    a.until_count("turn endings", 2, |f| is_action(f, &chat, "chat/turnComplete")).await;
    a.drain();

    let starts: Vec<Value> =
        a.envelopes(&chat).into_iter().filter(|e| e["action"]["type"] == "chat/turnStarted").collect();
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert_eq!(starts[1]["action"]["queuedMessageId"], "q1", "the host starts the queued message: {}", starts[1]);
    assert!(starts[1].get("origin").is_none(), "as its own action, not the client's: {}", starts[1]);
    let folded = fold(&a, &chat, snapshot, from);
    assert_eq!(serde_json::to_value(&folded).expect("JSON"), held(&host, &chat));
    let texts: Vec<&str> = folded.turns.iter().map(|t| t.message.text.as_str()).collect();
    assert_eq!(texts, ["first", "second"]);
    assert!(folded.queued_messages.as_ref().is_none_or(|q| q.is_empty()), "the queue is empty");
    host.stop().await;
}

#[tokio::test]
async fn a_turn_is_stored_before_its_ending_is_said_and_a_new_host_loads_it_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let host = bare(dir.path(), &["echo"], HostConfig::default()).await;
    let mut a = Client::connect(&host, "a").await;
    let (session, chat) = create_session(&mut a, &host, "s1", "echo").await;
    a.subscribe_chat(&host, &chat).await;
    a.dispatch(&host, &chat, 1, turn_started("t1", "keep this"));
    a.until("the turn's end", |f| is_action(f, &chat, "chat/turnComplete")).await;

    // Read the store beside the host, the moment the ending reached the client.
    let store = ahpd::store::Store::open(&dir.path().join("sessions.db")).expect("the store");
    let loaded = store.load_session(&session).expect("readable").expect("stored");
    let turns: Vec<(&str, &TurnState)> =
        loaded.chats.iter().flat_map(|(_, turns)| turns.iter().map(|t| (t.turn.id.as_str(), &t.turn.state))).collect();
    assert_eq!(turns, [("t1", &TurnState::Complete)], "written before it was said");
    drop(store);
    host.stop().await;

    let again = bare(dir.path(), &["echo"], HostConfig::default()).await;
    let mut b = Client::connect(&again, "b").await;
    let (state, _) = b.subscribe_chat(&again, &chat).await;
    assert_eq!(state.turns.len(), 1);
    assert_eq!(state.turns[0].message.text, "keep this");
    let listed = b.request(&again, "listSessions", json!({ "channel": "ahp-root://" })).await;
    assert_eq!(listed["result"]["items"][0]["title"], "keep this", "{listed}");
    again.stop().await;
}

#[tokio::test]
async fn a_clients_tool_call_fails_when_its_time_runs_out_on_the_hosts_clock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = HostConfig { client_tool_timeout_ms: 5_000, ..HostConfig::default() };
    let host = bare(dir.path(), &["notes"], config).await;
    let mut editor = Client::connect(&host, "c1").await;
    let (session, chat) = create_session(&mut editor, &host, "s1", "notes").await;
    editor.request(&host, "subscribe", json!({ "channel": session })).await;
    let (snapshot, from) = editor.subscribe_chat(&host, &chat).await;
    let active = json!({
        "type": "session/activeClientSet",
        "activeClient": {
            "clientId": "c1",
            "tools": [{ "name": "openFile", "inputSchema": { "type": "object", "properties": {} } }],
        },
    });
    editor.dispatch(&host, &session, 1, active);
    editor.dispatch(&host, &chat, 2, turn_started("t1", "call c1__openFile {}"));
    let waiting = editor
        .until("the call waiting for its client", |f| {
            is_action(f, &session, "session/inputNeededSet")
                && f["params"]["action"]["request"]["kind"] == "toolClientExecution"
        })
        .await;
    assert_eq!(waiting["params"]["action"]["request"]["clientId"], "c1", "{waiting}");

    host.host.config().clock.advance(Duration::from_millis(5_000));
    editor.until("the turn's end", |f| is_action(f, &chat, "chat/turnComplete")).await;
    editor.drain();

    let folded = fold(&editor, &chat, snapshot, from);
    assert_eq!(serde_json::to_value(&folded).expect("JSON"), held(&host, &chat));
    let call = folded.turns[0]
        .response_parts
        .iter()
        .find_map(|p| match p {
            ahp_types::state::ResponsePart::ToolCall(tc) => Some(tc.tool_call.clone()),
            _ => None,
        })
        .expect("the call is in the turn");
    let ToolCallState::Completed(done) = call else { panic!("not completed: {call:?}") };
    assert!(!done.success);
    assert_eq!(done.error, Some(json!("openFile got no answer from c1 in 5 s")));
    let needed = host.host.lock().session_state(&session).and_then(|s| s.input_needed.clone()).unwrap_or_default();
    assert!(needed.is_empty(), "nothing waits for the client any more: {needed:?}");
    host.stop().await;
}

#[tokio::test]
async fn every_command_passes_the_tables_checks_in_one_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let host = bare(dir.path(), &[], HostConfig::default()).await;
    let mut c = Client { conn: host.connect(64), next_id: 1, seen: Vec::new() };
    let error =
        |answer: &Value| (answer["error"]["code"].as_i64(), answer["error"]["message"].as_str().map(str::to_owned));

    let pong = c.request(&host, "ping", json!({})).await;
    assert_eq!(pong["result"], Value::Null, "ping is answered before the handshake: {pong}");
    let early = c.request(&host, "listSessions", json!({ "channel": "ahp-root://" })).await;
    assert_eq!(error(&early), (Some(-32600), Some("initialize or reconnect must be the first request".into())));
    let init = json!({ "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "c" });
    assert!(c.request(&host, "initialize", init.clone()).await.get("result").is_some());

    let again = c.request(&host, "initialize", init).await;
    assert_eq!(error(&again), (Some(-32600), Some("This connection is initialized already".into())));
    let unnamed = c.request(&host, "createTerminal", json!({})).await;
    assert_eq!(error(&unnamed), (Some(-32602), Some("Invalid createTerminal params: \"channel\" is required".into())));
    let unserved = c.request(&host, "resourceWrite", json!({ "channel": "ahp-root://" })).await;
    assert_eq!(
        error(&unserved),
        (Some(-32601), Some("Unknown method resourceWrite (this host does not serve it yet)".into()))
    );
    // The bare host has no terminals feature: a terminal is refused as a command it does not serve.
    let claim = json!({ "kind": "client", "clientId": "c" });
    let terminal = c.request(&host, "createTerminal", json!({ "channel": "ahp-terminal:/t", "claim": claim })).await;
    assert_eq!(
        error(&terminal),
        (Some(-32601), Some("Unknown method createTerminal (this host serves no terminals)".into()))
    );
    let unknown = c.request(&host, "noSuchCommand", json!({})).await;
    assert_eq!(error(&unknown), (Some(-32601), Some("Unknown method noSuchCommand".into())));
    let malformed = c.request(&host, "fetchTurns", json!({ "channel": "ahp-chat:/x", "cursor": 5 })).await;
    assert_eq!(error(&malformed).0, Some(-32602), "params read into their type: {malformed}");
    assert!(error(&malformed).1.is_some_and(|m| m.starts_with("Invalid fetchTurns params: ")), "{malformed}");
    host.stop().await;
}
