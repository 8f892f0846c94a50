//! The sessions an ACP agent keeps itself (seed 004's `list`, `find` and `transcript`), for an
//! agent that declared `sessionCapabilities.list`: listed with `session/list` (every page), and one
//! read back as turns from what `session/load` replays (the user's words and the agent's answer per
//! turn, as a fork reads its source, [`crate::fork::History`]). Each asks a short-lived agent
//! process of its own ([`crate::visit`]); nothing of a conversation runs. Resuming one is any
//! chat's resume: its next message `session/load`s it.

use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1 as acp;
use agent_client_protocol_schema::v1::{SessionUpdate, AGENT_METHOD_NAMES};
use ahp_types::state::Turn;
use protocol::Listed;
use serde_json::json;

use crate::fork::{Exchange, History};
use crate::options::AcpOptions;
use crate::visit::Visit;

/// At most this many `session/list` pages are read (an agent whose cursor never ends is cut off).
const MAX_PAGES: usize = 50;

/// What the agent said: its sessions, and whether it lists at all (`sessionCapabilities.list`).
pub struct Listing {
    /// It declared `sessionCapabilities.list`.
    pub lists: bool,
    /// Its sessions, as the parent lists them.
    pub sessions: Vec<Listed>,
}

/// Every session the agent lists, asked of a process started in `folder`.
pub async fn list(provider: &str, options: &AcpOptions, folder: &Path) -> Result<Listing, String> {
    let visit = Visit::start(provider, options, folder, "listing this agent's sessions")?;
    let listed = async {
        let init = visit.initialize().await?;
        if init.agent_capabilities.session_capabilities.list.is_none() {
            return Ok(Listing { lists: false, sessions: Vec::new() });
        }
        let mut sessions = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_PAGES {
            let request = acp::ListSessionsRequest::new().cursor(cursor.take());
            let page: acp::ListSessionsResponse = visit.ask(AGENT_METHOD_NAMES.session_list, request).await?;
            sessions.extend(page.sessions.iter().map(row_of));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        Ok(Listing { lists: true, sessions })
    };
    let listed = tokio::time::timeout(options.start_timeout, listed)
        .await
        .unwrap_or_else(|_| Err(format!("{provider}: {} did not list its sessions in time", options.command_line())));
    visit.stop().await;
    listed
}

/// The rows less those that ran in `folder` (the worker's own, where the probe opens its session).
pub fn without_folder(rows: Vec<Listed>, folder: &Path) -> Vec<Listed> {
    let own = format!("file://{}", folder.display());
    rows.into_iter().filter(|row| row.working_directories.first() != Some(&own)).collect()
}

/// A `session/list` row as the parent lists it: a session without a time of its own is dated at
/// the start of the epoch, so it sorts last.
fn row_of(info: &acp::SessionInfo) -> Listed {
    let at = info.updated_at.clone().unwrap_or_else(|| "1970-01-01T00:00:00.000Z".to_owned());
    let folders = std::iter::once(&info.cwd).chain(&info.additional_directories);
    Listed {
        id: info.session_id.to_string(),
        title: info.title.clone().filter(|t| !t.trim().is_empty()).unwrap_or_else(|| "Untitled".to_owned()),
        created_at: at.clone(),
        modified_at: at,
        working_directories: folders.map(|f| format!("file://{}", f.display())).collect(),
    }
}

/// The session `id` read back as turns from what `session/load` replays in `cwd` (the folder it
/// ran in); `None` when the agent cannot load sessions.
pub async fn transcript(
    provider: &str,
    options: &AcpOptions,
    folder: &Path,
    id: &str,
    cwd: PathBuf,
) -> Result<Option<Vec<Turn>>, String> {
    let mut visit = Visit::start(provider, options, folder, "reading one of this agent's sessions back")?;
    let read = async {
        let init = visit.initialize().await?;
        if !init.agent_capabilities.load_session {
            return Ok(None);
        }
        let load = acp::LoadSessionRequest::new(id.to_owned(), cwd);
        visit.ask_value(AGENT_METHOD_NAMES.session_load, load).await?;
        // The replay is said before the answer, so it is all there now.
        let mut history = History::default();
        while let Ok(notification) = visit.updates.try_recv() {
            if crate::subagents::parent_call(&notification.update).is_some() {
                continue;
            }
            match &notification.update {
                SessionUpdate::UserMessageChunk(acp::ContentChunk {
                    content: acp::ContentBlock::Text(text), ..
                }) => history.user(&text.text),
                SessionUpdate::AgentMessageChunk(acp::ContentChunk {
                    content: acp::ContentBlock::Text(text), ..
                }) => history.agent(&text.text),
                _ => {}
            }
        }
        Ok(Some(turns_of(id, &history.kept(0))?))
    };
    let read = tokio::time::timeout(options.start_timeout, read).await.unwrap_or_else(|_| {
        Err(format!("{provider}: {} did not read session {id} back in time", options.command_line()))
    });
    visit.stop().await;
    read
}

/// The exchanges as AHP turns, each named by the session and its place (the same each time the
/// session is read back).
fn turns_of(id: &str, exchanges: &[Exchange]) -> Result<Vec<Turn>, String> {
    exchanges
        .iter()
        .enumerate()
        .map(|(n, exchange)| {
            let turn_id = format!("{id}:{n}");
            let parts = if exchange.agent.is_empty() {
                json!([])
            } else {
                json!([{ "kind": "markdown", "id": format!("{turn_id}:0"), "content": exchange.agent }])
            };
            let turn = json!({
                "id": turn_id,
                "message": { "text": exchange.user, "origin": { "kind": "user" } },
                "responseParts": parts,
                "state": "complete",
            });
            serde_json::from_value(turn).map_err(|e| format!("a turn read back is not an AHP turn: {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_session_is_a_row_with_its_folders() {
        let info: acp::SessionInfo = serde_json::from_value(json!({
            "sessionId": "s-1", "cwd": "/work/p", "title": "Fix the build", "updatedAt": "2026-01-02T03:04:05.000Z"
        }))
        .expect("info");
        let row = row_of(&info);
        assert_eq!(row.id, "s-1");
        assert_eq!(row.title, "Fix the build");
        assert_eq!(row.modified_at, "2026-01-02T03:04:05.000Z");
        assert_eq!(row.working_directories, vec!["file:///work/p".to_owned()]);
        let bare: acp::SessionInfo = serde_json::from_value(json!({"sessionId": "s-2", "cwd": "/w"})).expect("info");
        assert_eq!(row_of(&bare).title, "Untitled");
        let kept = without_folder(vec![row, row_of(&bare)], Path::new("/w"));
        assert_eq!(kept.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["s-1"], "the probe's own is left out");
    }

    #[test]
    fn exchanges_read_back_as_complete_turns() {
        let mut history = History::default();
        history.user("remember MANGO");
        history.agent("ok");
        history.user("and?");
        let turns = turns_of("s", &history.kept(0)).expect("turns");
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[0].id, "s:0");
        assert_eq!(turns[0].message.text, "remember MANGO");
        assert_eq!(turns[1].response_parts.len(), 0);
    }
}
