//! Following sessions and chats from the terminal: channel states folded through the official
//! reducers (`ahp::reducers`), sessions resolved to their default chat, and a turn's reply written
//! to stdout as it streams (tool calls and questions on stderr), for `ahpd send` and `ahpd watch`.

use std::collections::HashMap;
use std::io::Write;

use ahp::reducers::{apply_action_to_chat, apply_action_to_session};
use ahp::SubscriptionEvent;
use ahp_types::actions::{ActionEnvelope, StateAction};
use ahp_types::state::{ChatState, SessionLifecycle, SessionState, SnapshotState};
use serde_json::Value;

use super::remote::Connection;

/// The states of the channels a verb watches, folded from their snapshots and envelopes.
#[derive(Default)]
pub struct Folded {
    /// Sessions by URI.
    pub sessions: HashMap<String, SessionState>,
    /// Chats by URI.
    pub chats: HashMap<String, ChatState>,
    from_seq: HashMap<String, i64>,
}

impl Folded {
    /// Folds an envelope into the channel it names; answers false for one the snapshot held, a
    /// rejection, or a channel not watched.
    pub fn fold(&mut self, env: &ActionEnvelope) -> bool {
        if env.rejection_reason.is_some() {
            return false;
        }
        let Some(from) = self.from_seq.get(&env.channel) else { return false };
        if i64::try_from(env.server_seq).unwrap_or(i64::MAX) <= *from {
            return false;
        }
        if let Some(s) = self.sessions.get_mut(&env.channel) {
            apply_action_to_session(s, &env.action);
        } else if let Some(c) = self.chats.get_mut(&env.channel) {
            apply_action_to_chat(c, &env.action);
        }
        true
    }
}

impl Connection {
    /// Subscribes to `uri` and folds from its snapshot on.
    pub async fn watch(&self, folded: &mut Folded, uri: &str) -> Result<(), String> {
        let (result, _handle) =
            self.client.subscribe(uri.to_owned()).await.map_err(|e| format!("could not watch {uri}: {e}"))?;
        let snapshot = result.snapshot.ok_or_else(|| format!("{uri} has no state to watch"))?;
        folded.from_seq.insert(uri.to_owned(), snapshot.from_seq);
        match snapshot.state {
            SnapshotState::Session(s) => {
                folded.sessions.insert(uri.to_owned(), *s);
            }
            SnapshotState::Chat(c) => {
                folded.chats.insert(uri.to_owned(), *c);
            }
            _ => return Err(format!("{uri} is neither a session nor a chat")),
        }
        Ok(())
    }

    /// The next event; `Err` once the daemon has gone away.
    pub async fn next(&mut self) -> Result<(String, SubscriptionEvent), String> {
        self.events
            .recv()
            .await
            .map(|e| (e.channel, e.event))
            .ok_or_else(|| "The connection to the daemon closed.".to_owned())
    }

    /// Watches `session` until it is ready; answers its default chat. Events on other channels
    /// that arrive meanwhile are folded too.
    pub async fn default_chat(&mut self, folded: &mut Folded, session: &str) -> Result<String, String> {
        self.watch(folded, session).await?;
        loop {
            if let Some(s) = folded.sessions.get(session) {
                match s.lifecycle {
                    SessionLifecycle::Ready => {
                        if let Some(chat) =
                            s.default_chat.clone().or_else(|| s.chats.first().map(|c| c.resource.clone()))
                        {
                            return Ok(chat);
                        }
                    }
                    SessionLifecycle::Failed => {
                        let why = s.creation_error.as_ref().map_or("no reason given".to_owned(), |e| e.message.clone());
                        return Err(format!("{session} could not start: {why}"));
                    }
                    _ => {}
                }
            }
            if let (_, SubscriptionEvent::Action(env)) = self.next().await? {
                folded.fold(&env);
            }
        }
    }
}

/// Accepts a session's URI or its bare id.
pub fn session_uri(given: &str) -> String {
    if given.starts_with("ahp-session:") {
        given.to_owned()
    } else {
        format!("ahp-session:/{given}")
    }
}

/// An action as JSON, to read its fields by name.
pub fn fields(action: &StateAction) -> Value {
    serde_json::to_value(action).unwrap_or(Value::Null)
}

/// An action built from JSON (the wire form).
pub fn action(value: Value) -> Result<StateAction, String> {
    serde_json::from_value(value).map_err(|e| format!("could not build the action: {e}"))
}

/// `StringOrMarkdown` as text.
pub fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Object(o) => o.get("markdown").and_then(Value::as_str).unwrap_or_default().to_owned(),
        _ => String::new(),
    }
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    /// It completed.
    Complete,
    /// It was cancelled.
    Cancelled,
    /// It failed, with the reason.
    Failed(String),
}

/// Writes one turn's reply as it streams: the markdown text to stdout, separated when a new part
/// begins; tool calls, their results and what waits for a person to stderr.
#[derive(Default)]
pub struct Printer {
    last_part: Option<String>,
    wrote: bool,
    ends_in_newline: bool,
}

impl Printer {
    /// Takes one action of the followed turn; answers how the turn ended, when it did.
    pub fn take(&mut self, a: &Value) -> Option<End> {
        match a["type"].as_str().unwrap_or_default() {
            "chat/responsePart" => {
                let part = &a["part"];
                if part["kind"] == "markdown" {
                    if let Some(content) = part["content"].as_str().filter(|c| !c.is_empty()) {
                        self.write(part["id"].as_str().unwrap_or_default(), content);
                    }
                }
            }
            "chat/delta" => {
                self.write(a["partId"].as_str().unwrap_or_default(), a["content"].as_str().unwrap_or_default())
            }
            "chat/toolCallStart" => {
                self.note(&format!("• {}", a["displayName"].as_str().or(a["toolName"].as_str()).unwrap_or("tool")));
            }
            "chat/toolCallComplete" => {
                let result = &a["result"];
                let mark = if result["success"].as_bool() == Some(false) { "✗" } else { "✓" };
                self.note(&format!("  {mark} {}", text(&result["pastTenseMessage"])));
            }
            "chat/turnComplete" => return Some(self.end(End::Complete)),
            "chat/turnCancelled" => return Some(self.end(End::Cancelled)),
            "chat/error" => {
                let error = &a["part"]["error"];
                let why = format!(
                    "{}: {}",
                    error["errorType"].as_str().unwrap_or("error"),
                    error["message"].as_str().unwrap_or("the turn failed")
                );
                return Some(self.end(End::Failed(why)));
            }
            _ => {}
        }
        None
    }

    fn write(&mut self, part: &str, content: &str) {
        if content.is_empty() {
            return;
        }
        let mut out = std::io::stdout().lock();
        if self.wrote && self.last_part.as_deref() != Some(part) {
            let _ = out.write_all(if self.ends_in_newline { b"\n" } else { b"\n\n" });
        }
        let _ = out.write_all(content.as_bytes());
        let _ = out.flush();
        self.last_part = Some(part.to_owned());
        self.wrote = true;
        self.ends_in_newline = content.ends_with('\n');
    }

    /// A line on stderr, after finishing the reply's current line.
    pub fn note(&mut self, line: &str) {
        self.finish_line();
        eprintln!("{line}");
    }

    fn finish_line(&mut self) {
        if self.wrote && !self.ends_in_newline {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(b"\n");
            let _ = out.flush();
            self.ends_in_newline = true;
        }
    }

    fn end(&mut self, end: End) -> End {
        self.finish_line();
        *self = Self::default();
        end
    }
}
