//! Chats: `createChat`, `disposeChat` and `moveChat` (refused while chat moves are off), paging a
//! chat's turns with `fetchTurns`, and `completions`.

use ahp_types::actions::{ChatTurnsLoadedAction, SessionChatRemovedAction, StateAction};
use ahp_types::commands::{
    ChatSource, CompletionItemKind, CompletionsParams, CreateChatParams, DisposeChatParams, FetchTurnsParams,
};
use serde_json::Value;

use super::Reply;
use crate::host::catalog::Farewell;
use crate::host::completions;
use crate::host::core::{channel_kind, ChannelKind};
use crate::host::deliver::Sender;
use crate::host::errors::AhpError;
use crate::host::requests::ConnState;
use crate::host::turns::host_turn;
use crate::host::Host;

/// What a move is refused with while chat moves are off — a client's `moveChat` and the
/// `move_session` tool alike.
pub const CHAT_MOVES_OFF: &str =
    "Moving chats is turned off on this host (chatMoves.enabled is off), so nothing was moved.";

/// Turns sent per page of `fetchTurns`.
const TURN_PAGE: usize = 50;

impl Host {
    pub(super) fn create_chat(&self, conn: &mut ConnState, params: CreateChatParams) -> Result<Value, AhpError> {
        let session = params.channel.clone();
        if channel_kind(&params.chat) != Some(ChannelKind::Chat) {
            return Err(AhpError::invalid_params(format!(
                "Invalid createChat params: chat must be an ahp-chat:/<id> URI, not {}",
                params.chat
            )));
        }
        let mut core = self.lock();
        self.ensure_loaded(&mut core, &session);
        let provider = core
            .sessions
            .get(&session)
            .map(|m| m.provider.clone())
            .ok_or_else(|| AhpError::session_not_found(&session))?;
        if !core.holds_many_chats(&provider) {
            return Err(AhpError::invalid_params(format!(
                "The {provider} agent holds one chat per session; it cannot open another"
            )));
        }
        if core.ch.chats.contains_key(&params.chat)
            || core.store.session_of_chat(&params.chat).is_ok_and(|s| s.is_some())
        {
            return Err(AhpError::invalid_params(format!(
                "Invalid createChat params: chat {} exists already",
                params.chat
            )));
        }
        match params.source {
            None => self.open_chat(&mut core, &session, &params.chat, None),
            Some(ChatSource::Fork(fork)) => self.fork_chat(&mut core, &session, &params.chat, &fork)?,
            Some(ChatSource::SideChat(_)) => {
                return Err(AhpError::invalid_params(format!("The {provider} agent cannot open a side chat")));
            }
            Some(ChatSource::Unknown(_)) => {
                return Err(AhpError::invalid_params("Invalid createChat params: a source this host does not know"));
            }
        }
        if let Some(message) = params.initial_message {
            // The first message is a turn of the person who made the chat.
            let sender = Sender::Host { person: conn.principal.as_sender() };
            self.deliver(&mut core, &params.chat, host_turn(message, None), sender)
                .map_err(AhpError::invalid_params)?;
        }
        Ok(Value::Null)
    }

    pub(super) fn dispose_chat(&self, _conn: &mut ConnState, params: DisposeChatParams) -> Result<Value, AhpError> {
        let chat = params.channel;
        let mut core = self.lock();
        self.ensure_loaded(&mut core, &chat);
        let Some(session) = core.chats.get(&chat).map(|m| m.session.clone()) else {
            return Err(AhpError::not_found(format!("There is no chat {chat}")));
        };
        let is_default = core.ch.sessions.get(&session).and_then(|s| s.default_chat.as_deref()) == Some(chat.as_str());
        if is_default {
            return Err(AhpError::invalid_params(
                "The default chat goes with its session: dispose the session instead",
            ));
        }
        core.remove_chat_state(&chat, Farewell::Close);
        if let Err(e) = core.store.delete_chat(&chat) {
            tracing::error!("{e}");
        }
        core.apply(&session, StateAction::SessionChatRemoved(SessionChatRemovedAction { chat }), None, None);
        Ok(Value::Null)
    }

    /// `moveChat`: refused in the same words as the `move_session` tool while chat moves are off.
    pub(super) fn move_chat(&self, _conn: &mut ConnState, _params: Value) -> Result<Value, AhpError> {
        Err(AhpError::invalid_request(CHAT_MOVES_OFF))
    }

    pub(super) fn fetch_turns(&self, conn: &mut ConnState, reply: Reply, params: FetchTurnsParams) {
        let mut core = self.lock();
        self.ensure_loaded(&mut core, &params.channel);
        let Some(chat) = core.ch.chats.get(&params.channel) else {
            drop(core);
            return reply.send(self, Err(AhpError::not_found(format!("There is no chat {}", params.channel))));
        };
        let turns = &chat.turns;
        let end = match params.cursor.as_deref() {
            None => turns.len(),
            Some(cursor) => match cursor.strip_prefix("before:").and_then(|t| turns.iter().position(|x| x.id == t)) {
                Some(i) => i,
                None => {
                    drop(core);
                    let e = AhpError::invalid_params(format!(
                        "Invalid fetchTurns params: cursor {cursor} is not one this host gave"
                    ));
                    return reply.send(self, Err(e));
                }
            },
        };
        let start = end.saturating_sub(TURN_PAGE);
        let page = turns[start..end].to_vec();
        let next = (start > 0).then(|| format!("before:{}", turns[start].id));
        let action = StateAction::ChatTurnsLoaded(ChatTurnsLoadedAction { turns: page, turns_next_cursor: next });
        // Only the connection that paged receives the page: other subscribers hold every turn.
        core.ch.send_private(conn.id, &params.channel, &action);
        reply.send_locked(&mut core, Ok(serde_json::json!({})));
    }

    /// `completions` while a message is composed: `/` at its start answers the commands of the
    /// chat's backend, `@` the files in the session's folder (walked off the runtime).
    pub(super) fn completions(&self, conn: &mut ConnState, reply: Reply, params: CompletionsParams) {
        let mut core = self.lock();
        if !self.ensure_loaded(&mut core, &params.channel) || !core.ch.chats.contains_key(&params.channel) {
            drop(core);
            let e = AhpError::not_found(format!("There is no chat {}", params.channel));
            return reply.send(self, Err(e));
        }
        let none = || Ok(serde_json::json!({ "items": [] }));
        if params.kind != CompletionItemKind::UserMessage {
            return reply.send_locked(&mut core, none());
        }
        let Some(typed) = completions::typed_at(&params.text, params.offset) else {
            return reply.send_locked(&mut core, none());
        };
        if typed.trigger == '/' {
            let items = completions::command_items(&core.chat_commands(&params.channel), &typed);
            return reply.send_locked(&mut core, Ok(serde_json::json!({ "items": items })));
        }
        let folder = core
            .chats
            .get(&params.channel)
            .and_then(|m| core.sessions.get(&m.session))
            .and_then(|s| s.working_directory.clone());
        let Some(folder) = folder else {
            return reply.send_locked(&mut core, none());
        };
        drop(core);
        let (host, waiting) = (self.clone(), conn.in_flight.begin());
        self.spawn("file completions", async move {
            let items =
                tokio::task::spawn_blocking(move || completions::file_items(&folder, &typed)).await.unwrap_or_default();
            drop(waiting);
            reply.send(&host, Ok(serde_json::json!({ "items": items })));
        });
    }
}
