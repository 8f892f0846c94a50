//! The `echo` test agent: seed 004's smallest agent. It says the text back, in several deltas, in
//! the voice its session is configured with. No model, no subprocess.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ahp_types::common::JsonObject;
use ahp_types::state::{SessionConfigPropertySchema, SessionConfigSchema, UsageInfo};
use async_trait::async_trait;
use protocol::{
    AgentDescriptor, AgentFeatures, InitializeParams, Policy, ResumeTurnParams, SchemaResult, SendMessageParams,
    SetConfigResult, Start, SteerParams,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::{accepted, not_offered, not_writable, Agent, AgentError, Session};
use crate::host::SessionHost;
use crate::sync::lock;
use crate::turn::TurnWriter;

const VOICES: [&str; 4] = ["plain", "shouty", "backwards", "whisper"];

/// The echo agent. Options: `paceMs` (pause between deltas, default 20) and `chunkWords` (words
/// per delta, default 1).
pub struct Echo {
    pace: Duration,
    chunk_words: usize,
    stamp: bool,
}

impl Echo {
    /// Builds the agent from its config entry's options.
    pub fn from_init(init: &InitializeParams) -> Self {
        let pace = init.options.get("paceMs").and_then(Value::as_u64).unwrap_or(20);
        let chunk_words = init.options.get("chunkWords").and_then(Value::as_u64).unwrap_or(1).max(1);
        let stamp = init.options.get("stamp").and_then(Value::as_bool).unwrap_or(false);
        Self { pace: Duration::from_millis(pace), chunk_words: usize::try_from(chunk_words).unwrap_or(1), stamp }
    }
}

/// The schema echo and its sessions share: one key, `voice`.
pub fn echo_schema() -> SchemaResult {
    let voice = SessionConfigPropertySchema {
        r#type: "string".into(),
        title: "Voice".into(),
        description: Some("How the echo says your words back".into()),
        default: Some(Value::String("plain".into())),
        r#enum: Some(VOICES.iter().map(|v| Value::String((*v).into())).collect()),
        enum_labels: Some(vec!["Plain".into(), "Shouty".into(), "Backwards".into(), "Whisper".into()]),
        enum_descriptions: None,
        read_only: None,
        items: None,
        min_items: None,
        max_items: None,
        properties: None,
        required: None,
        additional_properties: None,
        enum_dynamic: None,
        session_mutable: Some(true),
    };
    let mut defaults = JsonObject::new();
    defaults.insert("voice".into(), Value::String("plain".into()));
    SchemaResult {
        schema: SessionConfigSchema {
            r#type: "object".into(),
            properties: [("voice".to_owned(), voice)].into_iter().collect(),
            required: None,
        },
        defaults,
    }
}

#[async_trait]
impl Agent for Echo {
    fn descriptor(&self) -> AgentDescriptor {
        AgentDescriptor {
            provider: "echo".into(),
            display_name: "Echo".into(),
            description: Some("Says your words back; no model, no subprocess".into()),
            // It keeps no conversation, so it goes on from any cut and forks at any turn exactly.
            capabilities: Some(crate::agent::forking_chats()),
            features: AgentFeatures {
                steering: true,
                resume: true,
                truncate: true,
                resume_turn: true,
                ..AgentFeatures::default()
            },
        }
    }

    fn schema(&self, _policy: &Policy) -> SchemaResult {
        echo_schema()
    }

    async fn create(&self, start: Start, host: SessionHost) -> Result<Arc<dyn Session>, AgentError> {
        let mut settings = echo_schema().defaults;
        if let Some(Value::String(voice)) = start.settings.get("voice") {
            if VOICES.contains(&voice.as_str()) {
                settings.insert("voice".into(), Value::String(voice.clone()));
            }
        }
        let session = Arc::new(EchoSession {
            host,
            pace: self.pace,
            chunk_words: self.chunk_words,
            stamp: self.stamp,
            state: Mutex::new(EchoState { settings, queue: VecDeque::new(), running: None }),
        });
        Ok(Arc::new(session))
    }
}

struct Running {
    turn_id: String,
    cancel: CancellationToken,
    steering: Arc<Mutex<Vec<String>>>,
}

struct EchoState {
    settings: JsonObject,
    /// Turns handed, each with whether it runs again after it was lost (`resumeTurn`).
    queue: VecDeque<(SendMessageParams, bool)>,
    running: Option<Running>,
}

struct EchoSession {
    host: SessionHost,
    pace: Duration,
    chunk_words: usize,
    stamp: bool,
    state: Mutex<EchoState>,
}

/// Says `text` in `voice`.
pub fn in_voice(voice: &str, text: &str) -> String {
    match voice {
        "shouty" => text.to_uppercase(),
        "backwards" => text.chars().rev().collect(),
        "whisper" => text.to_lowercase(),
        _ => text.to_owned(),
    }
}

/// Splits `text` into chunks of `words` words, keeping the spaces, so the deltas join back exactly.
fn chunks(text: &str, words: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut count = 0;
    for (i, piece) in text.split_inclusive(' ').enumerate() {
        current.push_str(piece);
        count += 1;
        if count == words || i == 0 {
            out.push(std::mem::take(&mut current));
            count = 0;
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

impl EchoSession {
    /// Starts the next queued turn if none runs.
    fn pump(self: &Arc<Self>) {
        let (params, resumed, cancel, steering, voice) = {
            let mut state = lock(&self.state);
            if state.running.is_some() {
                return;
            }
            let Some((params, resumed)) = state.queue.pop_front() else {
                return;
            };
            let cancel = CancellationToken::new();
            let steering = Arc::new(Mutex::new(Vec::new()));
            state.running =
                Some(Running { turn_id: params.turn_id.clone(), cancel: cancel.clone(), steering: steering.clone() });
            let voice = state.settings.get("voice").and_then(Value::as_str).unwrap_or("plain").to_owned();
            (params, resumed, cancel, steering, voice)
        };
        let session = self.clone();
        tokio::spawn(async move {
            session.run_turn(params, resumed, cancel, steering, voice).await;
            lock(&session.state).running = None;
            session.pump();
        });
    }

    async fn run_turn(
        &self,
        params: SendMessageParams,
        resumed: bool,
        cancel: CancellationToken,
        steering: Arc<Mutex<Vec<String>>>,
        voice: String,
    ) {
        let writer = if resumed { TurnWriter::resuming } else { TurnWriter::new };
        let mut turn = writer(self.host.clone(), params.turn_id.clone()).stamped(self.stamp);
        let text = if params.message.text.trim().is_empty() {
            "(nothing to say)".to_owned()
        } else {
            params.message.text.clone()
        };
        let answer = in_voice(&voice, &text);
        let mut said_words = 0i64;
        for chunk in chunks(&answer, self.chunk_words) {
            if self.pause(&cancel).await.is_err() {
                turn.cancelled();
                return;
            }
            said_words += 1;
            turn.text(&chunk);
            let steered: Vec<String> = std::mem::take(&mut *lock(&steering));
            for s in steered {
                turn.text(&format!("\n\n(steered: {})", in_voice(&voice, &s)));
            }
        }
        // A steering message that arrived during the last pause is still this turn's.
        let steered: Vec<String> = std::mem::take(&mut *lock(&steering));
        for s in steered {
            turn.text(&format!("\n\n(steered: {})", in_voice(&voice, &s)));
        }
        turn.usage(UsageInfo {
            input_tokens: Some(i64::try_from(text.split_whitespace().count()).unwrap_or(0)),
            output_tokens: Some(said_words),
            model: None,
            cache_read_tokens: None,
            meta: None,
        });
        turn.complete();
    }

    async fn pause(&self, cancel: &CancellationToken) -> Result<(), ()> {
        if cancel.is_cancelled() {
            return Err(());
        }
        if self.pace.is_zero() {
            tokio::task::yield_now().await;
            return Ok(());
        }
        tokio::select! {
            _ = cancel.cancelled() => Err(()),
            _ = tokio::time::sleep(self.pace) => Ok(()),
        }
    }
}

#[async_trait]
impl Session for Arc<EchoSession> {
    async fn send_message(&self, params: SendMessageParams) -> Result<(), AgentError> {
        lock(&self.state).queue.push_back((params, false));
        self.pump();
        Ok(())
    }

    /// A lost turn goes on: the words are said again, after what the turn said before.
    async fn resume_turn(&self, params: ResumeTurnParams) -> Result<(), AgentError> {
        let ResumeTurnParams { chat, turn_id, message, .. } = params;
        let params = SendMessageParams {
            chat,
            turn_id,
            message,
            instructions: None,
            unattended: false,
            attachments: Vec::new(),
        };
        lock(&self.state).queue.push_back((params, true));
        self.pump();
        Ok(())
    }

    async fn abort(&self, _turn_id: Option<String>) -> Result<(), AgentError> {
        let mut state = lock(&self.state);
        state.queue.clear();
        if let Some(running) = &state.running {
            running.cancel.cancel();
        }
        Ok(())
    }

    async fn steer(&self, params: SteerParams) -> Result<bool, AgentError> {
        let state = lock(&self.state);
        match &state.running {
            Some(running) if running.turn_id == params.turn_id => {
                lock(&running.steering).push(params.message.text);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn set_config(&self, key: String, value: Value) -> Result<SetConfigResult, AgentError> {
        if key != "voice" {
            return Ok(not_writable(&key));
        }
        match value.as_str() {
            Some(voice) if VOICES.contains(&voice) => {
                lock(&self.state).settings.insert(key, value);
                Ok(accepted())
            }
            _ => Ok(not_offered(&key, &value)),
        }
    }

    async fn settings(&self) -> JsonObject {
        lock(&self.state).settings.clone()
    }

    async fn close(&self) {
        let _ = Session::abort(self, None).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_join_back_exactly() {
        let text = "the quick  brown fox";
        for words in 1..4 {
            let parts = chunks(text, words);
            assert!(parts.len() > 1);
            assert_eq!(parts.concat(), text);
        }
    }

    #[test]
    fn voices_change_the_answer() {
        assert_eq!(in_voice("shouty", "hi there"), "HI THERE");
        assert_eq!(in_voice("backwards", "abc"), "cba");
        assert_eq!(in_voice("whisper", "HI"), "hi");
        assert_eq!(in_voice("plain", "Hi"), "Hi");
    }
}
