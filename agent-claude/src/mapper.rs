//! One turn of the CLI's stream-json output, said as AHP actions through a [`TurnWriter`].
//!
//! The parser facts this keeps (shared/research/backends.md §1.6): a `system/init` line opens
//! **every** turn, not just the first; an `assistant` line carries **one finished content block**
//! (the same message id repeats), so it is never read as a whole message; partial `stream_event`s
//! carry the text and thinking as it is written, and an `assistant` block is only drawn when its
//! message was not streamed; lines of a subagent (`parent_tool_use_id` set) are not this turn's.
//!
//! A tool call is created by its `tool_use` block start (`chat/toolCallStart`, the CLI's tool-use
//! id as the call id). It is readied lazily: asking when the CLI asks `can_use_tool`, running
//! (`confirmed: not-needed`) when the host runs it or when its result arrives without a question.

use std::collections::{HashMap, HashSet};

use agent_runner::engine::calls::Calls;
use agent_runner::{error_info, tool_result, Question, TurnEnd, TurnWriter};
use ahp_types::state::UsageInfo;
use protocol::{ToolOutcome, ToolSpec};
use serde_json::{json, Value};

use crate::tools::{self, name_call, Named, Owner};

/// What the mapper keeps of one tool call of the turn, beside the engine's bookkeeping of what
/// was said of it ([`Calls`]).
#[derive(Debug, Clone)]
pub struct Call {
    /// Its names and owner.
    pub named: Named,
    /// Its input, once whole.
    pub input: Value,
}

/// Maps the lines of one turn.
pub struct TurnMapper {
    writer: TurnWriter,
    tools: Vec<ToolSpec>,
    /// The host keeps what a command printed as an exited terminal (`Start.terminalOutputs`).
    terminal_outputs: bool,
    calls: Calls<Call>,
    /// Stream block index → tool-use id, for `input_json_delta`s.
    open_tool_blocks: HashMap<u64, String>,
    /// API message ids whose blocks were streamed (their `assistant` lines are not drawn again).
    streamed: HashSet<String>,
    model: Option<String>,
}

fn is_subagent(line: &Value) -> bool {
    !line["parent_tool_use_id"].is_null()
}

impl TurnMapper {
    /// A mapper for the turn `writer` says, with the host's and clients' tools for naming calls.
    pub fn new(writer: TurnWriter, tools: Vec<ToolSpec>) -> Self {
        Self {
            writer,
            tools,
            terminal_outputs: false,
            calls: Calls::default(),
            open_tool_blocks: HashMap::new(),
            streamed: HashSet::new(),
            model: None,
        }
    }

    /// The writer, for what the session says itself (the ending, a notification).
    pub fn writer(&mut self) -> &mut TurnWriter {
        &mut self.writer
    }

    /// The turn's id.
    pub fn turn_id(&self) -> &str {
        self.writer.turn_id()
    }

    /// A call of this turn.
    pub fn call(&self, id: &str) -> Option<&Call> {
        self.calls.get(id).map(|c| &c.of)
    }

    /// The tools the calls are named from.
    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// Maps one stdout line that is not a control message. `result` lines are the session's.
    pub fn line(&mut self, line: &Value) {
        if is_subagent(line) {
            return;
        }
        match line["type"].as_str() {
            Some("stream_event") => self.stream_event(&line["event"]),
            Some("assistant") => self.assistant(&line["message"]),
            Some("user") => self.user(line),
            Some("system") => self.system(line),
            _ => {}
        }
    }

    fn stream_event(&mut self, event: &Value) {
        let index = event["index"].as_u64().unwrap_or(0);
        match event["type"].as_str() {
            Some("message_start") => {
                if let Some(id) = event["message"]["id"].as_str() {
                    self.streamed.insert(id.to_owned());
                }
                if let Some(model) = event["message"]["model"].as_str() {
                    self.model = Some(model.to_owned());
                }
            }
            Some("content_block_start") => {
                let block = &event["content_block"];
                self.writer.end_part();
                if block["type"] == "tool_use" {
                    if let (Some(id), Some(name)) = (block["id"].as_str(), block["name"].as_str()) {
                        self.start_call(id, name);
                        self.open_tool_blocks.insert(index, id.to_owned());
                    }
                }
            }
            Some("content_block_delta") => {
                let delta = &event["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => self.writer.text(delta["text"].as_str().unwrap_or("")),
                    Some("thinking_delta") => self.writer.reasoning(delta["thinking"].as_str().unwrap_or("")),
                    Some("input_json_delta") => {
                        let partial = delta["partial_json"].as_str().unwrap_or("");
                        if let Some(id) = self.open_tool_blocks.get(&index).cloned() {
                            let shows = self.call(&id).is_some_and(|c| c.named.owner != Owner::Question);
                            if shows && !partial.is_empty() {
                                self.writer.tool_input_delta(&id, partial);
                            }
                        }
                    }
                    _ => {}
                }
            }
            Some("content_block_stop") => {
                self.open_tool_blocks.remove(&index);
                self.writer.end_part();
            }
            _ => {}
        }
    }

    fn assistant(&mut self, message: &Value) {
        let streamed = message["id"].as_str().is_some_and(|id| self.streamed.contains(id));
        if let Some(model) = message["model"].as_str() {
            self.model = Some(model.to_owned());
        }
        for block in message["content"].as_array().map(Vec::as_slice).unwrap_or_default() {
            match block["type"].as_str() {
                Some("text") if !streamed => {
                    self.writer.end_part();
                    self.writer.text(block["text"].as_str().unwrap_or(""));
                    self.writer.end_part();
                }
                Some("thinking") if !streamed => {
                    self.writer.end_part();
                    self.writer.reasoning(block["thinking"].as_str().unwrap_or(""));
                    self.writer.end_part();
                }
                Some("tool_use") => {
                    let (Some(id), Some(name)) = (block["id"].as_str(), block["name"].as_str()) else { continue };
                    self.start_call(id, name);
                    if let Some(call) = self.calls.get_mut(id) {
                        call.of.input = block["input"].clone();
                    }
                }
                _ => {}
            }
        }
    }

    fn user(&mut self, line: &Value) {
        let content = &line["message"]["content"];
        for block in content.as_array().map(Vec::as_slice).unwrap_or_default() {
            if block["type"] != "tool_result" {
                continue;
            }
            let Some(id) = block["tool_use_id"].as_str() else { continue };
            let success = block["is_error"] != Value::Bool(true);
            let text = tools::result_text(&block["content"]);
            // Its images are kept only for a call that still waits for its result.
            let open = self.calls.get(id).filter(|c| !c.done).map(|c| c.of.named.tool_name.clone());
            let host = self.writer.host().clone();
            let images = open.map(|tool| tools::result_images(&block["content"], id, &tool, &host));
            let images = images.unwrap_or_default();
            self.complete_showing(id, success, text, None, images);
        }
    }

    fn system(&mut self, line: &Value) {
        match line["subtype"].as_str() {
            Some("init") => {
                if let Some(model) = line["model"].as_str() {
                    self.model = Some(model.to_owned());
                }
            }
            Some("compact_boundary") => {
                let meta = &line["compact_metadata"];
                let how = if meta["trigger"] == "auto" { "automatically" } else { "on request" };
                let text = match meta["pre_tokens"].as_u64() {
                    Some(tokens) => format!("The conversation was compacted {how} (it held {tokens} tokens)."),
                    None => format!("The conversation was compacted {how}."),
                };
                self.writer.notification(&text);
            }
            _ => {}
        }
    }

    /// Creates a call the first time its id is seen (`chat/toolCallStart`); a question is not a
    /// tool call and creates nothing.
    pub fn start_call(&mut self, id: &str, name: &str) {
        if self.calls.contains(id) {
            return;
        }
        let named = name_call(name, &self.tools);
        let (tool_name, display_name, contributor) =
            (named.tool_name.clone(), named.display_name.clone(), named.contributor());
        let call = Call { named, input: json!({}) };
        if call.named.owner == Owner::Question {
            self.calls.keep(id, call);
        } else {
            self.calls.start(&mut self.writer, id, &tool_name, &display_name, contributor, call);
        }
    }

    /// Sets a call's whole input (a `can_use_tool` or `tools/call` carries it).
    pub fn set_input(&mut self, id: &str, input: &Value) {
        if let Some(call) = self.calls.get_mut(id).filter(|_| input.is_object()) {
            call.of.input = input.clone();
        }
    }

    /// How a call reads while it runs, and its input as text.
    fn invocation(&self, id: &str) -> Option<(String, Option<String>)> {
        let call = self.call(id)?;
        Some((tools::invocation_message(&call.named, &call.input), Some(call.input.to_string())))
    }

    /// The call waits for a person: `chat/toolCallReady` without `confirmed`.
    pub fn ask(&mut self, id: &str, question: Question) {
        let Some((invocation, input)) = self.invocation(id) else { return };
        self.calls.asks(&mut self.writer, id, &invocation, input, question);
    }

    /// The call runs without asking: `chat/toolCallReady` with `confirmed: not-needed`, once.
    pub fn running(&mut self, id: &str) {
        let Some((invocation, input)) = self.invocation(id) else { return };
        self.calls.running(&mut self.writer, id, &invocation, input);
    }

    /// A person denied the call: the host moved it to cancelled already, so nothing more is said.
    pub fn denied(&mut self, id: &str) {
        self.calls.answered(id, false);
    }

    /// Names the command's output as a terminal kept by the host (`Start.terminalOutputs`).
    pub fn with_terminal_outputs(mut self, kept: bool) -> Self {
        self.terminal_outputs = kept;
        self
    }

    /// The call ended: readied first if nobody asked, then one result object. A command the CLI
    /// ran (Bash) shows what it printed as a terminal the host keeps, where the host keeps them.
    pub fn complete(&mut self, id: &str, success: bool, text: String, past_tense: Option<String>) {
        self.complete_showing(id, success, text, past_tense, Vec::new());
    }

    /// The same, its result showing `images` after its text (each kept by the host, or the
    /// sentence saying it was left out).
    fn complete_showing(
        &mut self,
        id: &str,
        success: bool,
        text: String,
        past_tense: Option<String>,
        images: Vec<ahp_types::state::ToolResultContent>,
    ) {
        let Some(call) = self.calls.get(id) else { return };
        if call.done || call.of.named.owner == Owner::Question {
            return;
        }
        self.running(id);
        let Some(call) = self.call(id) else { return };
        let past = past_tense.unwrap_or_else(|| tools::past_tense_message(&call.named, &call.input, success));
        let ran = tools::command_run(&call.named, &call.input, success, &text).filter(|_| self.terminal_outputs);
        let (text, error) = if success { (Some(text), None) } else { (Some(text.clone()), Some(text)) };
        let mut result = tool_result(success, past, text.filter(|t| !t.is_empty()), error);
        if let Some(ran) = ran {
            let uri = self.writer.host().keep_terminal_output(id, &ran.command, &ran.output, ran.exit_code);
            result.content = Some(vec![ran.terminal(uri)]);
        }
        if !images.is_empty() {
            result.content.get_or_insert_with(Vec::new).extend(images);
        }
        self.calls.complete(&mut self.writer, id, result);
    }

    /// The host (or a client) ran the call: complete it from the outcome.
    pub fn complete_from_outcome(&mut self, id: &str, outcome: &ToolOutcome) {
        let text =
            if outcome.text.is_empty() { outcome.error.clone().unwrap_or_default() } else { outcome.text.clone() };
        self.complete(id, outcome.success, text, outcome.past_tense_message.clone());
    }

    /// What a `result` line says the turn used, and how it ended.
    pub fn finish(&mut self, result: &Value) -> (UsageInfo, TurnEnd) {
        (self.usage(result), ending(result))
    }

    fn usage(&self, result: &Value) -> UsageInfo {
        let usage = &result["usage"];
        let model =
            result["modelUsage"].as_object().and_then(|m| m.keys().next().cloned()).or_else(|| self.model.clone());
        let meta = result["total_cost_usd"].as_f64().map(|cost| {
            let mut meta = serde_json::Map::new();
            meta.insert("ahpd.cost".into(), json!({"amount": cost, "currency": "USD"}));
            meta
        });
        UsageInfo {
            input_tokens: usage["input_tokens"].as_i64(),
            output_tokens: usage["output_tokens"].as_i64(),
            model,
            cache_read_tokens: usage["cache_read_input_tokens"].as_i64(),
            meta,
        }
    }
}

/// How a `result` line ends the turn.
pub fn ending(result: &Value) -> TurnEnd {
    let subtype = result["subtype"].as_str().unwrap_or("");
    let is_error = result["is_error"] == Value::Bool(true);
    if subtype == "success" && !is_error {
        return TurnEnd::Complete;
    }
    let errors: Vec<String> = result["errors"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|e| e.as_str().map(str::to_owned).unwrap_or_else(|| e.to_string()))
        .collect();
    let message = if !errors.is_empty() {
        errors.join("; ")
    } else if let Some(text) = result["result"].as_str().filter(|t| !t.is_empty()) {
        text.to_owned()
    } else {
        format!("Claude Code stopped the turn ({})", if subtype.is_empty() { "no reason given" } else { subtype })
    };
    let error_type = if subtype.is_empty() || subtype == "success" { "claudeError" } else { subtype };
    TurnEnd::Error(error_info(error_type, message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{capture_host, Captured};
    use ahp_types::actions::StateAction;

    fn mapper() -> (TurnMapper, Captured) {
        let (host, captured) = capture_host();
        (TurnMapper::new(TurnWriter::new(host, "t1"), Vec::new()), captured)
    }

    #[tokio::test]
    async fn a_command_the_cli_ran_is_a_terminal_the_host_keeps() {
        let (host, captured) = capture_host();
        let mut m = TurnMapper::new(TurnWriter::new(host, "t1"), Vec::new()).with_terminal_outputs(true);
        m.start_call("toolu_1", "Bash");
        m.set_input("toolu_1", &json!({"command": "make test"}));
        m.line(&json!({"type": "user", "message": {"content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": true, "content": "Exit code 2\nfailed"}
        ]}}));
        let actions = captured.actions().await;
        let result = actions.iter().find_map(|a| match a {
            StateAction::ChatToolCallComplete(c) => Some(c.result.clone()),
            _ => None,
        });
        let result = result.expect("a result");
        assert!(!result.success);
        let Some([ahp_types::state::ToolResultContent::Terminal(t)]) = result.content.as_deref() else {
            panic!("a terminal: {result:?}")
        };
        assert_eq!(t.resource, "ahp-terminal:/c.toolu_1");
        assert_eq!(t.title, "make test");
        assert_eq!(t.result.as_ref().and_then(|r| r.exit_code), Some(2));
        assert_eq!(t.result.as_ref().and_then(|r| r.preview.as_deref()), Some("failed"));
    }

    #[tokio::test]
    async fn a_picture_a_tool_returned_is_handed_to_the_host_and_named_by_its_reference() {
        let (host, captured) = capture_host();
        let host = host.keeping_resources(Some(8));
        let mut m = TurnMapper::new(TurnWriter::new(host, "t1"), Vec::new());
        m.start_call("toolu_1", "mcp__probe__screenshot");
        let image = |data: &str| json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}});
        m.line(&json!({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "toolu_1",
            "content": [{"type": "text", "text": "shot"}, image("iVBORw=="), image("AAAAAAAAAAAAAAAA")]}]}}));
        let actions = captured.actions().await;
        let result = actions.iter().find_map(|a| match a {
            StateAction::ChatToolCallComplete(c) => Some(c.result.clone()),
            _ => None,
        });
        let shown = serde_json::to_value(result.expect("a result").content).expect("content");
        assert_eq!(
            shown,
            json!([
                {"type": "text", "text": "shot"},
                {"type": "resource", "uri": "session-db-resource:/s/c/toolu_1/1", "sizeHint": 4, "contentType": "image/png"},
                {"type": "text", "text": "An image of 12 bytes was left out: over toolResultResourceLimitBytes (8 bytes)."},
            ])
        );
        assert_eq!(captured.kept().await, [("toolu_1".to_owned(), 1, "iVBORw==".to_owned())], "handed over once");
    }

    #[tokio::test]
    async fn recorded_thinking_and_tool_turn_maps_to_parts_in_order() {
        let (mut m, captured) = mapper();
        for line in crate::testing::recorded("thinking_tool_turn.jsonl") {
            if line["type"] == "result" {
                let (usage, end) = m.finish(&line);
                m.writer().usage(usage);
                m.writer().end(end);
            } else {
                m.line(&line);
            }
        }
        let actions = captured.actions().await;
        let kinds: Vec<&str> = actions.iter().map(kind).collect();
        // Thinking opens a reasoning part, text a markdown part, the tool its own part.
        let first_reasoning = kinds.iter().position(|k| *k == "responsePart:reasoning").expect("reasoning");
        let first_markdown = kinds.iter().position(|k| *k == "responsePart:markdown").expect("markdown");
        let tool_start = kinds.iter().position(|k| *k == "toolCallStart").expect("toolCallStart");
        assert!(first_reasoning < first_markdown && first_markdown < tool_start, "{kinds:?}");
        let ready = kinds.iter().position(|k| *k == "toolCallReady").expect("toolCallReady");
        let complete = kinds.iter().position(|k| *k == "toolCallComplete").expect("toolCallComplete");
        assert!(tool_start < ready && ready < complete, "{kinds:?}");
        assert_eq!(kinds.last(), Some(&"turnComplete"));
        assert_eq!(kinds.iter().filter(|k| k.starts_with("turn")).count(), 1, "{kinds:?}");
        assert!(!kinds.contains(&"responsePart:toolCall"), "a tool call creates its own part: {kinds:?}");
        // The tool call uses the CLI's own tool-use id, and ran without a question.
        let ready_action = actions.iter().find_map(|a| match a {
            StateAction::ChatToolCallReady(r) => Some(r.clone()),
            _ => None,
        });
        let ready_action = ready_action.expect("ready");
        assert!(ready_action.tool_call_id.starts_with("toolu_"));
        assert!(ready_action.confirmed.is_some());
        let usage = actions.iter().find_map(|a| match a {
            StateAction::ChatUsage(u) => Some(u.usage.clone()),
            _ => None,
        });
        assert_eq!(usage.and_then(|u| u.output_tokens), Some(24));
    }

    #[tokio::test]
    async fn an_unstreamed_assistant_block_is_drawn_from_the_assistant_line() {
        let (mut m, captured) = mapper();
        m.line(&json!({"type": "system", "subtype": "init", "model": "claude-x"}));
        m.line(&json!({"type": "assistant", "parent_tool_use_id": null,
                       "message": {"id": "msg_1", "content": [{"type": "text", "text": "whole"}]}}));
        // A subagent's line is not this turn's.
        m.line(&json!({"type": "assistant", "parent_tool_use_id": "toolu_x",
                       "message": {"id": "msg_2", "content": [{"type": "text", "text": "sub"}]}}));
        let actions = captured.actions().await;
        assert_eq!(actions.len(), 1, "{actions:?}");
        assert_eq!(kind(&actions[0]), "responsePart:markdown");
    }

    #[tokio::test]
    async fn compaction_is_a_system_notification() {
        let (mut m, captured) = mapper();
        m.line(&json!({"type": "system", "subtype": "compact_boundary", "compact_metadata": {"trigger": "auto", "pre_tokens": 1000}}));
        let actions = captured.actions().await;
        assert_eq!(actions.iter().map(kind).collect::<Vec<_>>(), vec!["responsePart:systemNotification"]);
    }

    #[test]
    fn errors_end_the_turn_with_the_clis_words() {
        let end =
            ending(&json!({"type": "result", "subtype": "success", "is_error": true, "result": "API Error: 400 boom"}));
        let TurnEnd::Error(e) = end else { panic!("an error") };
        assert_eq!(e.message, "API Error: 400 boom");
        let end =
            ending(&json!({"type": "result", "subtype": "error_max_turns", "is_error": true, "errors": ["too many"]}));
        let TurnEnd::Error(e) = end else { panic!("an error") };
        assert_eq!((e.error_type.as_str(), e.message.as_str()), ("error_max_turns", "too many"));
        assert_eq!(ending(&json!({"subtype": "success", "is_error": false})), TurnEnd::Complete);
    }

    fn kind(action: &StateAction) -> &'static str {
        use ahp_types::state::ResponsePart;
        match action {
            StateAction::ChatResponsePart(p) => match &p.part {
                ResponsePart::Markdown(_) => "responsePart:markdown",
                ResponsePart::Reasoning(_) => "responsePart:reasoning",
                ResponsePart::SystemNotification(_) => "responsePart:systemNotification",
                ResponsePart::ToolCall(_) => "responsePart:toolCall",
                _ => "responsePart:other",
            },
            StateAction::ChatDelta(_) => "delta",
            StateAction::ChatReasoning(_) => "reasoning",
            StateAction::ChatToolCallStart(_) => "toolCallStart",
            StateAction::ChatToolCallDelta(_) => "toolCallDelta",
            StateAction::ChatToolCallReady(_) => "toolCallReady",
            StateAction::ChatToolCallComplete(_) => "toolCallComplete",
            StateAction::ChatUsage(_) => "usage",
            StateAction::ChatTurnComplete(_) => "turnComplete",
            StateAction::ChatTurnCancelled(_) => "turnCancelled",
            StateAction::ChatError(_) => "turnError",
            _ => "other",
        }
    }
}
