//! [`TurnMapper`]: pi's records for one AHP turn, said through a [`TurnWriter`].
//!
//! One AHP turn spans a prompt and everything pi does for it: several pi turns (an assistant message
//! and its tools), injected steering messages, and automatic retries. Text and thinking deltas become
//! markdown and reasoning parts, tool executions tool calls with their output, and the turn ends by
//! the research note's rules: `agent_end` is not the end when pi retries or compacts and runs again.
//! Those follow-ups are written in the same tick as `agent_end`, so after `agent_end` the driver asks
//! pi a question (a *barrier*); what arrived before its answer decides. The mapper is a plain state
//! machine: the driver feeds it records and does what the returned [`Step`] says.

use std::collections::{HashMap, HashSet};

use agent_runner::engine::calls::Calls;
use agent_runner::{tool_result, Question, TurnEnd, TurnWriter};
use ahp_types::actions::{ChatToolCallContentChangedAction, StateAction};
use ahp_types::state::{
    ToolCallClientContributor, ToolCallContributor, ToolResultContent, ToolResultTextContent, UsageInfo,
};
use serde_json::Value;

use crate::event::{content_text, PiMessage, PiRecord, StreamEvent};

/// What the driver does after a record.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Nothing.
    Continue,
    /// Ask pi anything and call [`TurnMapper::on_barrier`] when its answer arrives.
    Barrier,
    /// The turn ended (the writer said how).
    Ended,
}

/// How a tool the host offers is drawn.
#[derive(Debug, Clone, Default)]
pub struct HostTool {
    /// The name a client reads.
    pub display_name: String,
    /// The client that runs it; none for the host's own tools.
    pub owner: Option<String>,
    /// It waits for a person before it runs (the engine's policy, from the effects its spec
    /// declares), so it is not said running when pi starts it.
    pub asks: bool,
}

/// The tools the host and its clients offer, by the name the model calls.
pub type ToolCatalog = HashMap<String, HostTool>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The prompt is being handed over; no run yet.
    Preparing,
    /// Between `agent_start` and `agent_end`.
    Running,
    /// After `agent_end`, waiting for the barrier.
    Settling,
    /// pi said it runs again (a retry, or compaction that retries).
    Again,
    /// Overflow compaction after `agent_end`; its end says whether pi runs again.
    Compacting,
    /// The ending was said.
    Ended,
}

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Complete,
    Cancelled,
    Failed(String),
}

/// What the mapper keeps of one tool call, beside the engine's bookkeeping of what was said of it
/// ([`Calls`]).
#[derive(Debug, Default)]
struct Call {
    tool_name: String,
    display_name: String,
    host_tool: bool,
    /// A host tool that waits for a person: said ready when the bridge asks to run it.
    asks: bool,
    input: Option<Value>,
}

/// Maps one AHP turn. Build it when the turn is handed, feed it pi's records.
pub struct TurnMapper {
    writer: TurnWriter,
    phase: Phase,
    abort_requested: bool,
    outcome: Outcome,
    assistant_messages: u32,
    user_messages: u32,
    block: Option<(u32, u64)>,
    streamed: HashSet<(u32, u64)>,
    block_calls: HashMap<(u32, u64), String>,
    calls: Calls<Call>,
    usage: (i64, i64, i64, i64),
    model: Option<String>,
    entry_recorded: bool,
}

impl TurnMapper {
    /// A mapper for the turn `writer` says.
    pub fn new(writer: TurnWriter) -> Self {
        Self {
            writer,
            phase: Phase::Preparing,
            abort_requested: false,
            outcome: Outcome::Complete,
            assistant_messages: 0,
            user_messages: 0,
            block: None,
            streamed: HashSet::new(),
            block_calls: HashMap::new(),
            calls: Calls::default(),
            usage: (0, 0, 0, 0),
            model: None,
            entry_recorded: false,
        }
    }

    /// The AHP turn's id.
    pub fn turn_id(&self) -> &str {
        self.writer.turn_id()
    }

    /// The writer the turn is said through.
    pub fn writer(&mut self) -> &mut TurnWriter {
        &mut self.writer
    }

    /// Says the turn's ending (the engine's: a stop, a failure) while pi's run goes on being
    /// followed to its end, which [`Step::Ended`] says.
    pub fn say_end(&mut self, end: TurnEnd) {
        self.writer.end(end);
    }

    /// True once the ending was said.
    pub fn is_ended(&self) -> bool {
        self.phase == Phase::Ended
    }

    /// True while pi runs the turn's prompt (a steering message can be taken).
    pub fn is_running(&self) -> bool {
        self.phase == Phase::Running
    }

    /// True before pi started the run.
    pub fn is_preparing(&self) -> bool {
        self.phase == Phase::Preparing
    }

    /// A stop was asked: however the run ends now, the turn is cancelled.
    pub fn request_abort(&mut self) {
        self.abort_requested = true;
    }

    /// True once a stop was asked.
    pub fn abort_requested(&self) -> bool {
        self.abort_requested
    }

    /// Ends the turn now (pi refused the prompt, pi went away, the session closes).
    pub fn finish(&mut self, end: TurnEnd) -> Step {
        if self.phase == Phase::Ended {
            return Step::Continue;
        }
        let end = if self.abort_requested { TurnEnd::Cancelled } else { end };
        self.writer.end(end);
        self.phase = Phase::Ended;
        Step::Ended
    }

    fn settle(&mut self) -> Step {
        let end = match self.outcome.clone() {
            Outcome::Complete => TurnEnd::Complete,
            Outcome::Cancelled => TurnEnd::Cancelled,
            Outcome::Failed(message) => TurnEnd::Error(agent_runner::error_info("agentRunFailed", message)),
        };
        self.finish(end)
    }

    /// The session entry pi wrote a user message as; answers it for the turn's first user message
    /// (the prompt), so the driver records the turn under it.
    pub fn user_entry(&mut self, entry_id: &str) -> Option<String> {
        if self.entry_recorded || self.phase == Phase::Ended {
            return None;
        }
        self.entry_recorded = true;
        Some(entry_id.to_owned())
    }

    /// A notice inside the turn (a compaction).
    pub fn notification(&mut self, text: &str) {
        self.block = None;
        self.writer.notification(text);
    }

    /// The barrier asked after `agent_end` was answered: nothing said pi runs again, so the turn
    /// ends as its last assistant message did.
    pub fn on_barrier(&mut self) -> Step {
        if self.phase == Phase::Settling {
            return self.settle();
        }
        Step::Continue
    }

    /// The bridge asks whether pi may run one of its own tools; `question` is set when a person
    /// decides (the call waits), none when it runs without asking.
    pub fn gate(&mut self, tool_call_id: &str, tool_name: &str, input: &Value, question: Option<Question>) {
        self.start_call(tool_call_id, tool_name, &ToolCatalog::new());
        let Some(call) = self.calls.get_mut(tool_call_id) else { return };
        call.of.input = Some(input.clone());
        let invocation = invocation_message(&call.of);
        let input = Some(input.to_string());
        match question {
            Some(question) => self.calls.asks(&mut self.writer, tool_call_id, &invocation, input, question),
            None => {
                self.calls.running(&mut self.writer, tool_call_id, &invocation, input);
            }
        }
    }

    /// A person denied the call: the client's own action cancelled it, so its end is not said.
    pub fn denied(&mut self, tool_call_id: &str) {
        self.calls.answered(tool_call_id, false);
    }

    /// Feeds one record pi wrote.
    pub fn on_record(&mut self, record: &PiRecord, tools: &ToolCatalog) -> Step {
        if self.phase == Phase::Ended {
            return Step::Continue;
        }
        match record {
            PiRecord::AgentStart => {
                self.phase = Phase::Running;
                self.outcome = Outcome::Complete;
            }
            PiRecord::MessageStart { message } => self.message_start(message),
            PiRecord::MessageUpdate { assistant_message_event } => self.stream(assistant_message_event, tools),
            PiRecord::MessageEnd { message } => self.message_end(message),
            PiRecord::ToolExecutionStart { tool_call_id, tool_name, args } => {
                self.start_call(tool_call_id, tool_name, tools);
                let Some(call) = self.calls.get_mut(tool_call_id) else { return Step::Continue };
                call.of.input = Some(args.clone());
                if call.of.host_tool && !call.of.asks {
                    let invocation = invocation_message(&call.of);
                    self.calls.running(&mut self.writer, tool_call_id, &invocation, Some(args.to_string()));
                }
            }
            PiRecord::ToolExecutionUpdate { tool_call_id, partial_result } => {
                self.tool_output(tool_call_id, partial_result);
            }
            PiRecord::ToolExecutionEnd { tool_call_id, tool_name, result, is_error } => {
                self.tool_end(tool_call_id, tool_name, result, *is_error, tools);
            }
            PiRecord::AgentEnd { messages } => {
                if let Some(last) = messages.iter().rev().find(|m| m.role == "assistant") {
                    self.outcome = outcome_of(last);
                }
                self.phase = Phase::Settling;
                return Step::Barrier;
            }
            PiRecord::AgentSettled { aborted } => {
                if aborted.unwrap_or(false) {
                    self.outcome = Outcome::Cancelled;
                }
                return self.settle();
            }
            PiRecord::AutoRetryStart { .. } => {
                if matches!(self.phase, Phase::Settling | Phase::Running) {
                    self.phase = Phase::Again;
                }
            }
            PiRecord::AutoRetryEnd { success: false, final_error } => {
                if matches!(self.phase, Phase::Settling | Phase::Again) {
                    let message = final_error.clone().unwrap_or_else(|| "The model failed after retries.".to_owned());
                    self.outcome = Outcome::Failed(message);
                    return self.settle();
                }
            }
            PiRecord::CompactionStart { reason } if reason == "overflow" && self.phase == Phase::Settling => {
                self.phase = Phase::Compacting;
                self.writer.notification("The conversation was too long for the model: compacting it.");
            }
            PiRecord::CompactionEnd { will_retry, error_message, aborted, .. } if self.phase == Phase::Compacting => {
                if *will_retry && !*aborted {
                    self.phase = Phase::Again;
                } else {
                    if let Some(message) = error_message {
                        self.outcome = Outcome::Failed(message.clone());
                    }
                    return self.settle();
                }
            }
            _ => {}
        }
        Step::Continue
    }

    fn message_start(&mut self, message: &PiMessage) {
        match message.role.as_str() {
            "assistant" => {
                self.assistant_messages += 1;
                self.block = None;
                self.writer.end_part();
            }
            "user" => {
                self.user_messages += 1;
                // The prompt is the turn's own message; a later one is a steering or follow-up
                // message pi took in, said where it arrived.
                if self.user_messages > 1 {
                    self.block = None;
                    self.writer.notification(&message.text());
                }
            }
            // Custom messages (the host's hidden instructions among them) are never shown.
            _ => {}
        }
    }

    fn message_end(&mut self, message: &PiMessage) {
        if message.role != "assistant" {
            return;
        }
        self.outcome = outcome_of(message);
        if let (Some(provider), Some(model)) = (&message.provider, &message.model) {
            self.model = Some(format!("{provider}/{model}"));
        }
        if let Some(usage) = message.usage {
            self.usage.0 += usage.input;
            self.usage.1 += usage.output;
            self.usage.2 += usage.cache_read;
            self.usage.3 += usage.cache_write;
            let mut meta = serde_json::Map::new();
            meta.insert("cacheWriteTokens".into(), Value::from(self.usage.3));
            self.writer.usage(UsageInfo {
                input_tokens: Some(self.usage.0),
                output_tokens: Some(self.usage.1),
                model: self.model.clone(),
                cache_read_tokens: Some(self.usage.2),
                meta: Some(meta),
            });
        }
    }

    fn stream(&mut self, event: &StreamEvent, tools: &ToolCatalog) {
        let key = (self.assistant_messages, event.content_index.unwrap_or(0));
        match event.kind.as_str() {
            "text_delta" => self.text(key, event.delta.as_deref().unwrap_or_default(), false),
            "thinking_delta" => self.text(key, event.delta.as_deref().unwrap_or_default(), true),
            // A block that never streamed arrives whole at its end.
            "text_end" if !self.streamed.contains(&key) => {
                self.text(key, event.content.as_deref().unwrap_or_default(), false)
            }
            "thinking_end" if !self.streamed.contains(&key) => {
                self.text(key, event.content.as_deref().unwrap_or_default(), true)
            }
            "toolcall_start" | "toolcall_end" => {
                if let (Some(id), name) = event.tool_call_ref() {
                    self.block_calls.insert(key, id.clone());
                    self.start_call(&id, name.as_deref().unwrap_or("tool"), tools);
                    if let Some(arguments) = event.tool_call.as_ref().and_then(|c| c.get("arguments")) {
                        if let Some(call) = self.calls.get_mut(&id) {
                            call.of.input = Some(arguments.clone());
                        }
                    }
                }
            }
            "toolcall_delta" => {
                let delta = event.delta.as_deref().unwrap_or_default();
                let id = self.block_calls.get(&key).cloned().or_else(|| event.tool_call_ref().0);
                if let (Some(id), false) = (id, delta.is_empty()) {
                    if self.calls.contains(&id) {
                        self.writer.tool_input_delta(&id, delta);
                    }
                }
            }
            _ => {}
        }
    }

    fn text(&mut self, key: (u32, u64), content: &str, thinking: bool) {
        if content.is_empty() {
            return;
        }
        if self.block != Some(key) {
            self.writer.end_part();
            self.block = Some(key);
        }
        self.streamed.insert(key);
        if thinking {
            self.writer.reasoning(content);
        } else {
            self.writer.text(content);
        }
    }

    fn start_call(&mut self, tool_call_id: &str, tool_name: &str, tools: &ToolCatalog) {
        if self.calls.contains(tool_call_id) {
            return;
        }
        let host = tools.get(tool_name);
        let display_name = host.map(|t| t.display_name.clone()).unwrap_or_else(|| display_name_of(tool_name));
        let contributor = host
            .and_then(|t| t.owner.clone())
            .map(|client_id| ToolCallContributor::Client(ToolCallClientContributor { client_id }));
        // A client's tool is drawn (and run by its client) under the client's own name.
        let shown_name = if contributor.is_some() { display_name.clone() } else { tool_name.to_owned() };
        self.block = None;
        let call = Call {
            tool_name: tool_name.to_owned(),
            display_name: display_name.clone(),
            host_tool: host.is_some(),
            asks: host.is_some_and(|t| t.asks),
            input: None,
        };
        self.calls.start(&mut self.writer, tool_call_id, &shown_name, &display_name, contributor, call);
    }

    fn tool_output(&mut self, tool_call_id: &str, partial: &Value) {
        let Some(call) = self.calls.get(tool_call_id) else { return };
        if !call.ready || call.done || self.writer.is_ended() {
            return;
        }
        let text = content_text(partial.get("content").unwrap_or(&Value::Null));
        if text.is_empty() {
            return;
        }
        self.writer.host().emit_chat(StateAction::ChatToolCallContentChanged(ChatToolCallContentChangedAction {
            turn_id: self.writer.turn_id().to_owned(),
            tool_call_id: tool_call_id.to_owned(),
            meta: None,
            content: vec![ToolResultContent::Text(ToolResultTextContent { text })],
        }));
    }

    fn tool_end(&mut self, tool_call_id: &str, tool_name: &str, result: &Value, is_error: bool, tools: &ToolCatalog) {
        self.start_call(tool_call_id, tool_name, tools);
        let Some(call) = self.calls.get(tool_call_id) else { return };
        let invocation = invocation_message(&call.of);
        let past = past_tense_message(&call.of, !is_error);
        let input = call.of.input.as_ref().map(Value::to_string);
        // Readied first where nobody asked; a call a person denied is said no more.
        self.calls.running(&mut self.writer, tool_call_id, &invocation, input);
        let content = result.get("content").unwrap_or(&Value::Null);
        let text = content_text(content);
        let mut outcome = tool_result(!is_error, past, None, is_error.then_some(text));
        if !is_error && self.calls.get(tool_call_id).is_some_and(|c| !c.done) {
            // Its text, then each image it returned, kept by the host under its place.
            let host = self.writer.host().clone();
            outcome.content = Some(crate::event::shown_content(content, tool_call_id, tool_name, &host));
        }
        self.calls.complete(&mut self.writer, tool_call_id, outcome);
    }
}

fn outcome_of(message: &PiMessage) -> Outcome {
    match message.stop_reason.as_deref() {
        Some("aborted") => Outcome::Cancelled,
        Some("error") => Outcome::Failed(
            message.error_message.clone().unwrap_or_else(|| "The model answered with an error.".to_owned()),
        ),
        _ => Outcome::Complete,
    }
}

/// The name a person reads for one of pi's tools.
pub fn display_name_of(tool_name: &str) -> String {
    let mut chars = tool_name.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => "Tool".to_owned(),
    }
}

fn invocation_message(call: &Call) -> String {
    describe(&call.tool_name, &call.display_name, call.host_tool, call.input.as_ref()).0
}

fn past_tense_message(call: &Call, success: bool) -> String {
    if !success {
        return format!("{} failed", call.display_name);
    }
    describe(&call.tool_name, &call.display_name, call.host_tool, call.input.as_ref()).1
}

/// What a call is doing and what it did, in a person's words: `Running echo hi` / `Ran echo hi`.
pub fn describe(tool_name: &str, display_name: &str, host_tool: bool, input: Option<&Value>) -> (String, String) {
    if host_tool {
        return (format!("Calling {display_name}"), format!("Called {display_name}"));
    }
    let field = |key: &str| input.and_then(|i| i.get(key)).and_then(Value::as_str).map(str::to_owned);
    match (tool_name, field("command"), field("path")) {
        ("bash", Some(command), _) => (format!("Running {command}"), format!("Ran {command}")),
        ("read", _, Some(path)) => (format!("Reading {path}"), format!("Read {path}")),
        ("edit", _, Some(path)) => (format!("Editing {path}"), format!("Edited {path}")),
        ("write", _, Some(path)) => (format!("Writing {path}"), format!("Wrote {path}")),
        _ => (format!("Running {display_name}"), format!("Ran {display_name}")),
    }
}

#[cfg(test)]
#[path = "mapper_tests.rs"]
mod tests;
