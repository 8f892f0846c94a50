//! A client's tools (seed 000 "A client's tools"): announced when the client becomes active in a
//! session, offered to the model as `<clientId>__<name>`, run by that client and by nobody else,
//! and bounded by the parent (`crate::bounds`) — a call past `clientToolTimeoutMs` is failed, a
//! successful result is capped as a host tool's is, and a client whose connections all closed
//! keeps its place and its calls for `clientToolCallDisconnectTimeoutMs`, after which each call it
//! owes is failed in VS Code's words.

use std::collections::HashMap;

use ahp_types::actions::{ChatToolCallCompleteAction, SessionActiveClientRemovedAction, StateAction};
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    ResponsePart, SessionActiveClient, ToolCallClientContributor, ToolCallContributor, ToolCallResult, ToolCallState,
    ToolResultContent, ToolResultTextContent,
};
use protocol::{ToolOutcome, ToolSpec};
use serde_json::Value;
use tokio::sync::oneshot;

use super::core::{channel_kind, ChannelKind};
use super::driver::Op;
use super::{ClientCall, Core, Host};
use crate::bounds::{seconds, Bound, CallKind, Expired};

/// True for a name a model can call: letters, digits, `_` and `-`.
pub fn valid_tool_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The name a client's tool is offered under.
pub fn offered_name(client_id: &str, name: &str) -> String {
    format!("{client_id}__{name}")
}

fn usable(client: &SessionActiveClient) -> bool {
    !client.client_id.is_empty() && valid_tool_name(&client.client_id)
}

impl Core {
    /// The clients' tools a session offers, as specs (owner and drawn name set).
    pub fn client_tool_specs(&self, session: &str) -> Vec<ToolSpec> {
        let Some(state) = self.ch.sessions.get(session) else { return Vec::new() };
        let mut specs = Vec::new();
        for client in &state.active_clients {
            if !usable(client) {
                if !client.tools.is_empty() {
                    tracing::warn!(session, client = %client.client_id, "a client with no usable id announced tools; they are not offered");
                }
                continue;
            }
            for tool in &client.tools {
                if !valid_tool_name(&tool.name) {
                    tracing::warn!(session, client = %client.client_id, tool = %tool.name, "a client's tool name is not letters, digits, _ or -; it is not offered");
                    continue;
                }
                let mut definition = tool.clone();
                definition.name = offered_name(&client.client_id, &tool.name);
                specs.push(ToolSpec {
                    definition,
                    owner: Some(client.client_id.clone()),
                    display_name: Some(tool.name.clone()),
                    defer_loading: false,
                    effects: None,
                });
            }
        }
        specs
    }

    /// The client and bare name behind an offered client tool name, if a client in the session
    /// offers it now (never a stale owner: the active clients as they are now decide).
    pub fn client_tool(&self, session: &str, offered: &str) -> Option<(String, String)> {
        self.client_tool_specs(session)
            .into_iter()
            .find(|s| s.definition.name == offered)
            .and_then(|s| Some((s.owner?, s.display_name?)))
    }

    /// Tool call ids in a chat waiting for a client, with the client each waits for.
    pub fn client_call_owners(&self, chat: &str) -> HashMap<String, String> {
        self.chats
            .get(chat)
            .map(|m| m.client_calls.iter().map(|(id, c)| (id.clone(), c.owner.clone())).collect())
            .unwrap_or_default()
    }

    /// The client that owes the tool call `id` in `chat`.
    pub fn client_call_owner(&self, chat: &str, id: &str) -> Option<&str> {
        self.chats.get(chat)?.client_calls.get(id).map(|c| c.owner.as_str())
    }

    /// Clients whose connections all closed and whose grace period runs now, by session.
    pub fn clients_away(&self) -> usize {
        self.grace.keys().filter(|(session, client)| !self.client_present(session, client)).count()
    }

    /// True while a connection holding `client_id` watches `session`.
    fn client_present(&self, session: &str, client_id: &str) -> bool {
        self.ch
            .subscribers_of(session)
            .into_iter()
            .any(|id| self.ch.conn(id).and_then(|c| c.client_id.as_deref()) == Some(client_id))
    }
}

fn text_of(content: &[ToolResultContent]) -> String {
    content
        .iter()
        .filter_map(|c| match c {
            ToolResultContent::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn error_text(error: &Option<Value>) -> Option<String> {
    error.as_ref().map(|e| match e {
        Value::String(s) => s.clone(),
        Value::Object(o) => {
            o.get("message").and_then(Value::as_str).map(str::to_owned).unwrap_or_else(|| e.to_string())
        }
        other => other.to_string(),
    })
}

/// What the backend is told of a call a client completed.
pub fn outcome_of(result: &ToolCallResult) -> ToolOutcome {
    let content = result.content.clone().unwrap_or_default();
    let mut text = text_of(&content);
    let error = error_text(&result.error);
    if text.is_empty() {
        text = error.clone().unwrap_or_else(|| result.past_tense_message.as_text().to_owned());
    }
    ToolOutcome {
        success: result.success,
        text,
        content,
        past_tense_message: Some(result.past_tense_message.as_text().to_owned()),
        error,
    }
}

impl Host {
    /// Runs a client's tool a model called in `chat`: reported against its owner, answered when
    /// the owner completes it, when its time runs out, or when the owner is gone.
    pub async fn run_client_tool(
        &self,
        chat: &str,
        tool_call_id: Option<String>,
        offered: &str,
        input: Value,
    ) -> ToolOutcome {
        let (rx, id, name, owner, timeout_ms) = {
            let mut core = self.lock();
            let Some(session) = core.chats.get(chat).map(|m| m.session.clone()) else {
                return ToolOutcome::failed(format!("There is no chat {chat}."));
            };
            let Some((owner, name)) = core.client_tool(&session, offered) else {
                return ToolOutcome::failed(format!("No tool named {offered} is offered in this session."));
            };
            let Some(turn_id) = core.ch.chats.get(chat).and_then(|c| c.active_turn.as_ref().map(|t| t.id.clone()))
            else {
                return ToolOutcome::failed(format!("{name} was called with no turn running in {chat}."));
            };
            let id = self.ensure_client_call_part(&mut core, chat, &turn_id, tool_call_id, &owner, &name, &input);
            let (tx, rx) = oneshot::channel();
            if let Some(meta) = core.chats.get_mut(chat) {
                meta.client_calls.insert(
                    id.clone(),
                    ClientCall { owner: owner.clone(), name: name.clone(), turn_id, waiter: Some(tx) },
                );
            }
            core.sync_input_needed(chat);
            (rx, id, name, owner, self.config().client_tool_timeout_ms)
        };
        // Bounded from here, its dispatch: past its deadline it is failed as its owner's turn shows
        // it (and the answer it gets is that failure, or its owner's, if that came first). The
        // wait is the host's own task, so the deadline holds even for a caller that went away
        // (an MCP request dropped mid-call).
        let bound = Bound::of(CallKind::ClientTool, timeout_ms);
        let stopped = format!("{name} was stopped before {owner} completed it");
        let (answered, answer) = oneshot::channel();
        let host = self.clone();
        let chat = chat.to_owned();
        self.spawn("client tool call", async move {
            let mut rx = rx;
            let outcome = match bound.within(&host.config().clock, &mut rx).await {
                Ok(answer) => answer.ok(),
                Err(Expired(deadline)) => {
                    let error = format!("{name} got no answer from {owner} in {}", seconds(deadline));
                    host.fail_client_call(&mut host.lock(), &chat, &id, &error, None);
                    rx.await.ok()
                }
            };
            let _ = answered.send(outcome.map(|o| bound.cap(o)));
        });
        answer.await.ok().flatten().unwrap_or_else(|| ToolOutcome::failed(stopped))
    }

    /// Makes sure the running turn shows the call, drawn under the client's own name, with the
    /// client as its contributor; answers the call's id. A backend that said the call already
    /// (its id given) keeps it; one reached through `/ahp-mcp` without an id gets one minted here.
    #[allow(clippy::too_many_arguments)]
    fn ensure_client_call_part(
        &self,
        core: &mut Core,
        chat: &str,
        turn_id: &str,
        tool_call_id: Option<String>,
        owner: &str,
        name: &str,
        input: &Value,
    ) -> String {
        let exists = |core: &Core, id: &str| {
            core.ch.chats.get(chat).and_then(|c| c.active_turn.as_ref()).is_some_and(|t| {
                t.response_parts
                    .iter()
                    .any(|p| matches!(p, ResponsePart::ToolCall(tc) if tool_call_id_of(&tc.tool_call) == Some(id)))
            })
        };
        if let Some(id) = tool_call_id.filter(|id| exists(core, id)) {
            return id;
        }
        let id = format!("ahp-client-{}", uuid::Uuid::new_v4().simple());
        let contributor = Some(ToolCallContributor::Client(ToolCallClientContributor { client_id: owner.to_owned() }));
        let call = super::turns::RunningCall {
            turn_id,
            tool_call_id: &id,
            tool_name: name,
            display_name: name,
            contributor,
            invocation: format!("Running {name} in {owner}"),
            input: Some(input.to_string()),
        };
        for action in call.actions() {
            core.apply(chat, action, None, None);
        }
        id
    }

    /// The owner completed a call: the backend waiting on it gets the result.
    pub(super) fn client_completed(&self, core: &mut Core, chat: &str, id: &str, result: &ToolCallResult) {
        let call = core.chats.get_mut(chat).and_then(|m| m.client_calls.remove(id));
        if let Some(mut call) = call {
            if let Some(waiter) = call.waiter.take() {
                let _ = waiter.send(outcome_of(result));
            }
        }
        core.sync_input_needed(chat);
    }

    /// Fails a call a client still owes: readied first if it is still streaming, then completed
    /// with `success: false` and `error`; the backend holding it is handed the same failure.
    pub(super) fn fail_client_call(
        &self,
        core: &mut Core,
        chat: &str,
        id: &str,
        error: &str,
        retry_with: Option<String>,
    ) {
        let Some(mut call) = core.chats.get_mut(chat).and_then(|m| m.client_calls.remove(id)) else { return };
        let streaming = core.ch.chats.get(chat).and_then(|c| c.active_turn.as_ref()).is_some_and(|t| {
            t.response_parts.iter().any(|p| matches!(p, ResponsePart::ToolCall(tc) if matches!(&tc.tool_call, ToolCallState::Streaming(s) if s.tool_call_id == id)))
        });
        if streaming {
            let ready = super::turns::RunningCall {
                turn_id: &call.turn_id,
                tool_call_id: id,
                tool_name: &call.name,
                display_name: &call.name,
                contributor: None,
                invocation: format!("Running {}", call.name),
                input: None,
            }
            .ready();
            core.apply(chat, ready, None, None);
        }
        let content = retry_with.map(|other| {
            vec![ToolResultContent::Text(ToolResultTextContent {
                text: format!("{other} provides the same tool in this session; you may try the call again with it."),
            })]
        });
        let result = ToolCallResult {
            success: false,
            past_tense_message: StringOrMarkdown::Plain(format!("{} failed", call.name)),
            content,
            structured_content: None,
            error: Some(Value::String(error.to_owned())),
        };
        let complete = StateAction::ChatToolCallComplete(ChatToolCallCompleteAction {
            turn_id: call.turn_id.clone(),
            tool_call_id: id.to_owned(),
            meta: None,
            result: result.clone(),
            requires_result_confirmation: None,
        });
        core.apply(chat, complete, None, None);
        let mut outcome = outcome_of(&result);
        outcome.text = match &result.content {
            Some(c) => format!("{error}\n{}", text_of(c)),
            None => error.to_owned(),
        };
        if let Some(waiter) = call.waiter.take() {
            let _ = waiter.send(outcome);
        }
        core.sync_input_needed(chat);
    }

    /// The tools a session offers changed (a client joined or left): every backend of its chats is
    /// handed the whole set, and its endpoint's listeners are told.
    pub(super) fn tools_changed(&self, core: &mut Core, session: &str) {
        let specs = core.tool_specs(session);
        let chats: Vec<String> = core.backend_chats_of(session);
        for chat in chats {
            if let Some(meta) = core.chats.get(&chat) {
                let _ = meta.driver.send(Op::SetTools(specs.clone()));
            }
        }
        core.endpoints.tools_changed(session);
        self.refresh_client_rules(core, session);
    }

    /// A client leaves a session for good: each call it owes there is failed in VS Code's words,
    /// it is removed from the session's active clients, and its tools go with it.
    pub(super) fn release_client(&self, core: &mut Core, session: &str, client_id: &str) {
        let active =
            core.ch.sessions.get(session).is_some_and(|s| s.active_clients.iter().any(|c| c.client_id == client_id));
        let chats: Vec<String> = core.chats_of(session);
        for chat in &chats {
            let owed: Vec<(String, String)> = core
                .chats
                .get(chat)
                .map(|m| {
                    m.client_calls
                        .iter()
                        .filter(|(_, c)| c.owner == client_id)
                        .map(|(id, c)| (id.clone(), c.name.clone()))
                        .collect()
                })
                .unwrap_or_default();
            for (id, name) in owed {
                let other = core.ch.sessions.get(session).and_then(|s| {
                    s.active_clients
                        .iter()
                        .find(|c| c.client_id != client_id && usable(c) && c.tools.iter().any(|t| t.name == name))
                        .map(|c| offered_name(&c.client_id, &name))
                });
                let error = format!("Client {client_id} disconnected before completing {name}");
                self.fail_client_call(core, chat, &id, &error, other);
            }
        }
        if active {
            let action = StateAction::SessionActiveClientRemoved(SessionActiveClientRemovedAction {
                client_id: client_id.to_owned(),
            });
            core.apply(session, action, None, None);
            self.tools_changed(core, session);
        }
    }

    /// A connection closed: each session where its client is active and no other connection of
    /// that client watches starts the client's grace period.
    pub(super) fn client_connection_closed(&self, core: &mut Core, client_id: &str, watched: &[String]) {
        for session in watched.iter().filter(|s| channel_kind(s) == Some(ChannelKind::Session)) {
            let active = core
                .ch
                .sessions
                .get(session)
                .is_some_and(|s| s.active_clients.iter().any(|c| c.client_id == client_id));
            if active && !core.client_present(session, client_id) {
                self.start_grace(core, session, client_id);
            }
        }
    }

    /// A client unsubscribed from a session: with no other connection of it watching, it leaves.
    pub(super) fn client_unsubscribed(&self, core: &mut Core, client_id: &str, session: &str) {
        if channel_kind(session) == Some(ChannelKind::Session) && !core.client_present(session, client_id) {
            self.release_client(core, session, client_id);
        }
    }

    /// A client watches a session (again): any grace period running for it there ends.
    pub(super) fn client_returned(&self, core: &mut Core, client_id: &str, session: &str) {
        if let Some(generation) = core.grace.get_mut(&(session.to_owned(), client_id.to_owned())) {
            *generation += 1;
        }
    }

    fn start_grace(&self, core: &mut Core, session: &str, client_id: &str) {
        let key = (session.to_owned(), client_id.to_owned());
        let generation = {
            let g = core.grace.entry(key.clone()).or_insert(0);
            *g += 1;
            *g
        };
        let grace = self.config().client_disconnect_grace_ms;
        if grace == 0 {
            self.release_client(core, session, client_id);
            return;
        }
        let (host, clock) = (self.clone(), self.config().clock.clone());
        let due = clock.now().saturating_add(grace);
        self.spawn("client disconnect grace", async move {
            clock.sleep_until(due).await;
            let mut core = host.lock();
            let current = core.grace.get(&key).copied();
            if current == Some(generation) && !core.client_present(&key.0, &key.1) {
                core.grace.remove(&key);
                host.release_client(&mut core, &key.0, &key.1);
            }
        });
    }
}

/// A tool call's id, whatever its status.
pub fn tool_call_id_of(state: &ToolCallState) -> Option<&str> {
    Some(match state {
        ToolCallState::Streaming(s) => &s.tool_call_id,
        ToolCallState::PendingConfirmation(s) => &s.tool_call_id,
        ToolCallState::Running(s) => &s.tool_call_id,
        ToolCallState::AuthRequired(s) => &s.tool_call_id,
        ToolCallState::PendingResultConfirmation(s) => &s.tool_call_id,
        ToolCallState::Completed(s) => &s.tool_call_id,
        ToolCallState::Cancelled(s) => &s.tool_call_id,
        ToolCallState::Unknown(_) => return None,
    })
}
