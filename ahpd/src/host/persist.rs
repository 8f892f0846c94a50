//! Between the host's state and its store: what is written when (durable events at once, a running
//! turn's progress in the background), loading a stored session back into channels on first use,
//! and ending, at start-up, the turns a crash interrupted.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use ahp::reducers::{apply_action_to_chat, ReduceOutcome};
use ahp_types::actions::{ChatErrorAction, StateAction};
use ahp_types::state::{
    ActiveTurn, AnnotationsState, ChatState, ChatSummary, ErrorInfo, ErrorResponsePart, ResponsePart,
    SessionConfigSchema, SessionConfigState, SessionLifecycle, SessionState, Turn, TurnState,
};

use super::catalog::status;
use super::core::{channel_kind, ChannelKind};
use super::driver::spawn_driver;
use super::{now_iso, ChatMeta, Core, Host, SessionMeta};
use crate::store::health::Record;
use crate::store::{ChatRecord, LoadedSession, SessionRecord, TurnRecord};

/// How often a running turn's progress is checkpointed.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(500);

/// The sentence an interrupted turn ends with.
pub const INTERRUPTED: &str =
    "ahpd stopped while this turn was running (it was killed or crashed). What the turn said so far is kept; send your message again to continue.";

/// The sentence an interrupted turn its backend can resume ends with.
pub const INTERRUPTED_RESUMABLE: &str =
    "ahpd stopped while this turn was running (it was killed or crashed). What the turn said so far is kept; resume the turn to go on, or send your message again.";

/// The `errorType` of a turn that ended as failed because the store could not keep it.
pub const STORE_CANNOT_WRITE: &str = "storeCannotWrite";

/// The sentence a turn ends with when the store refused it for a reason of its own (not room, a
/// read-only file or the disk): it was not kept, so it is not told complete.
pub const NOT_KEPT: &str =
    "ahpd could not keep this turn in its session store (its log says why); it ends here rather than be told complete and lost.";

/// How often a store that cannot write is probed again.
const STORE_PROBE_EVERY: Duration = Duration::from_secs(2);

/// The turn an action ends and the duration it gives, for the actions that end a turn.
fn ending_of(action: &StateAction) -> Option<(String, i64)> {
    match action {
        StateAction::ChatTurnComplete(a) => Some((a.turn_id.clone(), a.duration)),
        StateAction::ChatTurnCancelled(a) => Some((a.turn_id.clone(), a.duration)),
        StateAction::ChatError(a) => Some((a.turn_id.clone(), a.duration)),
        _ => None,
    }
}

/// True for chat actions that change what a chat's record holds.
pub fn changes_chat_record(action: &StateAction) -> bool {
    matches!(
        action,
        StateAction::ChatTurnStarted(_)
            | StateAction::ChatPendingMessageSet(_)
            | StateAction::ChatPendingMessageRemoved(_)
            | StateAction::ChatQueuedMessagesReordered(_)
            | StateAction::ChatDraftChanged(_)
            | StateAction::ChatIsReadChanged(_)
            | StateAction::ChatIsArchivedChanged(_)
    )
}

impl Core {
    /// Whether a write of `record` was kept. One the store could not keep (a full disk, a
    /// read-only file, an I/O error) is noted, to write again from memory once it can, and every
    /// client is told the store cannot write. So is one it refused while it holds less than memory
    /// does (a chat whose session's record it missed fails its foreign key): it goes again, after
    /// its parent. A write that landed is kept only while the store is still at its path: one
    /// deleted or replaced meanwhile is written again there first ([`Core::keep_store_in_place`]).
    pub(super) fn kept<T>(&mut self, result: Result<T, crate::store::StoreError>, record: Record) -> bool {
        if let Err(e) = result {
            if self.store.trouble().is_none() && self.unkept.is_empty() {
                tracing::error!("{e}");
                return false;
            }
            // Said once, as the store's trouble; the write itself goes again from memory.
            tracing::debug!("kept in memory until the store writes again: {e}");
            self.unkept.note(record);
            self.show_store_trouble();
            return false;
        }
        if self.keep_store_in_place() {
            return true;
        }
        self.unkept.note(record);
        self.show_store_trouble();
        false
    }

    /// Makes sure the store's file is still at its path, writing it again there from what its
    /// connection holds when it was deleted or replaced while the daemon ran. Answers false when
    /// it is gone and could not be written again (the store is then in trouble, and says why).
    pub(super) fn keep_store_in_place(&mut self) -> bool {
        if !self.store.moved() {
            return true;
        }
        match self.store.put_back() {
            Ok(None) => true,
            Ok(Some(put)) => {
                let aside = put
                    .replaced
                    .map(|p| format!("; the file found there instead is kept as {}", p.display()))
                    .unwrap_or_default();
                tracing::warn!(
                    "the session store at {} was deleted or replaced while ahpd ran; it was written again there from what ahpd held{aside}",
                    self.store.path().display()
                );
                true
            }
            Err(e) => {
                tracing::error!("{e}");
                false
            }
        }
    }

    /// Writes again, from memory, what the store could not keep, once a probe finds it writable
    /// (and, first, the store itself at its path when it was deleted or replaced). Answers whether
    /// the store takes writes now. Asked by the health timer, and before a client's new turn is
    /// refused.
    pub fn retry_store(&mut self) -> bool {
        let in_place = self.keep_store_in_place();
        if !in_place || (self.store.trouble().is_some() && self.store.probe().is_err()) {
            self.show_store_trouble();
            return false;
        }
        let records = self.unkept.take();
        if !records.is_empty() {
            tracing::info!("the session store takes writes again; writing the {} records it missed", records.len());
        }
        for record in records {
            match record {
                Record::Session(uri) => self.persist_session(&uri),
                Record::Chat(uri) => self.persist_chat(&uri),
                Record::Turns(chat, from) => self.store_turns_from(&chat, from),
                Record::Annotations(uri) => self.persist_annotations(&uri),
            }
        }
        self.show_store_trouble();
        self.store.trouble().is_none()
    }

    /// A session's record from its state.
    pub fn session_record(&self, uri: &str) -> Option<SessionRecord> {
        let state = self.ch.sessions.get(uri)?;
        let meta = self.sessions.get(uri)?;
        Some(SessionRecord {
            uri: uri.to_owned(),
            provider: state.provider.clone(),
            created_at: meta.created_at.clone(),
            title: state.title.clone(),
            flags: state.status & !status::ACTIVITY,
            working_directory: meta.working_directory.as_ref().map(|p| p.display().to_string()),
            config: state.config.as_ref().map(|c| c.values.clone()).unwrap_or_default(),
            default_chat: state.default_chat.clone(),
            owner: meta.owner.clone(),
            parent: meta.parent.clone(),
            depth: meta.depth,
            meta: state.meta.clone(),
            changes: meta.changes.clone(),
            origin: state.origin.clone(),
        })
    }

    /// A chat's record from its state.
    pub fn chat_record(&self, uri: &str) -> Option<ChatRecord> {
        self.chat_record_of(uri, self.ch.chats.get(uri)?)
    }

    /// A chat's record from `state` (its state now, or as it will be).
    fn chat_record_of(&self, uri: &str, state: &ChatState) -> Option<ChatRecord> {
        let meta = self.chats.get(uri)?;
        let entry = self
            .ch
            .sessions
            .get(&meta.session)
            .and_then(|s| s.chats.iter().find(|c| c.resource == uri))
            .and_then(|c| c.changes.clone());
        Some(ChatRecord {
            uri: uri.to_owned(),
            session: meta.session.clone(),
            position: meta.position,
            title: meta.title.clone(),
            conversation_id: meta.conversation_id.clone(),
            started_in_backend: meta.started_in_backend,
            origin: state.origin.clone(),
            queued: state.queued_messages.clone().unwrap_or_default(),
            steering: state.steering_message.clone(),
            draft: state.draft.clone(),
            flags: state.status & !status::ACTIVITY,
            modified_at: Some(state.modified_at.clone()),
            harness: meta.harness.clone(),
            working_directory: meta.working_directory.as_ref().map(|p| p.display().to_string()),
            changes: entry,
            cut: meta.cut.clone(),
            resumable: meta.resumable,
        })
    }

    /// Writes a session's record and summary.
    pub fn persist_session(&mut self, uri: &str) {
        let (Some(record), Some(summary)) = (self.session_record(uri), self.summary_of(uri)) else { return };
        match serde_json::to_value(&summary) {
            Ok(summary) => {
                let written = self.store.save_session(&record, &summary);
                self.kept(written, Record::Session(uri.to_owned()));
            }
            Err(e) => tracing::error!("could not encode a session summary: {e}"),
        }
    }

    /// Writes a chat's record.
    pub fn persist_chat(&mut self, uri: &str) {
        if let Some(record) = self.chat_record(uri) {
            let written = self.store.save_chat(&record);
            self.kept(written, Record::Chat(uri.to_owned()));
        }
    }

    /// After a chat action: a turn that ended is written at once (before anything else can
    /// happen to the process), as is any change to what the chat's record holds; a running turn's
    /// progress is left to the checkpoint.
    ///
    /// `ending_written`: the turn's ending was written before it was committed ([`Core::keep_ending`]).
    pub fn persist_after(
        &mut self,
        chat: &str,
        started: bool,
        changes_record: bool,
        turn_ended: bool,
        ending_written: bool,
    ) {
        if turn_ended {
            // The turn, its chat's record and its session's bank land in the store together
            // (written before the commit by `keep_ending`, or here).
            let together = !ending_written && self.store.savepoint("turn_end").is_ok();
            if !ending_written {
                self.persist_last_turn(chat);
                self.persist_chat(chat);
            }
            self.running_dirty.remove(chat);
            let usage = self.ch.chats.get(chat).and_then(|c| c.turns.last()).and_then(|t| t.usage.clone());
            self.bank_usage(chat, usage.as_ref());
            if together {
                let released = self.store.release("turn_end");
                self.kept(released, Record::Chat(chat.to_owned()));
            }
        } else if changes_record {
            self.persist_chat(chat);
        }
        let running = self.ch.chats.get(chat).is_some_and(|c| c.active_turn.is_some());
        if running {
            if started {
                // A crash right after a start still knows the turn was running, and one right
                // after a question still finds the question.
                self.checkpoint(chat);
            } else if !self.running_dirty.contains(chat) {
                // Every streamed delta lands here: the name is copied once per checkpoint, not
                // once per delta.
                self.running_dirty.insert(chat.to_owned());
            }
        }
    }

    fn persist_last_turn(&mut self, chat: &str) {
        let Some(state) = self.ch.chats.get(chat) else { return };
        let Some(turn) = state.turns.last().cloned() else { return };
        let position = i64::try_from(state.turns.len() - 1).unwrap_or(0);
        let record = self.turn_record(chat, turn);
        let written = self.store.save_turn(chat, position, &record);
        self.kept(written, Record::Turns(chat.to_owned(), usize::try_from(position).unwrap_or(0)));
        self.running_dirty.remove(chat);
    }

    /// Writes every turn a chat holds (a fork's copy), in order.
    pub fn store_turns(&mut self, chat: &str) {
        self.store_turns_from(chat, 0);
    }

    /// Writes a chat's turns from `from` on as memory holds them, replacing what the store holds
    /// there, in one transaction.
    fn store_turns_from(&mut self, chat: &str, from: usize) {
        if !self.ch.chats.contains_key(chat) || !self.chats.contains_key(chat) {
            return;
        }
        let records = self.turn_records(chat, from);
        let running = self.running_turn(chat).is_some();
        let position = |at: usize| i64::try_from(from + at).unwrap_or(i64::MAX);
        let written = self.store.savepoint("turns").and_then(|()| {
            let mut written = self.store.drop_turns_from(chat, position(0));
            for (at, record) in records.iter().enumerate() {
                written = written.and_then(|()| self.store.save_turn(chat, position(at), record));
            }
            match written {
                Ok(()) => self.store.release("turns"),
                Err(e) => {
                    let _ = self.store.roll_back("turns");
                    Err(e)
                }
            }
        });
        if self.kept(written, Record::Turns(chat.to_owned(), from)) && running {
            // Writing a turn forgets the chat's checkpoint: the turn running now keeps its own.
            self.checkpoint(chat);
        }
    }

    /// The records of a chat's turns from `from` on, as memory holds them.
    fn turn_records(&self, chat: &str, from: usize) -> Vec<TurnRecord> {
        let Some(state) = self.ch.chats.get(chat) else { return Vec::new() };
        state.turns.iter().skip(from).map(|turn| self.turn_record(chat, turn.clone())).collect()
    }

    /// A turn's record: the turn, and what the chat knows of it.
    fn turn_record(&self, chat: &str, turn: Turn) -> TurnRecord {
        let meta = self.chats.get(chat);
        TurnRecord {
            transcript_id: meta.and_then(|m| m.transcripts.get(&turn.id).cloned()),
            sender: meta.and_then(|m| m.senders.get(&turn.id).cloned()),
            turn,
        }
    }

    /// Before a turn's ending is said to anyone, the turn as it ends, its chat's record and its
    /// session's record with the turn's usage banked are written together, in one savepoint: a
    /// stop of the process leaves all three or none (and a turn not kept is ended again, with
    /// its usage, when the host starts). When the store cannot keep them, an ending the host or a backend says
    /// becomes a failure that says so (a client's own stop stays its stop), and the turn stays
    /// in memory to be written once the store can. Answers the action to commit and whether the
    /// ending was dealt with here.
    pub fn keep_ending(&mut self, chat: &str, action: StateAction, by_client: bool) -> (StateAction, bool) {
        let Some((turn_id, duration)) = ending_of(&action) else { return (action, false) };
        if self.running_turn(chat).as_deref() != Some(turn_id.as_str()) {
            return (action, false);
        }
        let Some(state) = self.ch.chats.get_mut(chat) else { return (action, false) };
        let position = state.turns.len();
        // The chat as the official reducer will leave it, without copying its history.
        let history = std::mem::take(&mut state.turns);
        let mut ended = state.clone();
        state.turns = history;
        if !matches!(apply_action_to_chat(&mut ended, &action), ReduceOutcome::Applied) {
            return (action, false);
        }
        let (Some(turn), Some(record)) = (ended.turns.pop(), self.chat_record_of(chat, &ended)) else {
            return (action, false);
        };
        if !self.unkept.is_empty() && self.store.trouble().is_none() {
            // What the store missed goes first: this turn's chat and session rows among it.
            self.retry_store();
        }
        // Turns before it the store missed go with it: a stored position after a missing one
        // would be read back one place early, and overwritten.
        let from = self.unkept.turns_from(chat).unwrap_or(position).min(position);
        let banked = self.banked_session(chat, turn.usage.as_ref());
        let mut turns = self.turn_records(chat, from);
        turns.push(self.turn_record(chat, turn));
        let at = |n: usize| i64::try_from(from + n).unwrap_or(i64::MAX);
        let written = self.store.savepoint("turn_end").and_then(|()| {
            let mut written = if from < position { self.store.drop_turns_from(chat, at(0)) } else { Ok(()) };
            for (n, turn) in turns.iter().enumerate() {
                written = written.and_then(|()| self.store.save_turn(chat, at(n), turn));
            }
            let written = written.and_then(|()| self.store.save_chat(&record));
            let written = match &banked {
                Some((session, summary)) => written.and_then(|()| self.store.save_session(session, summary)),
                None => written,
            };
            match written {
                Ok(()) => self.store.release("turn_end"),
                Err(e) => {
                    let _ = self.store.roll_back("turn_end");
                    Err(e)
                }
            }
        });
        if self.kept(written, Record::Turns(chat.to_owned(), from)) {
            self.unkept.turns_kept(chat);
            return (action, true);
        }
        // Not kept, whatever the reason: never told complete. A trouble of the store's says so in
        // its sentence; anything else (a record that would not encode) in one of its own.
        let sentence = self.store.cannot_write().unwrap_or_else(|| NOT_KEPT.to_owned());
        self.unkept.note(Record::Chat(chat.to_owned()));
        if by_client {
            return (action, true);
        }
        tracing::warn!(chat, turn = %turn_id, "a turn the store could not keep ends as failed");
        let failed = StateAction::ChatError(ChatErrorAction {
            turn_id,
            duration,
            part: ErrorResponsePart {
                error: ErrorInfo { error_type: STORE_CANNOT_WRITE.into(), message: sentence, stack: None, meta: None },
                resumable: None,
            },
            meta: None,
        });
        (failed, true)
    }

    /// Writes a session's annotations channel state.
    pub fn persist_annotations(&mut self, channel: &str) {
        let Some(state) = self.ch.annotations.get(channel) else { return };
        let session = channel.trim_end_matches("/annotations");
        match serde_json::to_value(state) {
            Ok(value) => {
                let written = self.store.save_annotations(session, &value);
                self.kept(written, Record::Annotations(channel.to_owned()));
            }
            Err(e) => tracing::error!("could not encode annotations: {e}"),
        }
    }

    /// Writes a running turn's progress so far.
    pub fn checkpoint(&mut self, chat: &str) {
        let Some(active) = self.ch.chats.get(chat).and_then(|c| c.active_turn.as_ref()) else { return };
        match serde_json::to_value(active) {
            Ok(value) => {
                // A running turn's progress: nothing was told kept, so nothing is noted to write
                // again (the turn's ending is).
                if let Err(e) = self.store.checkpoint_running(chat, &value) {
                    tracing::error!("{e}");
                    self.show_store_trouble();
                }
            }
            Err(e) => tracing::error!("could not encode a running turn: {e}"),
        }
    }
}

fn empty_schema() -> SessionConfigSchema {
    SessionConfigSchema { r#type: "object".into(), properties: HashMap::new(), required: None }
}

fn chat_state(record: &ChatRecord, turns: Vec<Turn>) -> ChatState {
    let working_directories = record.working_directory.as_ref().map(|d| vec![format!("file://{d}")]);
    let activity = match turns.last().map(|t| &t.state) {
        Some(TurnState::Error) => status::ERROR,
        _ => status::IDLE,
    };
    let modified_at = record.modified_at.clone().unwrap_or_else(now_iso);
    ChatState {
        resource: record.uri.clone(),
        title: record.title.clone(),
        status: activity | record.flags,
        activity: None,
        modified_at,
        changes: None,
        origin: record.origin.clone(),
        movable: None,
        interactivity: None,
        working_directories,
        changesets: None,
        background_work: None,
        canvases: None,
        turns,
        turns_next_cursor: None,
        active_turn: None,
        steering_message: record.steering.clone(),
        queued_messages: (!record.queued.is_empty()).then(|| record.queued.clone()),
        draft: record.draft.clone(),
        meta: None,
    }
}

/// An interrupted turn, ended as failed: what it said so far, then the reason (which says the
/// turn can be resumed when its backend resumes turns).
pub fn interrupted_turn(active: ActiveTurn, resumable: bool) -> Turn {
    let started: Option<jiff::Timestamp> = active.started_at.parse().ok();
    let duration = started.map(|s| (jiff::Timestamp::now().as_millisecond() - s.as_millisecond()).max(0)).unwrap_or(0);
    let mut parts = active.response_parts;
    parts.push(ResponsePart::Error(ErrorResponsePart {
        error: ErrorInfo {
            error_type: "interrupted".into(),
            message: if resumable { INTERRUPTED_RESUMABLE } else { INTERRUPTED }.into(),
            stack: None,
            meta: None,
        },
        resumable: resumable.then_some(true),
    }));
    Turn {
        id: active.id,
        started_at: Some(active.started_at),
        duration: Some(duration),
        message: active.message,
        response_parts: parts,
        usage: active.usage,
        state: TurnState::Error,
    }
}

impl Host {
    /// Makes sure the channel `uri` is in memory, loading its session from the store on first
    /// use. Answers whether the channel exists.
    pub fn ensure_loaded(&self, core: &mut Core, uri: &str) -> bool {
        // Whoever asks is about to read the channel: the text held back for it is part of it.
        core.flush_delta(uri);
        if core.ch.has_channel(uri) {
            return true;
        }
        let session = match channel_kind(uri) {
            Some(ChannelKind::Session) => uri.to_owned(),
            Some(ChannelKind::Annotations) => uri.trim_end_matches("/annotations").to_owned(),
            Some(ChannelKind::Chat) => match core.store.session_of_chat(uri) {
                Ok(Some(session)) => session,
                Ok(None) => return false,
                Err(e) => {
                    tracing::error!("{e}");
                    return false;
                }
            },
            // What a chat's terminal printed, kept: loaded with its session, and leaving with it.
            Some(ChannelKind::Terminal) => match core.session_of_kept_terminal(uri) {
                Some(session) => {
                    return self.ensure_loaded(core, &session) && core.load_kept_terminal(uri);
                }
                None => return false,
            },
            _ => return false,
        };
        if core.ch.sessions.contains_key(&session) {
            return core.ch.has_channel(uri);
        }
        match core.store.load_session(&session) {
            Ok(Some(loaded)) => {
                self.hydrate(core, loaded);
                core.ch.has_channel(uri)
            }
            Ok(None) => false,
            Err(e) => {
                tracing::error!("could not load {session}: {e}");
                false
            }
        }
    }

    /// Builds channel states for a stored session.
    fn hydrate(&self, core: &mut Core, loaded: LoadedSession) {
        let LoadedSession { record, chats, annotations } = loaded;
        let uri = record.uri.clone();
        // The session's folders: its own, then each its chats work in apart from it.
        let mut directories: Vec<String> = record.working_directory.iter().map(|d| format!("file://{d}")).collect();
        for (chat_record, _) in &chats {
            if let Some(d) = &chat_record.working_directory {
                let d = format!("file://{d}");
                if !directories.contains(&d) {
                    directories.push(d);
                }
            }
        }
        let schema = core
            .agent(&record.provider)
            .and_then(|a| a.schema.as_ref())
            .map(|s| s.schema.clone())
            .unwrap_or_else(empty_schema);
        let mut summaries = Vec::new();
        for (chat_record, turns) in chats {
            let transcripts: HashMap<String, String> =
                turns.iter().filter_map(|t| Some((t.turn.id.clone(), t.transcript_id.clone()?))).collect();
            let senders: HashMap<String, String> =
                turns.iter().filter_map(|t| Some((t.turn.id.clone(), t.sender.clone()?))).collect();
            let state = chat_state(&chat_record, turns.into_iter().map(|t| t.turn).collect());
            summaries.push(ChatSummary {
                resource: chat_record.uri.clone(),
                title: chat_record.title.clone(),
                status: state.status,
                activity: None,
                modified_at: state.modified_at.clone(),
                changes: chat_record.changes.clone(),
                origin: state.origin.clone(),
                movable: None,
                interactivity: None,
                working_directories: state.working_directories.clone(),
            });
            let titled = !state.turns.is_empty() || !chat_record.title.is_empty();
            core.ch.chats.insert(chat_record.uri.clone(), state);
            core.ch.mark_loaded(&chat_record.uri);
            let provider = chat_record.harness.as_ref().map_or(&record.provider, |h| &h.provider).clone();
            let after = core.retiring.remove(&chat_record.uri);
            let driver = spawn_driver(self.clone(), chat_record.uri.clone(), provider, after);
            core.chats.insert(
                chat_record.uri.clone(),
                ChatMeta {
                    session: uri.clone(),
                    conversation_id: chat_record.conversation_id.clone(),
                    started_in_backend: chat_record.started_in_backend,
                    driver,
                    live: None,
                    turn_clock: None,
                    client_started: false,
                    handing_over: None,
                    ended: VecDeque::new(),
                    steering_offered: None,
                    titled,
                    title: chat_record.title.clone(),
                    position: chat_record.position,
                    transcripts,
                    client_calls: HashMap::new(),
                    senders,
                    harness: chat_record.harness.clone(),
                    working_directory: chat_record.working_directory.as_ref().map(std::path::PathBuf::from),
                    cut: chat_record.cut.clone(),
                    resumable: chat_record.resumable,
                    parked: None,
                },
            );
        }
        let annotations_uri = format!("{uri}/annotations");
        let annotations_state = annotations
            .and_then(|a| serde_json::from_value::<AnnotationsState>(a).ok())
            .unwrap_or(AnnotationsState { annotations: Vec::new() });
        core.ch.annotations.insert(annotations_uri.clone(), annotations_state);
        core.ch.mark_loaded(&annotations_uri);
        let state = SessionState {
            provider: record.provider.clone(),
            title: record.title.clone(),
            status: status::IDLE | record.flags,
            activity: None,
            origin: record.origin.clone(),
            project: None,
            working_directories: (!directories.is_empty()).then_some(directories),
            annotations: None,
            lifecycle: SessionLifecycle::Ready,
            creation_error: None,
            server_tools: None,
            active_clients: Vec::new(),
            chats: summaries,
            default_chat: record.default_chat.clone(),
            config: Some(SessionConfigState { schema, values: record.config.clone() }),
            customizations: core.initial_customizations(&uri, &record.provider),
            changesets: None,
            input_needed: None,
            meta: core.with_commands(&record.provider, record.meta.clone()),
        };
        core.ch.sessions.insert(uri.clone(), state);
        core.ch.mark_loaded(&uri);
        let server_tools = core.server_tools(&uri);
        if let Some(state) = core.ch.sessions.get_mut(&uri) {
            state.server_tools = Some(server_tools);
        }
        let placeholder = core.placeholder_summary(&uri, &record.provider, &record.created_at);
        core.sessions.insert(
            uri.clone(),
            SessionMeta {
                provider: record.provider.clone(),
                created_at: record.created_at.clone(),
                working_directory: record.working_directory.as_ref().map(std::path::PathBuf::from),
                last_summary: placeholder,
                annotations: annotations_uri,
                owner: record.owner.clone(),
                parent: record.parent.clone(),
                depth: record.depth,
                // Stored: root subscribers were told of it when it was made, or by `listSessions`.
                announced: true,
                changes: record.changes.clone(),
            },
        );
        // What the session and its chats advertise follows their folders as they are now.
        let changesets = core.workspaces.session_changesets(core, &uri);
        if let Some(state) = core.ch.sessions.get_mut(&uri) {
            state.changesets = changesets;
        }
        for chat in core.chats_of(&uri) {
            let changesets = core.workspaces.chat_changesets(core, &chat);
            if let Some(state) = core.ch.chats.get_mut(&chat) {
                state.changesets = changesets;
            }
        }
        if let Some(summary) = core.summary_of(&uri) {
            if let Some(meta) = core.sessions.get_mut(&uri) {
                meta.last_summary = summary;
            }
        }
        tracing::debug!(session = %uri, "loaded from the store");
    }

    /// Ends, as failed, every turn that was running when the daemon last stopped, keeping what it
    /// said so far (resumable, when its backend resumes turns); a turn that had questions parked
    /// is restored instead, still waiting for them. Run once at start-up, once the workers said
    /// what they can do.
    pub fn recover_interrupted(&self) {
        let mut core = self.lock();
        // What each backend can do decides what becomes of its turns. The workers that started
        // said it in their handshakes, whose events may still be on their way to the host: it is
        // taken from the supervisor (the events say the same again when they arrive).
        for entry in core.agents.iter_mut().filter(|a| a.descriptor.is_none()) {
            if let Some(worker) = self.supervisor().current(&entry.provider) {
                entry.descriptor = Some(worker.descriptor);
            }
        }
        let interrupted = match core.store.interrupted() {
            Ok(list) => list,
            Err(e) => {
                tracing::error!("could not read interrupted turns: {e}");
                return;
            }
        };
        for (chat, value) in interrupted {
            let Ok(active) = serde_json::from_value::<ActiveTurn>(value) else {
                tracing::warn!(chat, "an unreadable checkpoint of an interrupted turn; dropped");
                continue;
            };
            if !self.ensure_loaded(&mut core, &chat) {
                tracing::warn!(chat, "a checkpoint of a chat that is not stored; dropped");
                continue;
            }
            if self.restore_parked(&mut core, &chat, &active) {
                continue;
            }
            let resumable = core.abilities(&chat).resume_turn;
            let turn = interrupted_turn(active, resumable);
            // What it used before it stopped was reported, so it is banked.
            let usage = turn.usage.clone();
            tracing::warn!(chat, turn = %turn.id, "a turn was running when ahpd stopped; it is ended as failed");
            // A resumed turn was stored once when it failed: it takes that place again.
            let stored = core.store.turn_position(&chat, &turn.id).ok().flatten();
            let position = stored.unwrap_or_else(|| core.store.turn_count(&chat).unwrap_or(0));
            let record = TurnRecord { turn: turn.clone(), transcript_id: None, sender: None };
            // The turn and its session's bank land in the store together, as an ending does.
            let together = core.store.savepoint("turn_end").is_ok();
            let written = core.store.save_turn(&chat, position, &record);
            core.kept(written, Record::Turns(chat.clone(), usize::try_from(position).unwrap_or(0)));
            // The chat was loaded without it: it joins the loaded state as it joined the store.
            if let Some(state) = core.ch.chats.get_mut(&chat) {
                match state.turns.iter().position(|t| t.id == turn.id) {
                    Some(at) => state.turns[at] = turn,
                    None => state.turns.push(turn),
                }
                state.status = (state.status & !status::ACTIVITY) | status::ERROR;
            }
            core.sync_chat(&chat);
            core.bank_usage(&chat, usage.as_ref());
            if let Some(session) = core.chats.get(&chat).map(|m| m.session.clone()) {
                core.persist_session(&session);
            }
            if together {
                let released = core.store.release("turn_end");
                core.kept(released, Record::Chat(chat.clone()));
            }
        }
    }

    /// Under a users directory, looks at the users file every second, so a person removed or
    /// demoted is cut off even while nothing they do reaches the host.
    pub fn watch_users(&self) {
        if self.lock().users.is_none() {
            return;
        }
        let host = self.clone();
        self.spawn("users file watch", async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                host.lock().refresh_users();
            }
        });
    }

    /// While the store cannot write, probes it every two seconds; once it can, what it missed is
    /// written from memory and every client is told (the root config's `storeCannotWrite`
    /// empties). A trouble another room's write met is shown on the next tick, and a store file
    /// deleted or replaced while nothing was written is written again at its path.
    pub fn watch_store(&self) {
        let host = self.clone();
        self.spawn("store health", async move {
            let mut tick = tokio::time::interval(STORE_PROBE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let mut core = host.lock();
                if core.store.trouble().is_some() || !core.unkept.is_empty() || core.store.moved() {
                    core.retry_store();
                }
            }
        });
    }

    /// Checkpoints running turns every half second until the daemon stops.
    pub fn run_checkpoints(&self) {
        let host = self.clone();
        self.spawn("turn checkpoints", async move {
            let mut tick = tokio::time::interval(CHECKPOINT_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let mut core = host.lock();
                let dirty: Vec<String> = core.running_dirty.drain().collect();
                for chat in dirty {
                    core.checkpoint(&chat);
                }
            }
        });
    }
}
