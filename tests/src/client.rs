//! A client as a client really is: the official `ahp` 1.0.0 client over `ahp-ws`, folding every
//! envelope it receives through `ahp::reducers` into a mirror of each channel it watches, and
//! checking that mirror against a fresh snapshot from the host.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use ahp::reducers::{
    apply_action_to_annotations, apply_action_to_automation, apply_action_to_automation_run, apply_action_to_changeset,
    apply_action_to_chat, apply_action_to_root, apply_action_to_session, apply_action_to_terminal, ReduceOutcome,
};
use ahp::{Client, ClientConfig, ClientEventStream, SubscriptionEvent};
use ahp_types::actions::{ActionEnvelope, ChatTurnStartedAction, StateAction};
use ahp_types::commands::InitializeResult;
use ahp_types::state::{
    ChangesetState, ChatState, Message, MessageKind, MessageOrigin, SessionLifecycle, SessionState, Snapshot,
    SnapshotState, TerminalState, Turn,
};
use ahp_types::ROOT_RESOURCE_URI;
use anyhow::{anyhow, bail, Context};
use serde_json::Value;

/// How long any one wait in a test may take before it fails (a safety net, not a measurement:
/// generous, since on two loaded cores an agent CLI's start has taken over 30 s).
pub const PATIENCE: Duration = Duration::from_secs(90);

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

/// A user message.
pub fn user_message(text: &str) -> Message {
    Message {
        text: text.to_owned(),
        origin: MessageOrigin { kind: MessageKind::User },
        attachments: None,
        model: None,
        agent: None,
        meta: None,
    }
}

/// Now, RFC 3339 with milliseconds.
pub fn now_iso() -> String {
    format!("{:.3}", jiff::Timestamp::now())
}

/// Channel states as this client folded them.
#[derive(Default)]
pub struct Mirror {
    /// State by channel.
    pub states: HashMap<String, SnapshotState>,
    from_seq: HashMap<String, i64>,
}

impl Mirror {
    /// Takes a snapshot as the channel's starting point.
    pub fn seed(&mut self, snapshot: Snapshot) {
        self.from_seq.insert(snapshot.resource.clone(), snapshot.from_seq);
        self.states.insert(snapshot.resource, snapshot.state);
    }

    /// Folds one envelope; answers the reducer's outcome, or `None` when it did not apply (a
    /// rejection, something the snapshot already holds, a channel not watched).
    pub fn fold(&mut self, env: &ActionEnvelope) -> Option<ReduceOutcome> {
        if env.rejection_reason.is_some() {
            return None;
        }
        let from = *self.from_seq.get(&env.channel)?;
        if i64::try_from(env.server_seq).unwrap_or(i64::MAX) <= from {
            return None;
        }
        Some(match self.states.get_mut(&env.channel)? {
            SnapshotState::Root(r) => apply_action_to_root(r, &env.action),
            SnapshotState::Session(s) => apply_action_to_session(s, &env.action),
            SnapshotState::Chat(c) => apply_action_to_chat(c, &env.action),
            SnapshotState::Annotations(a) => apply_action_to_annotations(a, &env.action),
            SnapshotState::Changeset(c) => apply_action_to_changeset(c, &env.action),
            SnapshotState::Terminal(t) => apply_action_to_terminal(t, &env.action),
            SnapshotState::Automations(a) => apply_action_to_automation(a, &env.action),
            SnapshotState::AutomationRun(r) => apply_action_to_automation_run(r, &env.action),
            _ => ReduceOutcome::OutOfScope,
        })
    }

    /// A session's folded state.
    pub fn session(&self, uri: &str) -> Option<&SessionState> {
        match self.states.get(uri)? {
            SnapshotState::Session(s) => Some(s),
            _ => None,
        }
    }

    /// A chat's folded state.
    pub fn chat(&self, uri: &str) -> Option<&ChatState> {
        match self.states.get(uri)? {
            SnapshotState::Chat(c) => Some(c),
            _ => None,
        }
    }

    /// A changeset's folded state.
    pub fn changeset(&self, uri: &str) -> Option<&ChangesetState> {
        match self.states.get(uri)? {
            SnapshotState::Changeset(c) => Some(c),
            _ => None,
        }
    }

    /// A terminal's folded state.
    pub fn terminal(&self, uri: &str) -> Option<&TerminalState> {
        match self.states.get(uri)? {
            SnapshotState::Terminal(t) => Some(t),
            _ => None,
        }
    }

    /// The automation catalogue's folded state (`ahp-automations://`).
    pub fn automations(&self) -> Option<&ahp_types::state::AutomationState> {
        match self.states.get("ahp-automations://")? {
            SnapshotState::Automations(a) => Some(a),
            _ => None,
        }
    }

    /// An automation's entry in the folded catalogue.
    pub fn automation(&self, uri: &str) -> Option<&ahp_types::state::AutomationEntry> {
        self.automations()?.entries.iter().find(|e| e.resource == uri)
    }

    /// An automation run's folded state.
    pub fn automation_run(&self, uri: &str) -> Option<&ahp_types::state::AutomationRunState> {
        match self.states.get(uri)? {
            SnapshotState::AutomationRun(r) => Some(r),
            _ => None,
        }
    }

    /// The root's folded state.
    pub fn root(&self) -> Option<&ahp_types::state::RootState> {
        match self.states.get(ROOT_RESOURCE_URI)? {
            SnapshotState::Root(r) => Some(r),
            _ => None,
        }
    }
}

/// What a terminal printed, its parts joined as AHP says a naive consumer does.
pub fn terminal_output(state: &TerminalState) -> String {
    state
        .content
        .iter()
        .map(|part| match part {
            ahp_types::state::TerminalContentPart::Unclassified(p) => p.value.as_str(),
            ahp_types::state::TerminalContentPart::Command(c) => c.output.as_str(),
            ahp_types::state::TerminalContentPart::Unknown(_) => "",
        })
        .collect()
}

/// One connected client.
pub struct TestClient {
    /// The official client.
    pub client: Client,
    /// Its client id.
    pub client_id: String,
    events: ClientEventStream,
    /// Envelopes received and not yet folded (they are past the last snapshot compared).
    held: VecDeque<ActionEnvelope>,
    /// What it folded.
    pub mirror: Mirror,
    /// Every envelope it received, in order.
    pub envelopes: Vec<ActionEnvelope>,
    /// Every protocol notification it received.
    pub notifications: Vec<SubscriptionEvent>,
    /// The handshake's answer.
    pub init: Option<InitializeResult>,
}

fn config() -> ClientConfig {
    ClientConfig { default_request_timeout: Some(PATIENCE), subscription_buffer: 1 << 16 }
}

impl TestClient {
    /// Connects without a handshake.
    pub async fn connect_raw(url: &str, client_id: &str) -> anyhow::Result<Self> {
        let transport = ahp_ws::WebSocketTransport::connect(&crate::daemon::with_token(url))
            .await
            .map_err(|e| anyhow!("connect {url}: {e}"))?;
        Self::over_raw(transport, client_id).await
    }

    /// Says `initialize` over `transport` (a child's stdio: [`crate::stdio::LinesTransport`]),
    /// subscribed to the root channel.
    pub async fn connect_over(transport: impl ahp::Transport, client_id: &str) -> anyhow::Result<Self> {
        Self::over_raw(transport, client_id).await?.initialized().await
    }

    async fn over_raw(transport: impl ahp::Transport, client_id: &str) -> anyhow::Result<Self> {
        let client = Client::connect(transport, config()).await.map_err(|e| anyhow!("client: {e}"))?;
        let events = client.events();
        Ok(Self {
            client,
            client_id: client_id.to_owned(),
            events,
            held: VecDeque::new(),
            mirror: Mirror::default(),
            envelopes: Vec::new(),
            notifications: Vec::new(),
            init: None,
        })
    }

    /// Connects and says `initialize`, subscribed to the root channel.
    pub async fn connect(url: &str, client_id: &str) -> anyhow::Result<Self> {
        Self::connect_raw(url, client_id).await?.initialized().await
    }

    async fn initialized(mut self) -> anyhow::Result<Self> {
        let versions = ahp_types::SUPPORTED_PROTOCOL_VERSIONS.iter().map(|v| (*v).to_owned()).collect();
        let init = self
            .client
            .initialize(self.client_id.clone(), versions, vec![ROOT_RESOURCE_URI.to_owned()])
            .await
            .map_err(|e| anyhow!("initialize: {e}"))?;
        for snapshot in init.snapshots.clone() {
            self.mirror.seed(snapshot);
        }
        self.init = Some(init);
        Ok(self)
    }

    /// Takes every event already received, folding what the mirror may fold now.
    pub fn pump(&mut self) -> anyhow::Result<()> {
        while let Some(event) = self.try_next() {
            self.take(event)?;
        }
        Ok(())
    }

    /// The next event the client already holds, if any. Unconstrained: tokio's cooperative
    /// budget would otherwise make a receive answer "not yet" for an event that is there once the
    /// task has done enough work, and a drain would stop short of what was sent before an answer.
    fn try_next(&mut self) -> Option<SubscriptionEvent> {
        let now = futures_util::FutureExt::now_or_never(tokio::task::unconstrained(self.events.recv()));
        now.flatten().map(|e| e.event)
    }

    fn take(&mut self, event: SubscriptionEvent) -> anyhow::Result<()> {
        match event {
            SubscriptionEvent::Action(env) => {
                self.envelopes.push(env.clone());
                self.held.push_back(env);
                self.fold_held(u64::MAX)?;
            }
            other => self.notifications.push(other),
        }
        Ok(())
    }

    fn fold_held(&mut self, up_to: u64) -> anyhow::Result<()> {
        while self.held.front().is_some_and(|e| e.server_seq <= up_to) {
            let Some(env) = self.held.pop_front() else {
                break;
            };
            if let Some(ReduceOutcome::Invalid(e)) = self.mirror.fold(&env) {
                bail!("the reducer found envelope {} invalid: {e:?}", env.server_seq);
            }
        }
        Ok(())
    }

    /// Waits for the next event, at most `within`.
    pub async fn next_event(&mut self, within: Duration) -> anyhow::Result<()> {
        let event = tokio::time::timeout(within, self.events.recv()).await.context("no event in time")?;
        let event = event.ok_or_else(|| anyhow!("the connection closed"))?;
        self.take(event.event)
    }

    /// Waits until `predicate` holds on the mirror.
    pub async fn until(&mut self, what: &str, predicate: impl Fn(&Mirror) -> bool) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            self.pump()?;
            if predicate(&self.mirror) {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                bail!("waited {PATIENCE:?} for {what}");
            }
            let _ = self.next_event(left).await;
        }
    }

    /// Subscribes and seeds the mirror with the snapshot.
    pub async fn subscribe(&mut self, uri: &str) -> anyhow::Result<()> {
        let (result, _sub) =
            self.client.subscribe(uri.to_owned()).await.map_err(|e| anyhow!("subscribe {uri}: {e}"))?;
        let snapshot = result.snapshot.ok_or_else(|| anyhow!("subscribe {uri}: no snapshot"))?;
        // Seed first: actions on this channel that follow the snapshot may already have arrived
        // (a turn running while we subscribe), and folding before the seed would drop them.
        self.mirror.seed(snapshot);
        self.pump()?;
        Ok(())
    }

    /// A raw request.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ahp::ClientError> {
        self.client.request::<Value, Value>(method, params).await
    }

    /// Every row `listSessions` answers, page after page of `limit` rows (the host's page size
    /// when none).
    pub async fn listed_sessions(&self, limit: Option<u32>) -> anyhow::Result<Vec<Value>> {
        let mut items = Vec::new();
        let mut cursor = Value::Null;
        loop {
            let mut params = serde_json::json!({ "channel": "ahp-root://", "cursor": cursor });
            if let Some(limit) = limit {
                params["limit"] = limit.into();
            }
            let page = self.request("listSessions", params).await?;
            items.extend(page["items"].as_array().cloned().unwrap_or_default());
            match page.get("nextCursor") {
                Some(next) if !next.is_null() => cursor = next.clone(),
                _ => return Ok(items),
            }
        }
    }

    /// Creates a session on `provider` with `config`, waits until it is ready, and subscribes to it
    /// and its default chat. Answers (session, chat).
    pub async fn create_session(&mut self, provider: &str, config: Option<Value>) -> anyhow::Result<(String, String)> {
        let mut params = serde_json::json!({ "provider": provider });
        if let Some(config) = config {
            params["config"] = config;
        }
        self.open_session(params).await
    }

    /// Creates a session on `provider` working in `folder`, waits until it is ready, and
    /// subscribes to it and its default chat. Answers (session, chat).
    pub async fn create_session_in(
        &mut self,
        provider: &str,
        folder: &std::path::Path,
    ) -> anyhow::Result<(String, String)> {
        let folders = [format!("file://{}", folder.display())];
        self.open_session(serde_json::json!({ "provider": provider, "workingDirectories": folders })).await
    }

    /// `createSession` with `params` on a new channel, then waits for it and watches it and its
    /// default chat.
    pub async fn open_session(&mut self, mut params: Value) -> anyhow::Result<(String, String)> {
        let session = format!("ahp-session:/{}", uuid::Uuid::new_v4());
        params["channel"] = Value::String(session.clone());
        self.request("createSession", params).await.map_err(|e| anyhow!("createSession: {e}"))?;
        self.subscribe(&session).await?;
        let s = session.clone();
        self.until("the session to be ready (or its creation to fail)", move |m| {
            m.session(&s).is_some_and(|st| {
                st.lifecycle == SessionLifecycle::Failed
                    || (st.lifecycle == SessionLifecycle::Ready && st.default_chat.is_some())
            })
        })
        .await?;
        if let Some(failed) = self.mirror.session(&session).filter(|st| st.lifecycle == SessionLifecycle::Failed) {
            let why = failed.creation_error.as_ref().map(|e| e.message.clone()).unwrap_or_default();
            anyhow::bail!("the session could not be made: {why}");
        }
        let chat = self
            .mirror
            .session(&session)
            .and_then(|s| s.default_chat.clone())
            .ok_or_else(|| anyhow!("no default chat"))?;
        self.subscribe(&chat).await?;
        Ok((session, chat))
    }

    /// Dispatches an action; answers its client sequence number.
    pub async fn dispatch(&self, channel: &str, action: StateAction) -> anyhow::Result<i64> {
        let handle = self.client.dispatch(channel.to_owned(), action).await.map_err(|e| anyhow!("dispatch: {e}"))?;
        Ok(handle.client_seq)
    }

    /// Starts a turn with `text`; answers its id.
    pub async fn send(&self, chat: &str, text: &str) -> anyhow::Result<String> {
        let turn_id = uuid::Uuid::new_v4().to_string();
        let action = StateAction::ChatTurnStarted(ChatTurnStartedAction {
            turn_id: turn_id.clone(),
            started_at: now_iso(),
            message: user_message(text),
            queued_message_id: None,
            meta: None,
        });
        self.dispatch(chat, action).await?;
        Ok(turn_id)
    }

    /// Waits until turn `turn_id` is in the chat's history, and answers it.
    pub async fn finished(&mut self, chat: &str, turn_id: &str) -> anyhow::Result<Turn> {
        let (c, t) = (chat.to_owned(), turn_id.to_owned());
        self.until(&format!("turn {turn_id} to end"), move |m| {
            m.chat(&c).is_some_and(|st| st.turns.iter().any(|x| x.id == t))
        })
        .await?;
        self.mirror
            .chat(chat)
            .and_then(|c| c.turns.iter().find(|t| t.id == turn_id).cloned())
            .ok_or_else(|| anyhow!("turn {turn_id} vanished"))
    }

    /// Waits until turn `turn_id` ends, saying no to every question it asks meanwhile (a
    /// sandbox's proxy asking whether the box may reach a host: an agent's own update check or
    /// telemetry); answers the turn and the questions it declined, by their words.
    pub async fn finished_saying_no(&mut self, chat: &str, turn_id: &str) -> anyhow::Result<(Turn, Vec<String>)> {
        let mut declined = Vec::new();
        loop {
            let state = self.mirror.chat(chat);
            if let Some(turn) = state.and_then(|c| c.turns.iter().find(|t| t.id == turn_id)) {
                return Ok((turn.clone(), declined));
            }
            let mut open = state.map(open_questions).unwrap_or_default();
            open.retain(|r| !declined.contains(r));
            for request in open {
                self.answer(chat, &request, None).await?;
                declined.push(request);
            }
            self.next_event(crate::PATIENCE).await.map_err(|e| anyhow!("waiting for turn {turn_id} to end: {e}"))?;
        }
    }

    /// The folder `session` works in (its first working directory), as this client folded it.
    pub fn folder_of(&self, session: &str) -> anyhow::Result<std::path::PathBuf> {
        let dirs = self.mirror.session(session).and_then(|s| s.working_directories.clone()).unwrap_or_default();
        let first = dirs.first().ok_or_else(|| anyhow!("{session} has no folder"))?;
        Ok(std::path::PathBuf::from(first.strip_prefix("file://").unwrap_or(first)))
    }

    /// Sends `text` and waits for the turn to end.
    pub async fn turn(&mut self, chat: &str, text: &str) -> anyhow::Result<Turn> {
        let id = self.send(chat, text).await?;
        self.finished(chat, &id).await
    }

    /// The reason the host gave for refusing this client's action `seq`, or "(accepted)" when it
    /// took it.
    pub async fn refusal(&mut self, seq: i64) -> anyhow::Result<String> {
        loop {
            let found = self
                .envelopes
                .iter()
                .find(|e| e.origin.as_ref().is_some_and(|o| o.client_id == self.client_id && o.client_seq == seq))
                .cloned();
            if let Some(envelope) = found {
                return Ok(envelope.rejection_reason.unwrap_or_else(|| "(accepted)".to_owned()));
            }
            self.next_event(crate::PATIENCE).await?;
        }
    }

    /// Asks the host for a fresh snapshot of `uri` and checks that what this client folded up to
    /// that snapshot's `fromSeq` equals it (after stripping nulls).
    pub async fn check_against_snapshot(&mut self, uri: &str) -> anyhow::Result<()> {
        let answer = self
            .request("subscribe", serde_json::json!({ "channel": uri }))
            .await
            .map_err(|e| anyhow!("fresh subscribe {uri}: {e}"))?;
        let snapshot: Snapshot = serde_json::from_value(answer["snapshot"].clone()).context("snapshot")?;
        // Everything up to fromSeq was sent before the answer; fold exactly that much.
        while let Some(event) = self.try_next() {
            match event {
                SubscriptionEvent::Action(env) => {
                    self.envelopes.push(env.clone());
                    self.held.push_back(env);
                }
                other => self.notifications.push(other),
            }
        }
        self.fold_held(u64::try_from(snapshot.from_seq).unwrap_or(0))?;
        let folded = self.mirror.states.get(uri).ok_or_else(|| anyhow!("not watching {uri}"))?;
        let ours = strip_nulls(serde_json::to_value(folded)?);
        let theirs = strip_nulls(serde_json::to_value(&snapshot.state)?);
        if ours != theirs {
            bail!(
                "the folded state of {uri} differs from the host's snapshot at seq {}:\nfolded:   {}\nsnapshot: {}",
                snapshot.from_seq,
                serde_json::to_string(&ours)?,
                serde_json::to_string(&theirs)?
            );
        }
        self.fold_held(u64::MAX)?;
        Ok(())
    }
}

/// The text of a turn's markdown parts, joined.
pub fn turn_text(turn: &Turn) -> String {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ahp_types::state::ResponsePart::Markdown(m) => Some(m.content.as_str()),
            _ => None,
        })
        .collect()
}

/// Tool calls in the running turn waiting to be allowed: (turn id, tool call id).
pub fn waiting_calls(chat: &ChatState) -> Vec<(String, String)> {
    let Some(turn) = &chat.active_turn else { return Vec::new() };
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ahp_types::state::ResponsePart::ToolCall(tc) => match &tc.tool_call {
                ahp_types::state::ToolCallState::PendingConfirmation(p) => {
                    Some((turn.id.clone(), p.tool_call_id.clone()))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// Questions in the running turn waiting for an answer.
pub fn open_questions(chat: &ChatState) -> Vec<String> {
    let Some(turn) = &chat.active_turn else { return Vec::new() };
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ahp_types::state::ResponsePart::InputRequest(r) if r.response.is_none() => Some(r.request.id.clone()),
            _ => None,
        })
        .collect()
}

impl TestClient {
    /// Allows or denies a waiting tool call.
    pub async fn confirm(&self, chat: &str, turn_id: &str, tool_call_id: &str, approved: bool) -> anyhow::Result<i64> {
        use ahp_types::actions::ChatToolCallConfirmedAction;
        use ahp_types::state::ToolCallConfirmationReason;
        let action = StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
            turn_id: turn_id.to_owned(),
            tool_call_id: tool_call_id.to_owned(),
            meta: None,
            approved,
            confirmed: approved.then_some(ToolCallConfirmationReason::UserAction),
            reason: None,
            edited_tool_input: None,
            user_suggestion: None,
            reason_message: None,
            selected_option_id: Some(if approved { "allow" } else { "deny" }.to_owned()),
        });
        self.dispatch(chat, action).await
    }

    /// Answers a question with text (`Some`) or declines it (`None`).
    pub async fn answer(&self, chat: &str, request_id: &str, text: Option<&str>) -> anyhow::Result<i64> {
        use ahp_types::actions::ChatInputCompletedAction;
        use ahp_types::state::{
            ChatInputAnswer, ChatInputAnswerValue, ChatInputAnswered, ChatInputResponseKind, ChatInputTextAnswerValue,
        };
        let (response, answers) = match text {
            Some(text) => {
                let answer = ChatInputAnswer::Submitted(ChatInputAnswered {
                    value: ChatInputAnswerValue::Text(ChatInputTextAnswerValue { value: text.to_owned() }),
                });
                (ChatInputResponseKind::Accept, Some([("answer".to_owned(), answer)].into_iter().collect()))
            }
            None => (ChatInputResponseKind::Decline, None),
        };
        let action = StateAction::ChatInputCompleted(ChatInputCompletedAction {
            request_id: request_id.to_owned(),
            response,
            answers,
        });
        self.dispatch(chat, action).await
    }

    /// Waits until the chat's running turn has `n` calls waiting to be allowed; answers them.
    pub async fn until_waiting_calls(&mut self, chat: &str, n: usize) -> anyhow::Result<Vec<(String, String)>> {
        let c = chat.to_owned();
        self.until(&format!("{n} calls to wait"), move |m| m.chat(&c).is_some_and(|s| waiting_calls(s).len() == n))
            .await?;
        Ok(self.mirror.chat(chat).map(waiting_calls).unwrap_or_default())
    }

    /// Waits until the chat's running turn has `n` open questions; answers their ids.
    pub async fn until_questions(&mut self, chat: &str, n: usize) -> anyhow::Result<Vec<String>> {
        let c = chat.to_owned();
        self.until(&format!("{n} questions"), move |m| m.chat(&c).is_some_and(|s| open_questions(s).len() == n))
            .await?;
        Ok(self.mirror.chat(chat).map(open_questions).unwrap_or_default())
    }

    /// Starts a turn with `message` (attachments and all); answers its id and the action's client
    /// sequence number.
    pub async fn send_message(&self, chat: &str, message: Message) -> anyhow::Result<(String, i64)> {
        let turn_id = uuid::Uuid::new_v4().to_string();
        let action = StateAction::ChatTurnStarted(ChatTurnStartedAction {
            turn_id: turn_id.clone(),
            started_at: now_iso(),
            message,
            queued_message_id: None,
            meta: None,
        });
        let seq = self.dispatch(chat, action).await?;
        Ok((turn_id, seq))
    }

    /// Waits for the host's echo of this client's action number `seq` and answers it: its
    /// `rejectionReason` says whether it was refused.
    pub async fn echo_of(&mut self, seq: i64) -> anyhow::Result<ActionEnvelope> {
        let mine =
            |e: &ActionEnvelope, id: &str| e.origin.as_ref().is_some_and(|o| o.client_id == id && o.client_seq == seq);
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            self.pump()?;
            if let Some(found) = self.envelopes.iter().find(|e| mine(e, &self.client_id)) {
                return Ok(found.clone());
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                bail!("waited {PATIENCE:?} for the echo of action {seq}");
            }
            let _ = self.next_event(left).await;
        }
    }

    /// Dispatches a pending message (queued or steering).
    pub async fn pending(
        &self,
        chat: &str,
        kind: ahp_types::state::PendingMessageKind,
        id: &str,
        text: &str,
    ) -> anyhow::Result<i64> {
        use ahp_types::actions::ChatPendingMessageSetAction;
        let action = StateAction::ChatPendingMessageSet(ChatPendingMessageSetAction {
            kind,
            id: id.to_owned(),
            message: user_message(text),
        });
        self.dispatch(chat, action).await
    }
}
