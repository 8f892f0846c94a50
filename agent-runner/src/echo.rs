//! The `echo` test agent: seed 004's smallest agent. It says the text back, in several deltas, in
//! the voice its session is configured with. No model, no subprocess.

use std::sync::Arc;
use std::time::Duration;

use ahp_types::common::JsonObject;
use ahp_types::state::{ErrorInfo, UsageInfo};
use async_trait::async_trait;
use protocol::{
    AgentDescriptor, AgentFeatures, InitializeParams, Policy, ResumeTurnParams, SchemaResult, SendMessageParams,
    SetConfigResult, Start, SteerParams,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::{accepted, not_offered, not_writable, Agent, AgentError, Session};
use crate::engine::{Backend, Engine, Mapper, Settled, State};
use crate::host::SessionHost;
use crate::turn::{TurnEnd, TurnWriter};

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
    let voice = crate::schema::choice(
        "Voice",
        "How the echo says your words back",
        "plain",
        &VOICES,
        &["Plain", "Shouty", "Backwards", "Whisper"],
    );
    crate::schema::schema_of(vec![("voice", voice)])
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
        let backend = EchoBackend { pace: self.pace, chunk_words: self.chunk_words, stamp: self.stamp };
        Ok(Arc::new(EchoSession(Engine::start(host, backend, settings))))
    }
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

/// Echo on the session engine: its runtime is the turn itself, said chunk by chunk.
struct EchoBackend {
    pace: Duration,
    chunk_words: usize,
    stamp: bool,
}

/// The running turn, and the steering messages it took and has not said yet.
struct EchoTurn {
    writer: TurnWriter,
    steering: Vec<String>,
}

impl Mapper for EchoTurn {
    fn writer(&mut self) -> &mut TurnWriter {
        &mut self.writer
    }
}

impl EchoTurn {
    /// Says the steering messages taken since the last chunk, where they came in.
    fn steered(&mut self, voice: &str) {
        for s in std::mem::take(&mut self.steering) {
            self.writer.text(&format!("\n\n(steered: {})", in_voice(voice, &s)));
        }
    }
}

#[async_trait]
impl Backend for EchoBackend {
    /// The session's settings.
    type State = JsonObject;
    type Turn = EchoTurn;
    type Reply = ();

    fn open(&self, _settings: &mut JsonObject, writer: TurnWriter, _params: &SendMessageParams) -> EchoTurn {
        EchoTurn { writer: writer.stamped(self.stamp), steering: Vec::new() }
    }

    async fn begin(&self, engine: &Engine<Self>, params: SendMessageParams) -> Result<(), ErrorInfo> {
        let (voice, stop) = {
            let mut state = engine.lock();
            if !state.mark_sent(&params.turn_id) {
                return Ok(());
            }
            let voice = state.own.get("voice").and_then(Value::as_str).unwrap_or("plain").to_owned();
            (voice, state.stop_token().unwrap_or_default())
        };
        let text = if params.message.text.trim().is_empty() {
            "(nothing to say)".to_owned()
        } else {
            params.message.text.clone()
        };
        let answer = in_voice(&voice, &text);
        let mut said_words = 0i64;
        for chunk in chunks(&answer, self.chunk_words) {
            if self.pause(&stop).await.is_err() {
                break;
            }
            said_words += 1;
            let mut state = engine.lock();
            let Some(turn) = state.sent() else { break };
            turn.writer.text(&chunk);
            turn.steered(&voice);
        }
        let mut state = engine.lock();
        if let Some(turn) = state.sent() {
            // A steering message that arrived during the last pause is still this turn's.
            turn.steered(&voice);
            turn.writer.usage(UsageInfo {
                input_tokens: Some(i64::try_from(text.split_whitespace().count()).unwrap_or(0)),
                output_tokens: Some(said_words),
                model: None,
                cache_read_tokens: None,
                meta: None,
            });
        }
        // Complete, or (stopped) cancelled already.
        engine.end_turn(&mut state, TurnEnd::Complete);
        Ok(())
    }

    fn interrupt(&self, _engine: &Engine<Self>, _state: &mut State<Self>) {
        // The turn's own pause sees its stop.
    }

    fn settle(&self, _engine: &Engine<Self>, _state: &mut State<Self>, _reply: (), _settled: Settled) {}

    async fn stop(&self, _engine: &Engine<Self>, _running: bool) {}
}

impl EchoBackend {
    async fn pause(&self, stop: &CancellationToken) -> Result<(), ()> {
        if stop.is_cancelled() {
            return Err(());
        }
        if self.pace.is_zero() {
            tokio::task::yield_now().await;
            return Ok(());
        }
        tokio::select! {
            _ = stop.cancelled() => Err(()),
            _ = tokio::time::sleep(self.pace) => Ok(()),
        }
    }
}

struct EchoSession(Arc<Engine<EchoBackend>>);

#[async_trait]
impl Session for EchoSession {
    async fn send_message(&self, params: SendMessageParams) -> Result<(), AgentError> {
        self.0.send_message(params)
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
        self.0.resume(params, Vec::new())
    }

    async fn abort(&self, _turn_id: Option<String>) -> Result<(), AgentError> {
        self.0.abort();
        Ok(())
    }

    async fn steer(&self, params: SteerParams) -> Result<bool, AgentError> {
        let mut state = self.0.lock();
        if state.turn_id() != Some(params.turn_id.as_str()) {
            return Ok(false);
        }
        match state.sent() {
            Some(turn) => {
                turn.steering.push(params.message.text);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn set_config(&self, key: String, value: Value) -> Result<SetConfigResult, AgentError> {
        if key != "voice" {
            return Ok(not_writable(&key));
        }
        match value.as_str() {
            Some(voice) if VOICES.contains(&voice) => {
                self.0.lock().own.insert(key, value);
                Ok(accepted())
            }
            _ => Ok(not_offered(&key, &value)),
        }
    }

    async fn settings(&self) -> JsonObject {
        self.0.lock().own.clone()
    }

    async fn close(&self) {
        self.0.close().await;
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
