//! Sessions a backend keeps that this host never held (seed 004's `list`, `find` and
//! `transcript`): Claude's own conversations under the folders it serves, say. They are listed
//! beside the store's; the first time a client opens one, its turns are read back (nothing is
//! started) and it becomes a stored session like any other, whose next message resumes the
//! backend's conversation.

use std::time::Duration;

use ahp_types::commands::ListSessionsParams;
use protocol::{At, FindParams, FindResult, ListResult, Listed, TranscriptParams, TranscriptResult};
use serde_json::{json, Value};

use super::core::{channel_kind, ChannelKind};
use super::errors::AhpError;
use super::{ForeignRow, Host};
use crate::store::records::{ChatRecord, SessionRecord, TurnRecord};

/// How long one agent may take to list its sessions, find one, or read one back.
const ASK_WITHIN: Duration = Duration::from_secs(10);

/// The session URI a backend's conversation is served under.
pub fn session_uri(id: &str) -> String {
    format!("ahp-session:/{id}")
}

/// The backend id a session or chat URI names, when it names one at all.
fn backend_id(uri: &str) -> Option<&str> {
    match channel_kind(uri)? {
        ChannelKind::Session => uri.strip_prefix("ahp-session:/"),
        ChannelKind::Chat => uri.strip_prefix("ahp-chat:/"),
        _ => None,
    }
}

/// The summary a row is listed under.
fn summary_of(provider: &str, row: &Listed) -> Value {
    let mut summary = json!({
        "resource": session_uri(&row.id),
        "provider": provider,
        "title": row.title,
        "status": super::catalog::status::IDLE,
        "createdAt": row.created_at,
        "modifiedAt": row.modified_at,
    });
    if !row.working_directories.is_empty() {
        summary["workingDirectories"] = json!(row.working_directories);
    }
    summary
}

impl Host {
    /// The agents that are up now and answer `feature` (nothing waits for one that is starting).
    fn agents_answering(&self, feature: fn(&protocol::AgentFeatures) -> bool) -> Vec<String> {
        let core = self.lock();
        core.agents
            .iter()
            .filter(|a| a.descriptor.as_ref().is_some_and(|d| feature(&d.features)))
            .filter(|a| self.supervisor().current(&a.provider).is_some())
            .map(|a| a.provider.clone())
            .collect()
    }

    /// True when some agent lists sessions of its own.
    pub fn has_catalogue(&self) -> bool {
        !self.agents_answering(|f| f.list).is_empty()
    }

    async fn ask<P: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        provider: &str,
        method: &str,
        params: P,
    ) -> Option<R> {
        let worker = self.supervisor().current(provider)?;
        match tokio::time::timeout(ASK_WITHIN, worker.peer.request::<_, R>(method, params)).await {
            Ok(Ok(answer)) => Some(answer),
            Ok(Err(e)) => {
                tracing::warn!(provider, method, "the agent could not answer: {e}");
                None
            }
            Err(_) => {
                tracing::warn!(provider, method, "the agent did not answer within {} s", ASK_WITHIN.as_secs());
                None
            }
        }
    }

    /// Every row a listing agent holds that the store does not, newest first; remembered so
    /// opening one needs no second pass.
    pub async fn foreign_rows(&self) -> Vec<ForeignRow> {
        let mut rows = Vec::new();
        for provider in self.agents_answering(|f| f.list) {
            let listed: Option<ListResult> = self.ask(&provider, protocol::methods::parent::LIST, json!({})).await;
            for row in listed.map(|l| l.sessions).unwrap_or_default() {
                rows.push(ForeignRow { provider: provider.clone(), row });
            }
        }
        let mut core = self.lock();
        // The conversations this host's own chats hold are listed by their backend too.
        let mut held = core.store.conversation_ids().unwrap_or_default();
        held.extend(core.chats.values().map(|meta| meta.conversation_id.clone()));
        rows.retain(|r| {
            let uri = session_uri(&r.row.id);
            !held.contains(&r.row.id)
                && !core.ch.sessions.contains_key(&uri)
                && !core.store.has_session(&uri).unwrap_or(true)
        });
        rows.sort_by(|a, b| b.row.modified_at.cmp(&a.row.modified_at).then(a.row.id.cmp(&b.row.id)));
        core.foreign = rows.iter().map(|r| (session_uri(&r.row.id), r.clone())).collect();
        rows
    }

    /// `listSessions` with the backends' own sessions and the remote hosts' merged in, page by page in the store's
    /// order (newest first, then by URI); the first page asks the agents afresh.
    pub async fn list_with_catalogue(&self, params: ListSessionsParams) -> Result<Value, AhpError> {
        let first_page = params.cursor.is_none();
        let rows: Vec<ForeignRow> =
            if first_page { self.foreign_rows().await } else { self.lock().foreign.values().cloned().collect() };
        let mut page = self.list_sessions_page(params)?;
        let limit = page.limit;
        let after = page.after.clone();
        let mut items: Vec<(String, String, Value)> = page
            .items
            .drain(..)
            .map(|v| {
                let modified = v["modifiedAt"].as_str().unwrap_or_default().to_owned();
                let uri = v["resource"].as_str().unwrap_or_default().to_owned();
                (modified, uri, v)
            })
            .collect();
        for r in &rows {
            let key = (r.row.modified_at.clone(), session_uri(&r.row.id));
            let past_cursor =
                after.as_ref().is_none_or(|(m, u)| key.0 < *m || (key.0 == *m && key.1.as_str() > u.as_str()));
            if past_cursor {
                items.push((key.0, key.1, summary_of(&r.provider, &r.row)));
            }
        }
        // Other hosts' sessions, mirrored here (`mirrors.rs`), beside this host's own.
        let remote = self.lock().remotes.clone().map(|r| r.sessions()).unwrap_or_default();
        for summary in remote {
            let key = (
                summary["modifiedAt"].as_str().unwrap_or_default().to_owned(),
                summary["resource"].as_str().unwrap_or_default().to_owned(),
            );
            let past_cursor =
                after.as_ref().is_none_or(|(m, u)| key.0 < *m || (key.0 == *m && key.1.as_str() > u.as_str()));
            if past_cursor {
                items.push((key.0, key.1, summary));
            }
        }
        items.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let more = items.len() > limit || page.store_has_more;
        items.truncate(limit);
        let mut result = json!({ "items": items.iter().map(|(_, _, v)| v.clone()).collect::<Vec<_>>() });
        if more {
            if let Some((modified, uri, _)) = items.last() {
                result["nextCursor"] = Value::String(super::catalog::encode_cursor(modified, uri));
            }
        }
        Ok(result)
    }

    /// Opens a session a backend holds and this host does not: its turns are read back, nothing
    /// is started, and it is stored like any other. Answers whether the channel now exists.
    pub async fn import_foreign(&self, uri: &str) -> bool {
        let Some(id) = backend_id(uri).map(str::to_owned) else { return false };
        let session = session_uri(&id);
        let remembered = self.lock().foreign.get(&session).cloned();
        let found = match remembered {
            Some(row) => Some(row),
            None => self.find_foreign(&id).await,
        };
        let Some(ForeignRow { provider, row }) = found else { return false };
        let at = At {
            working_directory: row
                .working_directories
                .first()
                .and_then(|d| super::catalog::path_of(d))
                .map(|p| p.display().to_string()),
        };
        // What this host kept for the conversation's parts, named again by the same references.
        let kept = self.lock().resources.clone().map(|r| r.kept_for(&session, &format!("ahp-chat:/{id}")));
        let params = TranscriptParams { id: id.clone(), at: at.clone(), kept: kept.unwrap_or_default() };
        let read: Option<TranscriptResult> = self.ask(&provider, protocol::methods::parent::TRANSCRIPT, params).await;
        let turns = read.and_then(|r| r.turns).unwrap_or_default();
        let mut core = self.lock();
        if !core.ch.sessions.contains_key(&session) && !core.store.has_session(&session).unwrap_or(true) {
            if let Err(e) = store_foreign(&core, &provider, &row, at.working_directory, turns) {
                tracing::error!(session, "could not keep a backend's session: {e}");
                return false;
            }
            tracing::info!(session, provider, "opened a session the agent held");
        }
        core.foreign.remove(&session);
        self.ensure_loaded(&mut core, uri)
    }

    /// Asks every agent that finds sessions for `id`; an agent that lists but cannot find is
    /// asked for its whole list.
    async fn find_foreign(&self, id: &str) -> Option<ForeignRow> {
        for provider in self.agents_answering(|f| f.find) {
            let found: Option<FindResult> = self
                .ask(&provider, protocol::methods::parent::FIND, FindParams { id: id.to_owned(), at: At::default() })
                .await;
            if let Some(row) = found.and_then(|f| f.session) {
                return Some(ForeignRow { provider, row });
            }
        }
        let rows = self.foreign_rows().await;
        rows.into_iter().find(|r| r.row.id == id)
    }
}

/// Writes a backend's session to the store as if this host had held it from the start: one
/// chat, its conversation the backend's, already started there (the next message resumes it).
fn store_foreign(
    core: &super::Core,
    provider: &str,
    row: &Listed,
    working_directory: Option<String>,
    turns: Vec<ahp_types::state::Turn>,
) -> Result<(), String> {
    let session = session_uri(&row.id);
    let chat = format!("ahp-chat:/{}", row.id);
    let record: SessionRecord = serde_json::from_value(json!({
        "uri": session,
        "provider": provider,
        "createdAt": row.created_at,
        "title": row.title,
        "workingDirectory": working_directory,
        "defaultChat": chat,
    }))
    .map_err(|e| e.to_string())?;
    let chat_record: ChatRecord = serde_json::from_value(json!({
        "uri": chat,
        "session": session,
        "position": 0,
        "title": row.title,
        "conversationId": row.id,
        "startedInBackend": true,
        "modifiedAt": row.modified_at,
    }))
    .map_err(|e| e.to_string())?;
    core.store.save_session(&record, &summary_of(provider, row)).map_err(|e| e.to_string())?;
    core.store.save_chat(&chat_record).map_err(|e| e.to_string())?;
    for (position, turn) in turns.into_iter().enumerate() {
        let record = TurnRecord { turn, transcript_id: None, sender: None };
        core.store.save_turn(&chat, i64::try_from(position).unwrap_or(i64::MAX), &record).map_err(|e| e.to_string())?;
    }
    Ok(())
}
