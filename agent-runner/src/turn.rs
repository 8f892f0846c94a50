//! [`TurnWriter`]: says one turn's actions in the shapes seed 004's silent-failure rules require.
//!
//! Every backend streams text, thinking and tool calls; the rules for doing so (a part exists
//! before it streams, deltas go to markdown parts and reasoning to reasoning parts, a tool call
//! creates its own part, exactly one ending with a real duration) are kept here once, so a backend
//! only says what happened.

use std::time::Instant;

use ahp_types::actions::{
    ChatDeltaAction, ChatErrorAction, ChatInputRequestedAction, ChatReasoningAction, ChatResponsePartAction,
    ChatToolCallCompleteAction, ChatToolCallContentChangedAction, ChatToolCallDeltaAction, ChatToolCallReadyAction,
    ChatToolCallStartAction, ChatTurnCancelledAction, ChatTurnCompleteAction, ChatTurnStartedAction, ChatUsageAction,
    StateAction,
};
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    ChatInputRequest, ConfirmationOption, ErrorInfo, ErrorResponsePart, MarkdownResponsePart, Message,
    ReasoningResponsePart, ResponsePart, SystemNotificationResponsePart, ToolCallConfirmationReason,
    ToolCallContributor, ToolCallResult, ToolInput, UsageInfo,
};
use serde_json::Value;

use crate::host::SessionHost;

/// An RFC 3339 timestamp with milliseconds, as AHP's reducers expect.
pub fn now_iso() -> String {
    format!("{:.3}", jiff::Timestamp::now())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Streaming {
    Markdown,
    Reasoning,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEnd {
    /// It worked.
    Complete,
    /// It was stopped.
    Cancelled,
    /// It failed, with what went wrong.
    Error(ErrorInfo),
}

/// What opens the prompt of a turn that goes on after the process that ran it was lost
/// (`session/resumeTurn`): the model is told to carry on rather than begin again.
pub const RESUMED: &str = "(This request was cut off before you finished it: the program that ran you stopped. \
Carry on with it from where you were; what you did already is done.)";

/// What a lost turn sends its backend again (`session/resumeTurn`): its words after [`RESUMED`],
/// with the attachments it carried, and apart, what a person answered to its parked questions.
pub fn resumed_request(params: protocol::ResumeTurnParams) -> (protocol::SendMessageParams, Vec<protocol::Decision>) {
    let protocol::ResumeTurnParams { chat, turn_id, mut message, decisions, attachments } = params;
    message.text = format!("{RESUMED}\n\n{}", message.text);
    let request =
        protocol::SendMessageParams { chat, turn_id, message, instructions: None, unattended: false, attachments };
    (request, decisions)
}

/// A confirmation question on a tool call: what `chat/toolCallReady` carries when it waits.
#[derive(Debug, Clone, Default)]
pub struct Question {
    /// The title a client shows above Allow and Deny.
    pub title: String,
    /// The agent's own choices, approvals first.
    pub options: Option<Vec<ConfirmationOption>>,
    /// Host-only fields (permissionKind, permissionPath, shellCommand, ...), taken off before a
    /// client sees the call.
    pub meta: Option<serde_json::Map<String, Value>>,
}

/// Says the actions of one turn. Cheap to move into the task that streams it.
pub struct TurnWriter {
    host: SessionHost,
    turn_id: String,
    /// What part ids begin with (the turn's id, and a mark of its own for a resumed turn).
    part_prefix: String,
    started: Instant,
    next_part: u32,
    open: Option<(Streaming, String)>,
    ended: bool,
    stamp: bool,
}

impl TurnWriter {
    /// A writer for a turn the host said (handed with `sendMessage`).
    pub fn new(host: SessionHost, turn_id: impl Into<String>) -> Self {
        let turn_id = turn_id.into();
        Self {
            host,
            part_prefix: turn_id.clone(),
            turn_id,
            started: Instant::now(),
            next_part: 0,
            open: None,
            ended: false,
            stamp: false,
        }
    }

    /// A writer for a turn the host moved back to running (`resumeTurn`): the parts it says
    /// follow the ones the turn holds already, under ids of their own.
    pub fn resuming(host: SessionHost, turn_id: impl Into<String>) -> Self {
        static RESUMES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut writer = Self::new(host, turn_id);
        // Unique among the writers this worker made, and among any worker's before it.
        let nanos = jiff::Timestamp::now().as_nanosecond().unsigned_abs() & 0xffff_ffff;
        let count = RESUMES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        writer.part_prefix = format!("{}:r{nanos:x}{count:x}", writer.turn_id);
        writer
    }

    /// Starts a turn of the agent's own accord: says its start before anything else, as seed 004's
    /// first silent rule requires.
    pub fn start_own(host: SessionHost, turn_id: impl Into<String>, message: Message) -> Self {
        let writer = Self::new(host, turn_id);
        writer.host.emit_chat(StateAction::ChatTurnStarted(ChatTurnStartedAction {
            turn_id: writer.turn_id.clone(),
            started_at: now_iso(),
            message,
            queued_message_id: None,
            meta: None,
        }));
        writer
    }

    /// Puts the time each delta was said (`_meta["ahpd.emittedAtUnixNs"]`) on it, so a benchmark
    /// can measure from emit to receipt.
    pub fn stamped(mut self, stamp: bool) -> Self {
        self.stamp = stamp;
        self
    }

    fn stamp_meta(&self) -> Option<ahp_types::common::JsonObject> {
        if !self.stamp {
            return None;
        }
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let mut meta = ahp_types::common::JsonObject::new();
        meta.insert("ahpd.emittedAtUnixNs".into(), Value::from(u64::try_from(nanos).unwrap_or(u64::MAX)));
        Some(meta)
    }

    /// The turn's id.
    pub fn turn_id(&self) -> &str {
        &self.turn_id
    }

    /// The host handle this writer says things through.
    pub fn host(&self) -> &SessionHost {
        &self.host
    }

    /// True once an ending was said.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Milliseconds since the turn began.
    pub fn duration_ms(&self) -> i64 {
        i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    fn part_id(&mut self) -> String {
        let id = format!("{}:{}", self.part_prefix, self.next_part);
        self.next_part += 1;
        id
    }

    fn emit(&self, action: StateAction) {
        if !self.ended {
            self.host.emit_chat(action);
        }
    }

    /// Streams answer text: appended to the open markdown part, or opening one with it.
    pub fn text(&mut self, content: &str) {
        self.stream(Streaming::Markdown, content);
    }

    /// Streams thinking: appended to the open reasoning part, or opening one with it.
    pub fn reasoning(&mut self, content: &str) {
        self.stream(Streaming::Reasoning, content);
    }

    fn stream(&mut self, kind: Streaming, content: &str) {
        if content.is_empty() || self.ended {
            return;
        }
        if let Some((open, id)) = &self.open {
            if *open == kind {
                let (turn_id, part_id, content) = (self.turn_id.clone(), id.clone(), content.to_owned());
                let meta = self.stamp_meta();
                self.emit(match kind {
                    Streaming::Markdown => StateAction::ChatDelta(ChatDeltaAction { turn_id, part_id, content, meta }),
                    Streaming::Reasoning => {
                        StateAction::ChatReasoning(ChatReasoningAction { turn_id, part_id, content, meta: None })
                    }
                });
                return;
            }
        }
        let id = self.part_id();
        let part = match kind {
            Streaming::Markdown => {
                ResponsePart::Markdown(MarkdownResponsePart { id: id.clone(), content: content.to_owned() })
            }
            Streaming::Reasoning => {
                ResponsePart::Reasoning(ReasoningResponsePart { id: id.clone(), content: content.to_owned() })
            }
        };
        self.emit(StateAction::ChatResponsePart(ChatResponsePartAction {
            turn_id: self.turn_id.clone(),
            part,
            meta: None,
        }));
        self.open = Some((kind, id));
    }

    /// Ends the open text or thinking part; the next chunk opens a new one.
    pub fn end_part(&mut self) {
        self.open = None;
    }

    /// A notice inside the turn (a compaction boundary, a retry).
    pub fn notification(&mut self, text: &str) {
        self.end_part();
        let part = ResponsePart::SystemNotification(SystemNotificationResponsePart {
            content: StringOrMarkdown::Plain(text.to_owned()),
            meta: None,
        });
        self.emit(StateAction::ChatResponsePart(ChatResponsePartAction {
            turn_id: self.turn_id.clone(),
            part,
            meta: None,
        }));
    }

    /// A tool call begins streaming; it creates its own part.
    pub fn tool_start(
        &mut self,
        tool_call_id: &str,
        tool_name: &str,
        display_name: &str,
        contributor: Option<ToolCallContributor>,
    ) {
        self.end_part();
        self.emit(StateAction::ChatToolCallStart(ChatToolCallStartAction {
            turn_id: self.turn_id.clone(),
            tool_call_id: tool_call_id.to_owned(),
            meta: None,
            tool_name: tool_name.to_owned(),
            display_name: display_name.to_owned(),
            intention: None,
            contributor,
        }));
    }

    /// Streams a tool call's input as it is written.
    pub fn tool_input_delta(&mut self, tool_call_id: &str, content: &str) {
        self.emit(StateAction::ChatToolCallDelta(ChatToolCallDeltaAction {
            turn_id: self.turn_id.clone(),
            tool_call_id: tool_call_id.to_owned(),
            meta: None,
            content: Some(content.to_owned()),
            invocation_message: None,
        }));
    }

    /// The call's input is whole and it runs without asking (`confirmed: not-needed`).
    pub fn tool_running(&mut self, tool_call_id: &str, invocation_message: &str, input: Option<String>) {
        self.tool_ready(tool_call_id, invocation_message, input, None, Some(ToolCallConfirmationReason::NotNeeded));
    }

    /// The call waits to be allowed: no `confirmed`, and the question's fields.
    pub fn tool_asks(
        &mut self,
        tool_call_id: &str,
        invocation_message: &str,
        input: Option<String>,
        question: Question,
    ) {
        self.tool_ready(tool_call_id, invocation_message, input, Some(question), None);
    }

    fn tool_ready(
        &mut self,
        tool_call_id: &str,
        invocation_message: &str,
        input: Option<String>,
        question: Option<Question>,
        confirmed: Option<ToolCallConfirmationReason>,
    ) {
        let (title, options, meta) = match question {
            Some(q) => (Some(StringOrMarkdown::Plain(q.title)), q.options, q.meta),
            None => (None, None, None),
        };
        self.emit(StateAction::ChatToolCallReady(ChatToolCallReadyAction {
            turn_id: self.turn_id.clone(),
            tool_call_id: tool_call_id.to_owned(),
            meta,
            contributor: None,
            intention: None,
            invocation_message: StringOrMarkdown::Plain(invocation_message.to_owned()),
            tool_input: input.map(ToolInput::Inline),
            confirmation_title: title,
            risk_assessment: None,
            edits: None,
            editable: None,
            confirmed,
            options,
        }));
    }

    /// What a running call shows so far (its output, a plan being rewritten), replacing what it
    /// showed before.
    pub fn tool_content(&mut self, tool_call_id: &str, content: Vec<ahp_types::state::ToolResultContent>) {
        self.emit(StateAction::ChatToolCallContentChanged(ChatToolCallContentChangedAction {
            turn_id: self.turn_id.clone(),
            tool_call_id: tool_call_id.to_owned(),
            meta: None,
            content,
        }));
    }

    /// The call finished: one result object, `success: false` for a failure.
    pub fn tool_complete(&mut self, tool_call_id: &str, result: ToolCallResult) {
        self.emit(StateAction::ChatToolCallComplete(ChatToolCallCompleteAction {
            turn_id: self.turn_id.clone(),
            tool_call_id: tool_call_id.to_owned(),
            meta: None,
            result,
            requires_result_confirmation: None,
        }));
    }

    /// A question that is not about a tool; it creates its own part.
    pub fn input_requested(&mut self, request: ChatInputRequest) {
        self.end_part();
        self.emit(StateAction::ChatInputRequested(ChatInputRequestedAction { request }));
    }

    /// What the turn used so far.
    pub fn usage(&mut self, usage: UsageInfo) {
        self.emit(StateAction::ChatUsage(ChatUsageAction { turn_id: self.turn_id.clone(), usage, meta: None }));
    }

    /// Ends the turn with exactly one action and a real duration; later calls do nothing.
    pub fn end(&mut self, end: TurnEnd) {
        if self.ended {
            return;
        }
        let (turn_id, duration) = (self.turn_id.clone(), self.duration_ms());
        let action = match end {
            TurnEnd::Complete => {
                StateAction::ChatTurnComplete(ChatTurnCompleteAction { turn_id, duration, meta: None })
            }
            TurnEnd::Cancelled => {
                StateAction::ChatTurnCancelled(ChatTurnCancelledAction { turn_id, duration, meta: None })
            }
            TurnEnd::Error(error) => StateAction::ChatError(ChatErrorAction {
                turn_id,
                duration,
                part: ErrorResponsePart { error, resumable: None },
                meta: None,
            }),
        };
        self.emit(action);
        self.ended = true;
    }

    /// Ends the turn as complete.
    pub fn complete(&mut self) {
        self.end(TurnEnd::Complete);
    }

    /// Ends the turn as cancelled.
    pub fn cancelled(&mut self) {
        self.end(TurnEnd::Cancelled);
    }

    /// Ends the turn in error.
    pub fn error(&mut self, error_type: &str, message: impl Into<String>) {
        self.end(TurnEnd::Error(error_info(error_type, message)));
    }
}

/// An `ErrorInfo` with a type and a sentence.
pub fn error_info(error_type: &str, message: impl Into<String>) -> ErrorInfo {
    ErrorInfo { error_type: error_type.to_owned(), message: message.into(), stack: None, meta: None }
}

/// A tool result: one object, as a client spreads it over the call.
pub fn tool_result(
    success: bool,
    past_tense: impl Into<String>,
    text: Option<String>,
    error: Option<String>,
) -> ToolCallResult {
    use ahp_types::state::{ToolResultContent, ToolResultTextContent};
    ToolCallResult {
        success,
        past_tense_message: StringOrMarkdown::Plain(past_tense.into()),
        content: text.map(|text| vec![ToolResultContent::Text(ToolResultTextContent { text })]),
        structured_content: None,
        error: error.map(Value::String),
    }
}
