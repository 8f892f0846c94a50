//! Grants at the dispatch boundary (seed 000 "Grants"): which grant each command and each client
//! action asks, and the host's own refusal sentence when the connection's person does not hold it.
//! With no users directory nothing here refuses anything.

use ahp_types::actions::StateAction;

use super::core::{channel_kind, ChannelKind, Frame};
use super::errors::AhpError;
use super::Core;
use crate::users::Principal;

/// The `resource` a person signs in to with `authenticate`.
pub const USERS_RESOURCE: &str = "ahpd:users";

impl Principal {
    /// How a turn's sender or a session's owner records it: `root`, `user:<id>`, or nothing.
    pub fn as_sender(&self) -> Option<String> {
        match self {
            Principal::Root => Some("root".to_owned()),
            Principal::Person(id) => Some(format!("user:{id}")),
            Principal::Nobody => None,
        }
    }

    /// The principal a recorded sender names (nothing recorded: nobody).
    pub fn from_sender(sender: Option<&str>) -> Principal {
        match sender {
            Some("root") => Principal::Root,
            Some(s) => s.strip_prefix("user:").map_or(Principal::Nobody, |id| Principal::Person(id.to_owned())),
            None => Principal::Nobody,
        }
    }
}

/// The refusal a person is told: `<person> may not <grant> here`.
pub fn refusal(principal: &Principal, grant: &str) -> String {
    format!("{} may not {grant} here", principal.name())
}

impl Core {
    /// True when there is nobody to ask, or the principal holds `grant`.
    pub fn allows(&self, principal: &Principal, grant: &str) -> bool {
        self.users.as_ref().is_none_or(|users| users.allows(principal, grant))
    }

    /// Reads the users directory again when it changed; a connection whose person may no longer
    /// read sessions (removed, or demoted below it) is cut off at once, so nothing it subscribed
    /// to keeps streaming to it.
    pub fn refresh_users(&mut self) {
        let Some(users) = self.users.as_mut() else { return };
        if !users.reload_if_changed() {
            return;
        }
        for id in self.ch.conn_ids() {
            let Some(Principal::Person(person)) = self.ch.conn(id).map(|c| c.principal.clone()) else { continue };
            if !self.allows(&Principal::Person(person.clone()), "session:read") {
                tracing::info!(conn = id, person, "the person may no longer read sessions; cut off");
                self.ch.kick(id, "its person's access was withdrawn");
            }
        }
    }

    /// `Ok` when the principal may do what `grant` names; else the host's refusal, as a
    /// `PermissionDenied` error.
    pub fn require(&self, principal: &Principal, grant: &str) -> Result<(), AhpError> {
        if self.allows(principal, grant) {
            Ok(())
        } else {
            Err(AhpError::permission_denied(refusal(principal, grant)))
        }
    }

    /// Records who sent a turn (or left a pending message) in `chat`: `root` or `user:<id>`.
    pub fn note_sender(&mut self, chat: &str, id: &str, sender: String) {
        if let Some(meta) = self.chats.get_mut(chat) {
            meta.senders.insert(id.to_owned(), sender);
        }
    }

    /// Who sent a turn or left a pending message, when somebody did.
    pub fn sender_of(&self, chat: &str, id: &str) -> Option<String> {
        self.chats.get(chat)?.senders.get(id).cloned()
    }

    /// Who is behind the turn running in `chat` (nobody when none runs).
    pub fn running_sender(&self, chat: &str) -> Option<String> {
        let turn = self.ch.chats.get(chat)?.active_turn.as_ref()?;
        self.sender_of(chat, &turn.id)
    }

    /// `Ok` when the principal may watch `uri`, asking what `subscribe` asks: the channels named
    /// in `initialize` and `reconnect` are held to the same grants, or nobody signed in could read
    /// any chat whose id it learned. Nobody signed in is asked to sign in.
    pub fn may_watch(&mut self, principal: &Principal, uri: &str) -> Result<(), AhpError> {
        let Some(grant) = Grant::Watch.name(uri) else { return Ok(()) };
        if self.users.is_none() {
            return Ok(());
        }
        self.refresh_users();
        if *principal == Principal::Nobody {
            return Err(AhpError::auth_required(USERS_RESOURCE));
        }
        self.require(principal, grant)
    }

    /// Says a root notification about a session to the root's watchers who may read sessions:
    /// nobody signed in, and a person without `session:read`, learn of no session from the root.
    pub fn announce_session(&mut self, frame: &Frame) {
        let root = ahp_types::ROOT_RESOURCE_URI;
        for id in self.ch.subscribers_of(root) {
            let principal = self.ch.conn(id).map(|c| c.principal.clone()).unwrap_or(Principal::Nobody);
            if self.allows(&principal, "session:read") {
                self.ch.send(id, frame.clone());
            }
        }
    }

    /// Deleting is the owner's own say: only the session's owner, or a person holding
    /// `session:*`, may delete one.
    pub fn may_dispose(&self, principal: &Principal, session: &str) -> Result<(), AhpError> {
        self.require(principal, "session:write")?;
        if self.users.is_none() || matches!(principal, Principal::Root) || self.allows(principal, "session:*") {
            return Ok(());
        }
        let owner = self.sessions.get(session).and_then(|m| m.owner.clone());
        if owner.is_some() && owner == principal.as_sender() {
            return Ok(());
        }
        Err(AhpError::permission_denied("Only the session's owner can delete it."))
    }
}

/// What a command asks of the person behind its connection. Every command in the table
/// ([`super::commands`]) names one; there is no default, so a command cannot be added without
/// saying what it asks. The names are the coarse ones seed 000 gives (`session:read`,
/// `session:write`, `chat:turns`, `config:write`), so a refusal names what a role would have to
/// hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Nothing: every connection may send it (the handshake, signing in, and what is refused
    /// whoever asks).
    Anyone,
    /// `session:read`.
    SessionRead,
    /// `session:read`; a person without it is answered an empty listing rather than an error.
    SessionList,
    /// `session:write`.
    SessionWrite,
    /// `session:write`, and deleting the session it names is its owner's say.
    SessionDelete,
    /// `chat:turns`.
    ChatTurns,
    /// `config:write`.
    ConfigWrite,
    /// `terminal:create` (a claim for a session asks `session:write` too, where it is checked).
    TerminalCreate,
    /// `terminal:dispose`.
    TerminalDispose,
    /// What watching the channel it names asks: nothing for the root (never filtered per
    /// person), `chat:turns` for a chat, `terminal:output` for a terminal, `session:read` for the
    /// rest.
    Watch,
    /// Each action it carries asks its own ([`action_grant`]), checked as it is dispatched.
    EachAction,
}

impl Grant {
    /// The grant's name for a command addressed to `channel`; `None` when nothing is asked here.
    pub fn name(self, channel: &str) -> Option<&'static str> {
        Some(match self {
            Grant::Anyone | Grant::EachAction => return None,
            Grant::SessionRead | Grant::SessionList => "session:read",
            Grant::SessionWrite | Grant::SessionDelete => "session:write",
            Grant::ChatTurns => "chat:turns",
            Grant::ConfigWrite => "config:write",
            Grant::TerminalCreate => "terminal:create",
            Grant::TerminalDispose => "terminal:dispose",
            Grant::Watch => match channel_kind(channel) {
                Some(ChannelKind::Root) | None => return None,
                Some(ChannelKind::Chat) => "chat:turns",
                Some(ChannelKind::Terminal) => "terminal:output",
                Some(_) => "session:read",
            },
        })
    }
}

/// The grant a client action asks.
pub fn action_grant(action: &StateAction) -> &'static str {
    use StateAction as A;
    match action {
        A::RootConfigChanged(_) => "config:write",
        A::SessionIsReadChanged(_)
        | A::SessionIsArchivedChanged(_)
        | A::ChatIsReadChanged(_)
        | A::ChatIsArchivedChanged(_) => "session:mark",
        A::AnnotationsSet(_)
        | A::AnnotationsUpdated(_)
        | A::AnnotationsRemoved(_)
        | A::AnnotationsEntrySet(_)
        | A::AnnotationsEntryRemoved(_)
        | A::ChangesetFilesReviewChanged(_) => "session:review",
        A::ChatToolCallConfirmed(_)
        | A::ChatToolCallResultConfirmed(_)
        | A::ChatInputAnswerChanged(_)
        | A::ChatInputCompleted(_) => "chat:answer",
        A::ChatToolCallComplete(_) | A::ChatToolCallContentChanged(_) => "chat:tool",
        A::TerminalInput(_)
        | A::TerminalResized(_)
        | A::TerminalClaimed(_)
        | A::TerminalTitleChanged(_)
        | A::TerminalCleared(_) => "terminal:write",
        // Sending, queueing, steering, renaming, configuring: a session's (and so its chats') writes.
        _ => "session:write",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn senders_round_trip() {
        for p in [Principal::Root, Principal::Person("ana".into())] {
            assert_eq!(Principal::from_sender(p.as_sender().as_deref()), p);
        }
        assert_eq!(Principal::from_sender(None), Principal::Nobody);
        assert_eq!(Principal::from_sender(Some("rule:x")), Principal::Nobody);
    }
}
