//! The host's face toward its own tools (`tools/`): the one way they reach it, and the one way it
//! reaches them.
//!
//! The host knows its tools only through [`Tools`], registered when it is built
//! ([`super::Host::new`]): the catalogue (which tools a session is offered, and running a call of
//! one) and one hook for a turn's end. It never names a tool module. The tools reach the host
//! through this module alone: what they may read of its state ([`Core`]'s accessors below), what
//! they may do ([`Core::apply`], the turn engine, opening sessions and chats, asking a person), and
//! the types and helpers re-exported here. Nothing under `host/` imports `tools/`, and
//! `ahpd/tests/tidy.rs` keeps it so.

use std::future::Future;
use std::pin::Pin;

use ahp_types::state::{AnnotationsState, ChatState, SessionState};
use protocol::{ToolOutcome, ToolSpec};
use serde_json::Value;

use super::{Core, Host};
use crate::clock::Clock;
use crate::store::Store;

pub use super::catalog::{check_config_value, path_of, resolve_config, status, NewSession};
pub use super::commands::CHAT_MOVES_OFF;
pub use super::core::Committed;
pub use super::grants::refusal;
pub use super::questions::{Answer, Unanswered};
pub use super::requests::{file_uri, ClientRequestError, CLIENT_REQUEST_TIMEOUT};
pub use super::turns::host_turn;
pub use super::{new_id, now_iso, uri_id, AgentEntry, ChatMeta, LiveSettings, SessionMeta};

/// What the host asks of its own tools.
pub trait Tools: Send + Sync + 'static {
    /// The catalogue: the host's own tools `session` is offered now, as its backends are handed
    /// them, after every switch and in the session's own wording.
    fn offered(&self, core: &Core, session: &str) -> Vec<Offered>;

    /// Runs a call of one of them, bounded (a deadline, an output cap).
    fn run<'a>(&'a self, host: &'a Host, name: &'a str, call: ToolCall) -> ToolRun<'a>;

    /// A turn ended in `chat` (completed, cancelled or failed), before anything queued behind it
    /// starts.
    fn turn_ended(&self, core: &mut Core, chat: &str, turn_id: &str);
}

/// A tool call on its way.
pub type ToolRun<'a> = Pin<Box<dyn Future<Output = ToolOutcome> + Send + 'a>>;

/// One of the host's own tools as a session is offered it.
#[derive(Debug, Clone)]
pub struct Offered {
    /// How a backend is handed it (its definition is what `serverTools` reports).
    pub spec: ToolSpec,
    /// When a tool nothing asks for is worth calling, for the system prompt.
    pub instruction: Option<&'static str>,
}

/// Who is behind a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A turn, sent by this person (`None`: nobody is behind it, or no users directory).
    Turn(Option<String>),
    /// This host's root connection.
    Root,
    /// A person, with no session.
    Person(String),
}

/// One call of a host tool.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The calling session (absent for a sessionless call).
    pub session: Option<String>,
    /// The calling chat.
    pub chat: Option<String>,
    /// The turn the call belongs to.
    pub turn_id: Option<String>,
    /// The call's id, as the backend said it.
    pub tool_call_id: Option<String>,
    /// Who is behind it.
    pub caller: Caller,
    /// The arguments.
    pub input: Value,
}

/// What the tools (and the doors) read of the host's state, under its lock.
impl Core {
    /// A chat's channel state.
    pub fn chat_state(&self, chat: &str) -> Option<&ChatState> {
        self.ch.chats.get(chat)
    }

    /// A session's channel state.
    pub fn session_state(&self, session: &str) -> Option<&SessionState> {
        self.ch.sessions.get(session)
    }

    /// Every session in memory, with its channel state.
    pub fn session_states(&self) -> impl Iterator<Item = (&String, &SessionState)> {
        self.ch.sessions.iter()
    }

    /// An annotations channel's state.
    pub fn annotations_state(&self, channel: &str) -> Option<&AnnotationsState> {
        self.ch.annotations.get(channel)
    }

    /// The host's record of a session.
    pub fn session(&self, session: &str) -> Option<&SessionMeta> {
        self.sessions.get(session)
    }

    /// The host's record of a chat.
    pub fn chat(&self, chat: &str) -> Option<&ChatMeta> {
        self.chats.get(chat)
    }

    /// The backends, in the config's order.
    pub fn agents(&self) -> &[AgentEntry] {
        &self.agents
    }

    /// The session store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The daemon keys that apply live.
    pub fn settings(&self) -> &LiveSettings {
        &self.settings
    }

    /// True under a users directory (somebody to ask about grants).
    pub fn has_users(&self) -> bool {
        self.users.is_some()
    }

    /// The host's clock (manual in tests).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Names a chat for good: its title is not taken from its first message afterwards.
    pub fn name_chat(&mut self, chat: &str, title: &str) {
        self.set_chat_title(chat, title);
        if let Some(meta) = self.chats.get_mut(chat) {
            meta.titled = true;
        }
    }
}
