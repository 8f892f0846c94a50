//! A client's `dispatchAction`: checked, said to every client with the client's origin (the echo
//! its pending copy waits for), and then handed to the backend where it is one's to act on.
//!
//! A refused action comes back to its sender with `rejectionReason` and changes nothing. An
//! action for a channel that does not exist is ignored, as the spec says.

use ahp_types::actions::{ActionOrigin, ChatPendingMessageRemovedAction, ChatToolCallConfirmedAction, StateAction};
use ahp_types::state::{ChatState, MessageKind, PendingMessageKind, ResponsePart, ToolCallState};
use serde_json::Value;

use super::clients::tool_call_id_of;
use super::core::{action_type, channel_kind, ChannelKind, Committed};
use super::deliver::Sender;
use super::driver::Op;
use super::requests::ConnState;
use super::{Core, Host};

/// Every action type AHP 1.0.0 knows, to tell a malformed known action from an unknown one.
const KNOWN_TYPES: &[&str] = &[
    "root/agentsChanged",
    "root/activeSessionsChanged",
    "root/configChanged",
    "root/terminalsChanged",
    "session/ready",
    "session/creationFailed",
    "session/chatAdded",
    "session/chatRemoved",
    "session/chatUpdated",
    "session/chatsReordered",
    "session/defaultChatChanged",
    "session/titleChanged",
    "session/isReadChanged",
    "session/isArchivedChanged",
    "session/activityChanged",
    "session/changesetsChanged",
    "session/serverToolsChanged",
    "session/activeClientSet",
    "session/activeClientRemoved",
    "session/workingDirectorySet",
    "session/workingDirectoryRemoved",
    "session/workingDirectoryReplaced",
    "session/inputNeededSet",
    "session/inputNeededRemoved",
    "session/customizationsChanged",
    "session/customizationToggled",
    "session/customizationUpdated",
    "session/customizationRemoved",
    "session/mcpServerStateChanged",
    "session/mcpServerStartRequested",
    "session/mcpServerStopRequested",
    "session/mcpServerBackgroundRequested",
    "session/configChanged",
    "session/metaChanged",
    "chat/turnStarted",
    "chat/delta",
    "chat/responsePart",
    "chat/toolCallStart",
    "chat/toolCallDelta",
    "chat/toolCallReady",
    "chat/toolCallConfirmed",
    "chat/toolCallComplete",
    "chat/toolCallResultConfirmed",
    "chat/toolCallContentChanged",
    "chat/toolCallAuthRequired",
    "chat/toolCallAuthResolved",
    "chat/turnComplete",
    "chat/turnCancelled",
    "chat/error",
    "chat/turnResume",
    "chat/activityChanged",
    "chat/backgroundWorkSet",
    "chat/backgroundWorkRemoved",
    "chat/movableChanged",
    "chat/changesetsChanged",
    "chat/canvasesChanged",
    "chat/usage",
    "chat/reasoning",
    "chat/workingDirectorySet",
    "chat/workingDirectoryRemoved",
    "chat/pendingMessageSet",
    "chat/pendingMessageRemoved",
    "chat/queuedMessagesReordered",
    "chat/draftChanged",
    "chat/isReadChanged",
    "chat/isArchivedChanged",
    "chat/inputRequested",
    "chat/inputAnswerChanged",
    "chat/inputCompleted",
    "chat/truncated",
    "chat/turnsLoaded",
    "canvas/stateChanged",
    "changeset/statusChanged",
    "changeset/fileSet",
    "changeset/fileRemoved",
    "changeset/filesReviewChanged",
    "changeset/contentChanged",
    "changeset/operationsChanged",
    "changeset/operationStatusChanged",
    "changeset/cleared",
    "annotations/set",
    "annotations/updated",
    "annotations/removed",
    "annotations/entrySet",
    "annotations/entryRemoved",
    "terminal/data",
    "terminal/input",
    "terminal/resized",
    "terminal/claimed",
    "terminal/titleChanged",
    "terminal/cwdChanged",
    "terminal/exited",
    "terminal/cleared",
    "terminal/commandDetectionAvailable",
    "terminal/commandExecuted",
    "terminal/commandFinished",
    "resourceWatch/changed",
    "automation/createRequested",
    "automation/updateRequested",
    "automation/set",
    "automation/removed",
    "automationRun/lifecycleChanged",
    "automationRun/sessionSet",
    "automationRun/sessionRemoved",
    "automationRun/primarySessionChanged",
    "automationRun/cancelRequested",
];

/// What the host does with a client action once it passed its checks.
enum Then {
    /// Nothing beyond saying it.
    Nothing,
    /// Hand it to the chat's backend.
    Backend(Op),
    /// The answer to a question a host tool asked: hand it to the tool.
    HostAnswer(ahp_types::actions::ChatInputCompletedAction),
    /// A client stopped the running turn.
    Stop(String),
    /// A queued message arrived: start it if the chat is free.
    StartQueued,
    /// A client's turn: delivered (`deliver.rs`), started or queued there.
    Deliver,
    /// A steering message arrived: hand it to the running turn.
    Steer,
    /// A session config change: hand each key to every chat's backend.
    Config(Vec<(String, Value)>),
    /// The session's active clients changed: its tools change with them.
    ToolsChanged,
    /// The daemon's settings were pushed: (live keys, keys that apply after a restart).
    RootConfig(Vec<(String, Value)>, Vec<(String, Value)>),
    /// A client completed a call of its tool: the backend waiting on it gets the result.
    ClientCompleted(String, ahp_types::state::ToolCallResult),
    /// A client marked a changeset's files reviewed: kept across recomputations.
    Reviewed(Vec<String>, bool),
    /// A client truncated the chat: the backend goes on from the kept turns.
    Truncate(super::edits::Truncation),
    /// A client resumed the chat's failed turn.
    ResumeTurn(String),
    /// A person answered a question of a turn whose backend lost it.
    Parked(protocol::Decision),
    /// A client typed into a terminal: its pty gets the bytes.
    TerminalInput(String),
    /// A client resized a terminal: its pty takes the size (columns, rows).
    TerminalResize(u16, u16),
    /// A customization was toggled: the client rules that applied before it.
    Toggled(Vec<String>),
    /// A client asked to start (true) or stop an MCP server.
    McpServer(String, bool),
    /// A client's request to the automations feature (create, update, remove, cancel a run),
    /// checked by it already: it acts on it once the request is said.
    Automation,
}

impl Host {
    /// Handles `dispatchAction` params from a connection.
    pub(super) fn dispatch_action(&self, conn: &ConnState, params: Value) {
        let channel = params.get("channel").and_then(Value::as_str).map(str::to_owned);
        let client_seq = params.get("clientSeq").and_then(Value::as_i64);
        let (Some(channel), Some(client_seq)) = (channel, client_seq) else {
            tracing::debug!(conn = conn.id, "dispatchAction without a channel or clientSeq; ignored");
            return;
        };
        let Some(client_id) = conn.client_id.clone() else {
            return;
        };
        let origin = ActionOrigin { client_id, client_seq };
        let raw = params.get("action").cloned().unwrap_or(Value::Null);
        let action: StateAction = match serde_json::from_value(raw.clone()) {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(conn = conn.id, error = %e, "dispatchAction with an action that does not decode; ignored");
                return;
            }
        };
        let mut core = self.lock();
        if !self.ensure_loaded(&mut core, &channel) {
            tracing::debug!(conn = conn.id, channel, "an action for a channel that does not exist; ignored");
            return;
        }
        if let StateAction::Unknown(value) = &action {
            let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
            let reason = if KNOWN_TYPES.contains(&kind) {
                format!("{kind} is missing a required field, or one has the wrong type")
            } else if kind.is_empty() {
                "An action needs a \"type\"".to_owned()
            } else {
                format!("{kind} is not an action this host knows")
            };
            core.ch.reject(conn.id, &channel, &action, origin, &reason);
            return;
        }
        core.refresh_users();
        let grant = super::grants::action_grant(&action);
        if !core.allows(&conn.principal, grant) {
            let reason = super::grants::refusal(&conn.principal, grant);
            core.ch.reject(conn.id, &channel, &action, origin, &reason);
            return;
        }
        if core.is_mirrored(&channel) {
            // Another host runs it: relayed as sent; its echo or refusal answers (`mirrors.rs`).
            let remotes = core.remotes.clone();
            drop(core);
            if let Some(remotes) = remotes {
                remotes.action(self, conn.id, &channel, action, origin);
            }
            return;
        }
        let new_turn = matches!(action, StateAction::ChatTurnStarted(_) | StateAction::ChatPendingMessageSet(_));
        if new_turn && core.store.trouble().is_some() {
            // A new turn while the store cannot write: it is refused unless space came back.
            core.retry_store();
        }
        let then = match check(&core, conn, &channel, &action) {
            Ok(then) => then,
            Err(reason) => {
                core.ch.reject(conn.id, &channel, &action, origin, &reason);
                return;
            }
        };
        self.apply_client_action(&mut core, conn, &channel, action, origin, then);
    }

    fn apply_client_action(
        &self,
        core: &mut Core,
        conn: &ConnState,
        channel: &str,
        action: StateAction,
        origin: ActionOrigin,
        then: Then,
    ) {
        if let StateAction::ChatTurnStarted(start) = action {
            // A client's turn: said as the client sent it, with its origin, then handed to the
            // backend by the turn engine, or queued (`deliver.rs`).
            let sender = Sender::Client { conn: conn.id, origin: origin.clone(), person: conn.principal.as_sender() };
            if let Err(reason) = core.deliver(channel, start.clone(), sender) {
                core.ch.reject(conn.id, channel, &StateAction::ChatTurnStarted(start), origin, &reason);
            }
            return;
        }
        // Who left a message is what the tool calls of its turn may do (seed 000 "Grants").
        if let (StateAction::ChatPendingMessageSet(pending), Some(sender)) = (&action, conn.principal.as_sender()) {
            core.note_sender(channel, &pending.id, sender);
        }
        if matches!(then, Then::Stop(_)) {
            self.drop_pending(core, channel);
        }
        // The automations feature acts on the request as it was said.
        let echoed = if matches!(then, Then::Automation) { Some(action.clone()) } else { None };
        let decided = match &action {
            StateAction::ChatToolCallConfirmed(a) => Some((a.tool_call_id.clone(), a.approved)),
            _ => None,
        };
        let committed = core.apply(channel, action, Some(origin), Some(conn.id));
        if !matches!(committed, Committed::Sent { .. }) {
            return;
        }
        let echoed = echoed.unwrap_or(StateAction::Unknown(Value::Null));
        if let Some((tool_call_id, approved)) = decided {
            // A person's decision: a call the host holds goes on (or not), and an allowed one
            // is not held again when it reaches the session's endpoint.
            core.questions.decided(channel, &tool_call_id, approved);
        }
        match then {
            Then::Nothing | Then::Deliver => {}
            Then::HostAnswer(completed) => core.questions.answer(channel, &completed),
            Then::StartQueued => core.start_next(channel),
            Then::Steer => {
                core.offer_steering(channel);
                core.start_next(channel);
            }
            Then::ToolsChanged => self.tools_changed(core, channel),
            Then::RootConfig(live, restart) => self.root_config_pushed(core, live, restart),
            Then::ClientCompleted(id, result) => self.client_completed(core, channel, &id, &result),
            Then::Reviewed(files, reviewed) => {
                let event = super::ports::Event::Reviewed { changeset: channel.to_owned(), files, reviewed };
                core.workspaces.clone().event(core, event);
            }
            Then::Backend(op) => core.to_backend(channel, op),
            Then::Stop(turn_id) => {
                // A `!` command's turn is the host's: its process ends; the backend never ran it.
                if !core.stop_command(channel, &turn_id) {
                    core.stop(channel, turn_id);
                }
            }
            Then::Truncate(truncation) => core.truncated(channel, truncation),
            Then::ResumeTurn(turn_id) => core.resume_turn(channel, &turn_id, Vec::new()),
            Then::Parked(decision) => core.parked_answer(channel, decision),
            Then::TerminalInput(data) => {
                if let Some(feature) = core.terminals_feature() {
                    feature.input(channel, &data);
                }
            }
            Then::TerminalResize(cols, rows) => {
                if let Some(feature) = core.terminals_feature() {
                    feature.resize(channel, cols, rows);
                }
            }
            Then::Toggled(before) => self.rules_toggled(core, channel, &before),
            Then::McpServer(id, run) => self.mcp_server_requested(core, channel, &id, run),
            Then::Automation => {
                if let Some(feature) = core.automations.clone() {
                    feature.accepted(self, core, &conn.principal, channel, &echoed);
                }
            }
            Then::Config(changes) => {
                let chats: Vec<String> = core.backend_chats_of(channel);
                for chat in chats {
                    if let Some(meta) = core.chats.get(&chat) {
                        for (key, value) in &changes {
                            let _ = meta.driver.send(Op::SetConfig { key: key.clone(), value: value.clone() });
                        }
                    }
                }
            }
        }
    }

    /// A stop drops what waits behind the turn it stops: the queue and the steering message.
    fn drop_pending(&self, core: &mut Core, chat: &str) {
        let Some(state) = core.ch.chats.get(chat) else {
            return;
        };
        let mut removals: Vec<(PendingMessageKind, String)> =
            state.queued_messages.iter().flatten().map(|m| (PendingMessageKind::Queued, m.id.clone())).collect();
        if let Some(s) = &state.steering_message {
            removals.push((PendingMessageKind::Steering, s.id.clone()));
        }
        for (kind, id) in removals {
            let action = StateAction::ChatPendingMessageRemoved(ChatPendingMessageRemovedAction { kind, id });
            core.apply(chat, action, None, None);
        }
    }
}

fn running_turn(state: &ChatState) -> Option<&str> {
    state.active_turn.as_ref().map(|t| t.id.as_str())
}

fn tool_call<'a>(state: &'a ChatState, turn_id: &str, tool_call_id: &str) -> Option<&'a ToolCallState> {
    let turn = state.active_turn.as_ref().filter(|t| t.id == turn_id)?;
    turn.response_parts.iter().find_map(|p| match p {
        ResponsePart::ToolCall(tc) if tool_call_id_of(&tc.tool_call) == Some(tool_call_id) => Some(&tc.tool_call),
        _ => None,
    })
}

fn open_request(state: &ChatState, request_id: &str) -> bool {
    state.active_turn.as_ref().is_some_and(|t| {
        t.response_parts
            .iter()
            .any(|p| matches!(p, ResponsePart::InputRequest(r) if r.request.id == request_id && r.response.is_none()))
    })
}

fn user_message(message: &ahp_types::state::Message) -> Result<(), String> {
    if message.origin.kind == MessageKind::User {
        Ok(())
    } else {
        Err("A client may only send messages whose origin is \"user\"".to_owned())
    }
}

/// Checks a client's action against the host's state; answers what to do after saying it, or the
/// reason it is refused.
fn check(core: &Core, conn: &ConnState, channel: &str, action: &StateAction) -> Result<Then, String> {
    let kind = channel_kind(channel);
    let scope = action_type(action);
    let prefix = scope.split('/').next().unwrap_or("");
    let expected = match kind {
        Some(ChannelKind::Root) => "root",
        Some(ChannelKind::Session) => "session",
        Some(ChannelKind::Chat) => "chat",
        Some(ChannelKind::Annotations) => "annotations",
        Some(ChannelKind::Changeset) => "changeset",
        Some(ChannelKind::Terminal) => "terminal",
        Some(ChannelKind::Automations) => "automation",
        Some(ChannelKind::AutomationRun) => "automationRun",
        None => "",
    };
    if prefix != expected {
        return Err(format!("{scope} does not belong on the {expected} channel {channel}"));
    }
    if !core.ch.is_subscribed(conn.id, channel) && !answers_a_request(action) {
        return Err(format!("Subscribe to {channel} before dispatching actions to it"));
    }
    match action {
        StateAction::RootConfigChanged(a) => {
            let (live, restart) =
                super::rootconfig::check_push(&a.config, a.replace.unwrap_or(false)).map_err(|e| e.to_string())?;
            Ok(Then::RootConfig(live, restart))
        }
        StateAction::SessionTitleChanged(a) => {
            if a.title.trim().is_empty() {
                Err("A session's title must not be empty".to_owned())
            } else {
                Ok(Then::Nothing)
            }
        }
        StateAction::SessionIsReadChanged(_) | StateAction::SessionIsArchivedChanged(_) => Ok(Then::Nothing),
        StateAction::SessionDefaultChatChanged(a) => {
            let in_catalogue = match &a.default_chat {
                None => true,
                Some(c) => core.ch.sessions.get(channel).is_some_and(|s| s.chats.iter().any(|x| &x.resource == c)),
            };
            if in_catalogue {
                Ok(Then::Nothing)
            } else {
                Err("The default chat must be one of the session's chats".to_owned())
            }
        }
        StateAction::SessionConfigChanged(a) => {
            check_session_config(core, channel, &a.config, a.replace.unwrap_or(false))
        }
        StateAction::SessionActiveClientSet(a) => {
            if conn.client_id.as_deref() == Some(a.active_client.client_id.as_str()) {
                Ok(Then::ToolsChanged)
            } else {
                Err("A client can only make itself active, under its own clientId".to_owned())
            }
        }
        StateAction::SessionActiveClientRemoved(a) => {
            if conn.client_id.as_deref() == Some(a.client_id.as_str()) {
                Ok(Then::ToolsChanged)
            } else {
                Err("A client can only remove itself from a session's active clients".to_owned())
            }
        }
        StateAction::SessionCustomizationToggled(a) => {
            shown_customization(core, channel, &a.id, false).map(|_| Then::Toggled(core.client_rule_bodies(channel)))
        }
        StateAction::SessionMcpServerStartRequested(a) => {
            shown_customization(core, channel, &a.id, true).map(|_| Then::McpServer(a.id.clone(), true))
        }
        StateAction::SessionMcpServerStopRequested(a) => {
            shown_customization(core, channel, &a.id, true).map(|_| Then::McpServer(a.id.clone(), false))
        }
        StateAction::SessionMcpServerBackgroundRequested(
            ahp_types::actions::SessionMcpServerBackgroundRequestedAction { id, .. },
        ) => shown_customization(core, channel, id, true),
        StateAction::SessionWorkingDirectorySet(_)
        | StateAction::SessionWorkingDirectoryRemoved(_)
        | StateAction::SessionWorkingDirectoryReplaced(_) => {
            Err("This session's agent works in one directory; it cannot take another".to_owned())
        }
        StateAction::ChatTurnStarted(a) => {
            // What a client may say of its turn; where it goes is `deliver.rs`'s.
            let state = core.ch.chats.get(channel).ok_or("no such chat")?;
            user_message(&a.message)?;
            if a.turn_id.trim().is_empty() {
                return Err("A turn needs an id".to_owned());
            }
            if state.turns.iter().any(|t| t.id == a.turn_id) {
                return Err(format!("This chat has a turn {} already", a.turn_id));
            }
            if a.started_at.parse::<jiff::Timestamp>().is_err() {
                return Err(format!("startedAt must be an RFC 3339 timestamp, not {:?}", a.started_at));
            }
            Ok(Then::Deliver)
        }
        StateAction::ChatTurnCancelled(a) => {
            let state = core.ch.chats.get(channel).ok_or("no such chat")?;
            // A stop naming another turn, or none running, goes to every client as the client's
            // own action and reaches no backend (seed 004).
            Ok(if running_turn(state) == Some(a.turn_id.as_str()) {
                Then::Stop(a.turn_id.clone())
            } else {
                Then::Nothing
            })
        }
        StateAction::ChatToolCallConfirmed(a) => {
            let state = core.ch.chats.get(channel).ok_or("no such chat")?;
            match tool_call(state, &a.turn_id, &a.tool_call_id) {
                // A host tool's call the host holds itself (`questions.rs`): no backend waits on it.
                Some(ToolCallState::PendingConfirmation(_)) if core.questions.holds_call(channel, &a.tool_call_id) => {
                    Ok(Then::Nothing)
                }
                Some(ToolCallState::PendingConfirmation(_)) if core.is_parked(channel, &a.turn_id) => {
                    let (tool_name, tool_input) =
                        super::edits::pending_call(state, &a.tool_call_id).unwrap_or_default();
                    Ok(Then::Parked(protocol::Decision::Confirmation {
                        tool_call_id: a.tool_call_id.clone(),
                        tool_name,
                        tool_input: a.edited_tool_input.clone().or(tool_input),
                        approved: a.approved,
                        option_id: a.selected_option_id.clone(),
                    }))
                }
                Some(ToolCallState::PendingConfirmation(_)) => Ok(Then::Backend(confirm_op(channel, a))),
                Some(_) => Err(format!("Tool call {} is not waiting to be allowed", a.tool_call_id)),
                None => Err(format!("There is no tool call {} in the running turn", a.tool_call_id)),
            }
        }
        StateAction::ChatToolCallResultConfirmed(a) => {
            let state = core.ch.chats.get(channel).ok_or("no such chat")?;
            match tool_call(state, &a.turn_id, &a.tool_call_id) {
                Some(ToolCallState::PendingResultConfirmation(_)) => Ok(Then::Nothing),
                _ => Err(format!("Tool call {} has no result waiting to be confirmed", a.tool_call_id)),
            }
        }
        StateAction::ChatToolCallComplete(a) => {
            check_owner(core, conn, channel, &a.turn_id, &a.tool_call_id)?;
            Ok(Then::ClientCompleted(a.tool_call_id.clone(), a.result.clone()))
        }
        StateAction::ChatToolCallContentChanged(a) => {
            check_owner(core, conn, channel, &a.turn_id, &a.tool_call_id)?;
            Ok(Then::Nothing)
        }
        StateAction::ChatInputAnswerChanged(a) => {
            let state = core.ch.chats.get(channel).ok_or("no such chat")?;
            if open_request(state, &a.request_id) {
                Ok(Then::Nothing)
            } else {
                Err(format!("There is no open question {} in the running turn", a.request_id))
            }
        }
        StateAction::ChatInputCompleted(a) => {
            let state = core.ch.chats.get(channel).ok_or("no such chat")?;
            if !open_request(state, &a.request_id) {
                return Err(format!("There is no open question {} in the running turn", a.request_id));
            }
            if core.questions.holds(channel, &a.request_id) {
                return Ok(Then::HostAnswer(a.clone()));
            }
            let turn_id = running_turn(state).unwrap_or_default().to_owned();
            if core.is_parked(channel, &turn_id) {
                return Ok(Then::Parked(protocol::Decision::Answer {
                    request_id: a.request_id.clone(),
                    response: a.response,
                    answers: a.answers.clone().unwrap_or_default(),
                }));
            }
            Ok(Then::Backend(Op::Answer(protocol::AnswerParams {
                chat: channel.to_owned(),
                turn_id,
                request_id: a.request_id.clone(),
                response: a.response,
                answers: a.answers.clone().unwrap_or_default(),
            })))
        }
        StateAction::ChatPendingMessageSet(a) => {
            super::edits::read_write(core.ch.chats.get(channel).ok_or("no such chat")?)?;
            user_message(&a.message)?;
            core.check_attachments(channel, &a.message)?;
            // A message left for a turn is a turn to come: refused as one while nothing is kept.
            if let Some(sentence) = core.store.cannot_write() {
                return Err(sentence);
            }
            Ok(match a.kind {
                PendingMessageKind::Queued => Then::StartQueued,
                // Refused up front where the backend cannot take a message mid-turn, so the
                // message is not left waiting for a turn that never reads it.
                PendingMessageKind::Steering if !core.abilities(channel).steering => {
                    let provider = core.chat_provider(channel).unwrap_or_default();
                    return Err(format!(
                        "The {provider} agent cannot take a message while it works; queue it for the next turn instead"
                    ));
                }
                PendingMessageKind::Steering => Then::Steer,
            })
        }
        StateAction::ChatPendingMessageRemoved(a) => {
            let state = core.ch.chats.get(channel).ok_or("no such chat")?;
            let exists = match a.kind {
                PendingMessageKind::Steering => state.steering_message.as_ref().is_some_and(|m| m.id == a.id),
                PendingMessageKind::Queued => state.queued_messages.iter().flatten().any(|m| m.id == a.id),
            };
            if !exists {
                return Err(format!("There is no pending message {}", a.id));
            }
            Ok(match a.kind {
                PendingMessageKind::Steering => Then::Backend(Op::Withdraw { id: a.id.clone() }),
                PendingMessageKind::Queued => Then::Nothing,
            })
        }
        StateAction::ChatQueuedMessagesReordered(_)
        | StateAction::ChatIsReadChanged(_)
        | StateAction::ChatIsArchivedChanged(_) => Ok(Then::Nothing),
        StateAction::ChatDraftChanged(a) => {
            super::edits::read_write(core.ch.chats.get(channel).ok_or("no such chat")?)?;
            if let Some(draft) = &a.draft {
                user_message(draft)?;
            }
            Ok(Then::Backend(Op::SetDraft(a.draft.clone())))
        }
        StateAction::ChatTurnResume(a) => {
            core.check_resume(channel, &a.turn_id)?;
            Ok(Then::ResumeTurn(a.turn_id.clone()))
        }
        StateAction::ChatTruncated(a) => Ok(Then::Truncate(core.check_truncation(channel, a.turn_id.as_deref())?)),
        StateAction::ChatWorkingDirectorySet(_) | StateAction::ChatWorkingDirectoryRemoved(_) => {
            Err("A chat works in its session's directory; it cannot take another".to_owned())
        }
        StateAction::AnnotationsSet(_)
        | StateAction::AnnotationsUpdated(_)
        | StateAction::AnnotationsRemoved(_)
        | StateAction::AnnotationsEntrySet(_)
        | StateAction::AnnotationsEntryRemoved(_) => Ok(Then::Nothing),
        StateAction::ChangesetFilesReviewChanged(a) => Ok(Then::Reviewed(a.files.clone(), a.reviewed)),
        StateAction::TerminalInput(_)
        | StateAction::TerminalResized(_)
        | StateAction::TerminalClaimed(_)
        | StateAction::TerminalTitleChanged(_)
        | StateAction::TerminalCleared(_) => check_terminal(core, conn, channel, action),
        StateAction::AutomationCreateRequested(_)
        | StateAction::AutomationUpdateRequested(_)
        | StateAction::AutomationRemoved(_)
        | StateAction::AutomationRunCancelRequested(_) => {
            let feature = core.automations.clone().ok_or("This host keeps no automations")?;
            feature.check(core, &conn.principal, channel, action)?;
            Ok(Then::Automation)
        }
        _ => Err(format!("{scope} is the host's to say; a client cannot dispatch it")),
    }
}

/// The largest terminal a client may ask for, in columns and in rows.
const MAX_TERMINAL_SIDE: i64 = 4096;

/// A client's terminal action: input and a size reach a running terminal only; a claim moves
/// only from whoever holds it, to the client itself or to a session it may write to.
fn check_terminal(core: &Core, conn: &ConnState, channel: &str, action: &StateAction) -> Result<Then, String> {
    use ahp_types::state::TerminalClaim;
    let state = core.ch.terminals.get(channel).ok_or("no such terminal")?;
    let running = super::terminal_channels::is_running(state);
    match action {
        StateAction::TerminalInput(a) if running => Ok(Then::TerminalInput(a.data.clone())),
        StateAction::TerminalResized(a) if running => {
            let side = |n: i64| u16::try_from(n).ok().filter(|n| (1..=MAX_TERMINAL_SIDE).contains(&i64::from(*n)));
            match (side(a.cols), side(a.rows)) {
                (Some(cols), Some(rows)) => Ok(Then::TerminalResize(cols, rows)),
                _ => Err(format!("A terminal's columns and rows must each be between 1 and {MAX_TERMINAL_SIDE}")),
            }
        }
        StateAction::TerminalInput(_) | StateAction::TerminalResized(_) => {
            Err(format!("The terminal at {channel} has exited; it takes no input and no size"))
        }
        StateAction::TerminalClaimed(a) => {
            let holds = match &state.claim {
                TerminalClaim::Client(c) => conn.client_id.as_deref() == Some(c.client_id.as_str()),
                TerminalClaim::Session(_) => core.allows(&conn.principal, "session:write"),
            };
            if !holds {
                return Err("Only the client that holds a terminal's claim may hand it on".to_owned());
            }
            let TerminalClaim::Session(to) = &a.claim else { return Ok(Then::Nothing) };
            if !core.ch.sessions.get(&to.session).is_some_and(|s| s.chats.iter().any(|c| c.resource == to.chat)) {
                return Err(format!("{} is not a chat of a session {} this host holds", to.chat, to.session));
            }
            core.require(&conn.principal, "session:write").map_err(|e| e.message)?;
            // A session's terminal runs inside its folder.
            let folder = core.sessions.get(&to.session).and_then(|m| m.working_directory.as_ref());
            let cwd = state.cwd.as_deref().and_then(super::catalog::path_of);
            match (folder, cwd) {
                (Some(folder), Some(cwd))
                    if !cwd.starts_with(std::fs::canonicalize(folder).unwrap_or(folder.clone())) =>
                {
                    Err(format!("The terminal runs in {}, outside {}'s folders", cwd.display(), to.session))
                }
                _ => Ok(Then::Nothing),
            }
        }
        StateAction::TerminalTitleChanged(a) if a.title.trim().is_empty() => {
            Err("A terminal's title must not be empty".to_owned())
        }
        _ => Ok(Then::Nothing),
    }
}

/// A toggle or an MCP server request must name what the session shows: otherwise it would be
/// echoed and change nothing, which a client would take for done. `mcp` asks for an MCP server.
fn shown_customization(core: &Core, session: &str, id: &str, mcp: bool) -> Result<Then, String> {
    use ahp_types::state::{ChildCustomization, Customization};
    let list = core.ch.sessions.get(session).and_then(|s| s.customizations.as_deref()).unwrap_or_default();
    let found = list.iter().find_map(|c| match c {
        Customization::McpServer(m) if m.id == id => Some(true),
        Customization::Plugin(p) if p.id == id => Some(false),
        Customization::Directory(d) if d.id == id => Some(false),
        Customization::Plugin(p) => child_is_mcp(p.children.as_deref(), id),
        Customization::Directory(d) => child_is_mcp(d.children.as_deref(), id),
        _ => None,
    });
    fn child_is_mcp(children: Option<&[ChildCustomization]>, id: &str) -> Option<bool> {
        children.unwrap_or_default().iter().find_map(|c| match c {
            ChildCustomization::McpServer(m) if m.id == id => Some(true),
            ChildCustomization::Agent(x) if x.id == id => Some(false),
            ChildCustomization::Skill(x) if x.id == id => Some(false),
            ChildCustomization::Prompt(x) if x.id == id => Some(false),
            ChildCustomization::Rule(x) if x.id == id => Some(false),
            ChildCustomization::Hook(x) if x.id == id => Some(false),
            _ => None,
        })
    }
    match found {
        Some(is_mcp) if is_mcp || !mcp => Ok(Then::Nothing),
        Some(_) => Err(format!("Customization {id} of this session is not an MCP server")),
        None if mcp => Err(format!(
            "This session has no MCP server {id}; its MCP servers are those its state lists under customizations"
        )),
        None => Err(format!(
            "This session has no customization {id}; what it has is listed under its state's customizations"
        )),
    }
}

/// Only the client that runs a tool call may complete it (or change its content).
fn check_owner(core: &Core, conn: &ConnState, chat: &str, turn_id: &str, tool_call_id: &str) -> Result<(), String> {
    let state = core.ch.chats.get(chat).ok_or("no such chat")?;
    if !matches!(tool_call(state, turn_id, tool_call_id), Some(ToolCallState::Running(_))) {
        return Err(format!("Tool call {tool_call_id} is not running in the running turn"));
    }
    match core.client_call_owner(chat, tool_call_id) {
        Some(owner) if conn.client_id.as_deref() == Some(owner) => Ok(()),
        Some(owner) => Err(format!("Only {owner}, the client that runs tool call {tool_call_id}, may complete it")),
        None => Err(format!("Tool call {tool_call_id} is not a client's; only its backend completes it")),
    }
}

/// Answers to something a session asks may come from a client that watches the session but not
/// the chat (AHP: clients may answer without subscribing to the chat).
fn answers_a_request(action: &StateAction) -> bool {
    matches!(
        action,
        StateAction::ChatToolCallConfirmed(_)
            | StateAction::ChatToolCallResultConfirmed(_)
            | StateAction::ChatInputAnswerChanged(_)
            | StateAction::ChatInputCompleted(_)
            | StateAction::ChatToolCallComplete(_)
            | StateAction::ChatToolCallContentChanged(_)
    )
}

fn confirm_op(chat: &str, a: &ChatToolCallConfirmedAction) -> Op {
    Op::Confirm(protocol::ConfirmParams {
        chat: chat.to_owned(),
        turn_id: a.turn_id.clone(),
        tool_call_id: a.tool_call_id.clone(),
        approved: a.approved,
        option_id: a.selected_option_id.clone(),
        decision_source: a
            .confirmed
            .as_ref()
            .and_then(|c| serde_json::to_value(c).ok())
            .and_then(|v| v.as_str().map(str::to_owned)),
        edited_tool_input: a.edited_tool_input.clone(),
    })
}

fn check_session_config(
    core: &Core,
    session: &str,
    config: &ahp_types::common::JsonObject,
    replace: bool,
) -> Result<Then, String> {
    if replace {
        return Err("A client may change a session's settings key by key, not replace them all".to_owned());
    }
    let provider = core.sessions.get(session).map(|m| m.provider.clone()).ok_or("no such session")?;
    let schema = core.agent(&provider).and_then(|a| a.schema.clone()).ok_or("the agent has not started")?;
    let mut changes = Vec::new();
    for (key, value) in config {
        let property = schema
            .schema
            .properties
            .get(key)
            .ok_or_else(|| format!("Session configuration '{key}' is not writable."))?;
        if property.session_mutable != Some(true) {
            return Err(format!("Session configuration '{key}' is not writable."));
        }
        super::catalog::check_config_value(&schema, key, value).map_err(|e| e.message)?;
        changes.push((key.clone(), value.clone()));
    }
    Ok(Then::Config(changes))
}
