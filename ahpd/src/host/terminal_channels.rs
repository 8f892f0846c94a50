//! Terminal channels on the host's side: their states beside the other channels (folded on the one
//! write path), the root's list of them, what they printed kept in the store so a chat's terminal
//! reads back after a restart, and the hand-offs to the terminals feature — `createTerminal`,
//! `disposeTerminal`, a client's input and resize, a `!` command's turn, a session that goes.
//!
//! The host owns no pty: the feature that does (registered with [`Host::serve_terminals`]) is
//! known here only as [`facade::Terminals`]. Without one, `createTerminal` is refused as a command
//! this host does not serve and no `terminalCommandPrefix` is announced.

use std::sync::Arc;

use ahp_types::actions::{RootTerminalsChangedAction, StateAction};
use ahp_types::state::{
    MessageKind, TerminalClaim, TerminalContentPart, TerminalExitedLifecycleState, TerminalInfo,
    TerminalLifecycleState, TerminalSessionClaim, TerminalState, TerminalUnclassifiedPart,
};

use super::core::{channel_kind, ChannelKind};
use super::errors::AhpError;
use super::ports::{self, CommandRun};
use super::{Core, Host};
use crate::store::KeptTerminalRecord;

/// The prefix that makes a message a command the host runs (`terminalCommandPrefix`).
pub const COMMAND_PREFIX: &str = "!";

/// True for a terminal action that changes what the root lists of the terminal.
pub(super) fn changes_listing(action: &StateAction) -> bool {
    matches!(
        action,
        StateAction::TerminalTitleChanged(_) | StateAction::TerminalClaimed(_) | StateAction::TerminalExited(_)
    )
}

/// The session a terminal's claim names, if a session claims it.
pub fn claiming_session(state: &TerminalState) -> Option<&str> {
    match &state.claim {
        TerminalClaim::Session(claim) => Some(&claim.session),
        TerminalClaim::Client(_) => None,
    }
}

/// True while a terminal's process runs.
pub fn is_running(state: &TerminalState) -> bool {
    matches!(state.lifecycle, TerminalLifecycleState::Running(_))
}

/// What a terminal printed, as one string (its parts joined as AHP says a naive consumer does).
pub fn output_of(state: &TerminalState) -> String {
    state
        .content
        .iter()
        .map(|part| match part {
            TerminalContentPart::Unclassified(p) => p.value.as_str(),
            TerminalContentPart::Command(c) => c.output.as_str(),
            TerminalContentPart::Unknown(_) => "",
        })
        .collect()
}

/// The bytes a terminal's content holds.
pub fn content_bytes(state: &TerminalState) -> usize {
    state
        .content
        .iter()
        .map(|part| match part {
            TerminalContentPart::Unclassified(p) => p.value.len(),
            TerminalContentPart::Command(c) => c.output.len(),
            TerminalContentPart::Unknown(_) => 0,
        })
        .sum()
}

/// The last `max` bytes of `text`, cut on a character boundary.
pub fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The exited terminal a kept record reads back as.
fn exited_state(record: KeptTerminalRecord) -> TerminalState {
    TerminalState {
        title: record.title,
        cwd: record.cwd,
        cols: None,
        rows: None,
        content: if record.output.is_empty() {
            Vec::new()
        } else {
            vec![TerminalContentPart::Unclassified(TerminalUnclassifiedPart { value: record.output })]
        },
        lifecycle: TerminalLifecycleState::Exited(TerminalExitedLifecycleState { exit_code: record.exit_code }),
        claim: TerminalClaim::Session(TerminalSessionClaim {
            session: record.session,
            chat: record.chat,
            turn_id: None,
            tool_call_id: None,
        }),
        supports_command_detection: None,
        is_pty: Some(record.is_pty),
    }
}

/// The channel a backend's kept output is served under: its chat's id and the backend's key
/// (`protocol::terminal_output_uri`, which the backend names it by without asking).
pub use protocol::terminal_output_uri;

impl Core {
    /// The terminals feature, when this host serves terminals.
    pub fn terminals_feature(&self) -> Option<Arc<dyn ports::Terminals>> {
        self.terminals.clone()
    }

    /// A terminal channel's state.
    pub fn terminal_state(&self, uri: &str) -> Option<&TerminalState> {
        self.ch.terminals.get(uri)
    }

    /// The terminals the root lists, in the order they were opened, with their states.
    pub fn listed_terminals(&self) -> Vec<(&str, &TerminalState)> {
        self.terminal_list.iter().filter_map(|uri| Some((uri.as_str(), self.ch.terminals.get(uri)?))).collect()
    }

    /// Opens a terminal channel with `state`; a `listed` one is added to the root's list.
    pub fn open_terminal(&mut self, uri: &str, state: TerminalState, listed: bool) {
        self.ch.terminals.insert(uri.to_owned(), state);
        if listed && !self.terminal_list.iter().any(|u| u == uri) {
            self.terminal_list.push(uri.to_owned());
            self.publish_terminals();
        }
    }

    /// Takes a terminal off the root's list; its channel stays (an exited terminal a chat names).
    pub fn unlist_terminal(&mut self, uri: &str) {
        let before = self.terminal_list.len();
        self.terminal_list.retain(|u| u != uri);
        if self.terminal_list.len() != before {
            self.publish_terminals();
        }
    }

    /// Closes a terminal channel: off the list, out of memory, its watchers let go.
    pub fn close_terminal(&mut self, uri: &str) {
        self.unlist_terminal(uri);
        self.ch.terminals.remove(uri);
        self.ch.drop_channel(uri);
    }

    /// After a terminal action that changes what the root lists of it: the list follows.
    pub(super) fn terminal_listing_changed(&mut self, uri: &str) {
        if self.terminal_list.iter().any(|u| u == uri) {
            self.publish_terminals();
        }
    }

    /// Says the root's terminal list when it changed.
    fn publish_terminals(&mut self) {
        let terminals: Vec<TerminalInfo> = self
            .listed_terminals()
            .into_iter()
            .map(|(uri, state)| TerminalInfo {
                resource: uri.to_owned(),
                title: state.title.clone(),
                claim: state.claim.clone(),
                lifecycle: state.lifecycle.clone(),
            })
            .collect();
        if self.ch.root.terminals.as_ref() == Some(&terminals) {
            return;
        }
        let action = StateAction::RootTerminalsChanged(RootTerminalsChangedAction { terminals });
        self.apply(ahp_types::ROOT_RESOURCE_URI, action, None, None);
    }

    /// Keeps what a terminal printed, so its channel reads back after a restart.
    pub fn keep_terminal(&mut self, record: &KeptTerminalRecord) {
        if let Err(e) = self.store.keep_terminal(record) {
            tracing::error!("could not keep what {} printed: {e}", record.uri);
        }
    }

    /// A backend's output too large for the chat (`terminal/keep`): kept under the channel its
    /// key names, at most the scrollback a terminal keeps.
    pub fn keep_backend_output(&mut self, params: protocol::KeepTerminalParams, scrollback: usize) {
        let Some(session) = self.chats.get(&params.chat).map(|m| m.session.clone()) else {
            tracing::debug!(chat = %params.chat, "an output kept for a chat this host does not hold; dropped");
            return;
        };
        let uri = terminal_output_uri(&params.chat, &params.key);
        let cwd =
            self.sessions.get(&session).and_then(|m| m.working_directory.as_deref()).map(crate::fileuri::file_uri);
        let record = KeptTerminalRecord {
            uri: uri.clone(),
            session,
            chat: params.chat,
            title: params.title,
            cwd,
            output: tail(&params.output, scrollback).to_owned(),
            exit_code: params.exit_code,
            is_pty: false,
        };
        if self.ch.terminals.contains_key(&uri) {
            // A channel of that name is open already (a key kept twice, or a client's terminal
            // named so): it keeps what its watchers folded; what is kept now reads after it closes.
            tracing::debug!(terminal = %uri, "an output kept under a channel that is open");
        }
        self.keep_terminal(&record);
    }

    /// Loads a kept terminal into memory (its session's, so it leaves with the session); answers
    /// whether there was one.
    pub(super) fn load_kept_terminal(&mut self, uri: &str) -> bool {
        match self.store.kept_terminal(uri) {
            Ok(Some(record)) => {
                self.ch.terminals.insert(uri.to_owned(), exited_state(record));
                self.ch.mark_loaded(uri);
                true
            }
            Ok(None) => false,
            Err(e) => {
                tracing::error!("{e}");
                false
            }
        }
    }

    /// The session a kept terminal belongs to, when one was kept under `uri`.
    pub(super) fn session_of_kept_terminal(&self, uri: &str) -> Option<String> {
        match self.store.kept_terminal(uri) {
            Ok(record) => record.map(|r| r.session),
            Err(e) => {
                tracing::error!("{e}");
                None
            }
        }
    }

    /// What keeps a session's terminals in memory: one that runs, or one somebody watches.
    pub(super) fn terminal_keeps(&self, session: &str) -> Option<&'static str> {
        self.ch.terminals.iter().filter(|(_, t)| claiming_session(t) == Some(session)).find_map(|(uri, t)| {
            if is_running(t) {
                Some("a running terminal")
            } else if self.ch.is_watched(uri) {
                Some("a subscriber")
            } else {
                None
            }
        })
    }

    /// A session leaves memory: its terminals go with it, and when it `closes` for good their
    /// processes end first.
    pub(super) fn remove_session_terminals(&mut self, session: &str, closes: bool) {
        self.remove_terminals(|claim| claim.session == session, closes);
    }

    /// A chat is deleted: the terminals it claims end and close.
    pub(super) fn remove_chat_terminals(&mut self, chat: &str) {
        self.remove_terminals(|claim| claim.chat == chat, true);
    }

    fn remove_terminals(&mut self, theirs: impl Fn(&TerminalSessionClaim) -> bool, end: bool) {
        let uris: Vec<String> = self
            .ch
            .terminals
            .iter()
            .filter(|(_, t)| matches!(&t.claim, TerminalClaim::Session(claim) if theirs(claim)))
            .map(|(uri, _)| uri.clone())
            .collect();
        let feature = self.terminals.clone();
        for uri in uris {
            if let Some(feature) = feature.as_ref().filter(|_| end) {
                feature.end(&uri);
            }
            self.close_terminal(&uri);
        }
    }

    /// The command a message asks the host to run (`!ls`), when it is one: a person's message
    /// that starts with the prefix and says something after it, on a host that serves terminals.
    pub(super) fn command_of(&self, message: &ahp_types::state::Message) -> Option<String> {
        self.terminals.as_ref()?;
        if message.origin.kind != MessageKind::User {
            return None;
        }
        let command = message.text.strip_prefix(COMMAND_PREFIX)?.trim();
        (!command.is_empty()).then(|| command.to_owned())
    }

    /// Runs a `!` command as the host's own turn `turn_id` of `chat` (said already): the feature
    /// runs it in a terminal of the chat's folder, and the turn ends when it exits. The backend is
    /// never told.
    pub(super) fn start_command(&mut self, chat: &str, turn_id: &str, command: String) {
        let Some(feature) = self.terminals.clone() else { return };
        let Some(session) = self.chats.get(chat).map(|m| m.session.clone()) else { return };
        let cwd = self.sessions.get(&session).and_then(|m| m.working_directory.clone());
        let terminal = format!("ahp-terminal:/{}", super::new_id());
        self.command_turns.insert(chat.to_owned(), (turn_id.to_owned(), terminal.clone()));
        let run = CommandRun { session, chat: chat.to_owned(), turn_id: turn_id.to_owned(), command, cwd, terminal };
        if let Err(why) = feature.run_command(self, run) {
            self.fail_turn(chat, turn_id, "commandFailed", why);
        }
    }

    /// True when the turn running in `chat` is a `!` command's.
    pub(super) fn runs_command(&self, chat: &str) -> bool {
        let running = self.running_turn(chat);
        self.command_turns.get(chat).is_some_and(|(turn, _)| Some(turn) == running.as_ref())
    }

    /// Stops a `!` command's turn (a client stopped it): its process ends.
    pub(super) fn stop_command(&mut self, chat: &str, turn_id: &str) -> bool {
        let Some((turn, terminal)) = self.command_turns.get(chat) else { return false };
        if turn != turn_id {
            return false;
        }
        if let Some(feature) = &self.terminals {
            feature.end(terminal);
        }
        true
    }
}

impl Host {
    /// Serves terminals through `feature` (ptys and their processes): `createTerminal` and `!`
    /// commands reach it from now on.
    pub fn serve_terminals(&self, feature: Arc<dyn ports::Terminals>) {
        self.lock().terminals = Some(feature);
    }

    /// `createTerminal`: a new terminal channel, handed to the feature to open.
    pub(super) fn create_terminal(
        &self,
        conn: &mut super::requests::ConnState,
        params: ahp_types::commands::CreateTerminalParams,
    ) -> Result<serde_json::Value, AhpError> {
        let uri = params.channel.clone();
        if channel_kind(&uri) != Some(ChannelKind::Terminal) {
            return Err(AhpError::invalid_params(format!(
                "Invalid createTerminal params: channel must be a new ahp-terminal:/<id>, not {uri}"
            )));
        }
        let mut core = self.lock();
        let Some(feature) = core.terminals.clone() else {
            return Err(AhpError::method_not_found("createTerminal (this host serves no terminals)"));
        };
        if core.ch.has_channel(&uri) || core.session_of_kept_terminal(&uri).is_some() {
            return Err(AhpError::in_use(format!("There is a terminal at {uri} already")));
        }
        if let TerminalClaim::Session(claim) = &params.claim {
            if !self.ensure_loaded(&mut core, &claim.session) {
                return Err(AhpError::session_not_found(&claim.session));
            }
            core.require(&conn.principal, "session:write")?;
        }
        let asker = ports::Asker { client_id: conn.client_id.clone(), principal: conn.principal.clone() };
        feature.create(&mut core, &asker, params)?;
        Ok(serde_json::Value::Null)
    }

    /// `disposeTerminal`: its process ends, and its channel closes.
    pub(super) fn dispose_terminal(
        &self,
        _conn: &mut super::requests::ConnState,
        params: ahp_types::commands::DisposeTerminalParams,
    ) -> Result<serde_json::Value, AhpError> {
        let uri = params.channel;
        let mut core = self.lock();
        if !self.ensure_loaded(&mut core, &uri) || channel_kind(&uri) != Some(ChannelKind::Terminal) {
            return Err(AhpError::not_found(format!("No terminal at {uri}")));
        }
        if let Some(feature) = core.terminals.clone() {
            feature.end(&uri);
        }
        core.close_terminal(&uri);
        Ok(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_is_cut_on_a_character_boundary() {
        assert_eq!(tail("hello", 10), "hello");
        assert_eq!(tail("hello", 3), "llo");
        assert_eq!(tail("aé", 1), "");
        assert_eq!(tail("aéb", 2), "b");
    }
}
