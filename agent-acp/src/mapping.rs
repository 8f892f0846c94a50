//! One turn's `session/update`s said as AHP chat actions, through [`TurnWriter`] so seed 004's
//! silent rules hold: prose and thinking into markdown and reasoning parts, a tool call started,
//! readied (not-needed, or asking) and completed with one result, the plan as a call of its own,
//! and exactly one ending.

use std::collections::HashMap;

use agent_runner::{Question, TurnEnd, TurnWriter};
use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::state::{
    ConfirmationOption, ConfirmationOptionKind, ToolCallResult, ToolResultContent, ToolResultTextContent, UsageInfo,
};
use serde_json::{json, Value};

use crate::client::Terminals;

/// An ACP permission option, as the agent named it.
#[derive(Debug, Clone, PartialEq)]
pub struct PermissionOption {
    /// Its id, which the answer names.
    pub id: String,
    /// What a person reads.
    pub name: String,
    /// `allow_once`, `allow_always`, `reject_once`, `reject_always`.
    pub kind: String,
}

impl PermissionOption {
    fn approves(&self) -> bool {
        self.kind.starts_with("allow")
    }
}

/// Reads a permission request's `options`.
pub fn permission_options(options: &Value) -> Vec<PermissionOption> {
    options
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| {
            let id = o.get("optionId")?.as_str()?.to_owned();
            let name = o.get("name").and_then(Value::as_str).unwrap_or(&id).to_owned();
            let kind = o.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned();
            Some(PermissionOption { id, name, kind })
        })
        .collect()
}

/// The agent's own options as a confirmation offers them: approvals first, each group in the
/// agent's order.
pub fn confirmation_options(options: &[PermissionOption]) -> Vec<ConfirmationOption> {
    let approvals = options.iter().filter(|o| o.approves());
    let denials = options.iter().filter(|o| !o.approves());
    approvals
        .map(|o| (o, ConfirmationOptionKind::Approve, 0))
        .chain(denials.map(|o| (o, ConfirmationOptionKind::Deny, 1)))
        .map(|(o, kind, group)| ConfirmationOption {
            id: o.id.clone(),
            label: o.name.clone(),
            kind,
            group: Some(group),
        })
        .collect()
}

/// The outcome a person's answer stands for: the option they picked when it is one of the
/// agent's, else the agent's "once" option of the kind they chose (never an "always" nobody
/// picked), else whatever option of that kind there is; `None` when the agent offered none.
pub fn chosen_option(options: &[PermissionOption], approved: bool, picked: Option<&str>) -> Option<String> {
    if let Some(picked) = picked {
        if let Some(option) = options.iter().find(|o| o.id == picked) {
            return Some(option.id.clone());
        }
    }
    let once = if approved { "allow_once" } else { "reject_once" };
    options
        .iter()
        .find(|o| o.kind == once)
        .or_else(|| options.iter().find(|o| o.approves() == approved))
        .map(|o| o.id.clone())
}

/// An outcome answer for `session/request_permission`.
pub fn permission_answer(option: Option<String>) -> Value {
    match option {
        Some(id) => json!({"outcome": {"outcome": "selected", "optionId": id}}),
        None => json!({"outcome": {"outcome": "cancelled"}}),
    }
}

/// How a prompt's stop reason ends the turn.
pub fn stop_reason_end(provider: &str, reason: &str) -> TurnEnd {
    let error =
        |kind: &str, sentence: &str| TurnEnd::Error(agent_runner::error_info(kind, format!("{provider}: {sentence}")));
    match reason {
        "end_turn" => TurnEnd::Complete,
        "cancelled" => TurnEnd::Cancelled,
        "max_tokens" => error("maxTokens", "the agent stopped: the model reached its output limit"),
        "max_turn_requests" => {
            error("maxTurnRequests", "the agent stopped: it made as many model requests as one turn allows")
        }
        "refusal" => error("refusal", "the agent refused to go on"),
        other => error("stopReason", &format!("the agent stopped for a reason this host does not know: {other}")),
    }
}

fn text_of(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn text_content(text: String) -> ToolResultContent {
    ToolResultContent::Text(ToolResultTextContent { text })
}

/// What an ACP content block says, as text: prose as it is, a link as a link.
fn block_text(block: &Value) -> Option<String> {
    match block.get("type").and_then(Value::as_str)? {
        "text" => text_of(block, "text"),
        "resource_link" => {
            let uri = text_of(block, "uri")?;
            let name = text_of(block, "name").unwrap_or_else(|| uri.clone());
            Some(format!("[{name}]({uri})"))
        }
        "resource" => block.get("resource").and_then(|r| text_of(r, "text")),
        _ => None,
    }
}

#[derive(Debug, Default)]
struct Call {
    title: String,
    kind: Option<String>,
    input: Option<String>,
    status: String,
    readied: bool,
    asked: bool,
    done: bool,
    content: Vec<Value>,
    raw_output: Option<Value>,
}

impl Call {
    fn merge(&mut self, update: &Value) {
        if let Some(title) = text_of(update, "title").filter(|t| !t.is_empty()) {
            self.title = title;
        }
        if let Some(kind) = text_of(update, "kind") {
            self.kind = Some(kind);
        }
        if let Some(status) = text_of(update, "status") {
            self.status = status;
        }
        match update.get("rawInput") {
            Some(Value::Object(map)) if map.is_empty() => {}
            Some(Value::Null) | None => {}
            Some(input) => self.input = Some(input.to_string()),
        }
        if let Some(content) = update.get("content").and_then(Value::as_array) {
            self.content = content.clone();
        }
        if let Some(output) = update.get("rawOutput").filter(|o| !o.is_null()) {
            self.raw_output = Some(output.clone());
        }
    }

    fn started(&self) -> bool {
        matches!(self.status.as_str(), "in_progress" | "completed" | "failed")
    }

    fn finished(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "failed")
    }
}

/// The name a call is drawn under: the harness's own tool name where it says one.
fn tool_name(update: &Value) -> Option<String> {
    update
        .pointer("/_meta/claudeCode/toolName")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| text_of(update, "name"))
        .or_else(|| text_of(update, "kind"))
}

/// Host-only fields of a question: what it asks to do, so the host can decide by its policy.
fn question_meta(call: &Call, tool_call: &Value) -> Option<serde_json::Map<String, Value>> {
    let mut meta = serde_json::Map::new();
    let input: Value = call.input.as_deref().and_then(|i| serde_json::from_str(i).ok()).unwrap_or(Value::Null);
    let path = tool_call
        .pointer("/locations/0/path")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| text_of(&input, "file_path"))
        .or_else(|| text_of(&input, "path"));
    match call.kind.as_deref() {
        Some("execute") => {
            meta.insert("permissionKind".into(), json!("shell"));
            if let Some(command) = text_of(&input, "command") {
                meta.insert("shellCommand".into(), json!(command));
            }
        }
        Some("edit" | "delete" | "move") => {
            meta.insert("permissionKind".into(), json!("write"));
        }
        Some("read" | "search") => {
            meta.insert("permissionKind".into(), json!("read"));
        }
        Some("fetch") => {
            meta.insert("permissionKind".into(), json!("url"));
            if let Some(url) = text_of(&input, "url") {
                meta.insert("permissionUrl".into(), json!(url));
            }
        }
        _ => {
            meta.insert("permissionKind".into(), json!("custom-tool"));
        }
    }
    if let Some(path) = path {
        meta.insert("permissionPath".into(), json!(path));
    }
    Some(meta)
}

/// One turn as it streams.
pub struct TurnMap {
    provider: String,
    writer: TurnWriter,
    calls: HashMap<String, Call>,
    plan: Option<Vec<ToolResultContent>>,
    response_usage: Option<Value>,
    context: Option<Value>,
    cost: Option<Value>,
}

impl TurnMap {
    /// A turn said through `writer`.
    pub fn new(provider: &str, writer: TurnWriter) -> Self {
        Self {
            provider: provider.to_owned(),
            writer,
            calls: HashMap::new(),
            plan: None,
            response_usage: None,
            context: None,
            cost: None,
        }
    }

    /// The turn's id.
    pub fn turn_id(&self) -> &str {
        self.writer.turn_id()
    }

    fn plan_id(&self) -> String {
        format!("{}:plan", self.writer.turn_id())
    }

    /// Takes one `session/update` of the kinds a turn streams; answers false for a kind that is
    /// not the turn's (config, commands), which the session handles.
    pub fn update(&mut self, update: &Value, terminals: &Terminals) -> bool {
        let kind = update.get("sessionUpdate").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "agent_message_chunk" => {
                if let Some(text) = update.get("content").and_then(block_text) {
                    self.writer.text(&text);
                }
            }
            "agent_thought_chunk" => {
                if let Some(text) = update.get("content").and_then(block_text) {
                    self.writer.reasoning(&text);
                }
            }
            "tool_call" | "tool_call_update" => self.tool_call(update, terminals),
            "plan" => self.plan(update),
            "usage_update" => {
                self.context = Some(json!({"used": update.get("used"), "size": update.get("size")}));
                if let Some(cost) = update.get("cost").filter(|c| !c.is_null()) {
                    self.cost = Some(cost.clone());
                }
            }
            "user_message_chunk" => {}
            _ => return false,
        }
        true
    }

    fn call_entry(&mut self, update: &Value) -> Option<(String, bool)> {
        let id = text_of(update, "toolCallId")?;
        let new = !self.calls.contains_key(&id);
        if new {
            let title = text_of(update, "title").filter(|t| !t.is_empty());
            let name = tool_name(update).or_else(|| title.clone()).unwrap_or_else(|| "tool".to_owned());
            let title = title.unwrap_or_else(|| name.clone());
            // A call ends the prose before it: the next chunk opens a part of its own.
            self.writer.tool_start(&id, &name, &title, None);
            self.calls.insert(id.clone(), Call { title, status: "pending".into(), ..Call::default() });
        }
        if let Some(call) = self.calls.get_mut(&id) {
            call.merge(update);
        }
        Some((id, new))
    }

    fn tool_call(&mut self, update: &Value, terminals: &Terminals) {
        let Some((id, _)) = self.call_entry(update) else {
            return;
        };
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        if call.done {
            return;
        }
        // `pending` is the agent holding the call; a ready that says nobody will be asked waits
        // until the agent says it runs (or the call asks, which is its ready).
        if call.started() && !call.readied && !call.asked {
            call.readied = true;
            let (title, input) = (call.title.clone(), call.input.clone());
            self.writer.tool_running(&id, &title, input);
        }
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        let content = contents(&call.content, terminals);
        if call.finished() {
            call.done = true;
            let success = call.status == "completed";
            let shown = if content.is_empty() {
                call.raw_output
                    .as_ref()
                    .map(|o| vec![text_content(o.as_str().map(str::to_owned).unwrap_or_else(|| o.to_string()))])
            } else {
                Some(content)
            };
            let words: Vec<String> = shown
                .iter()
                .flatten()
                .filter_map(|c| match c {
                    ToolResultContent::Text(t) => Some(t.text.clone()),
                    _ => None,
                })
                .collect();
            let error = (!success)
                .then(|| Value::String(if words.is_empty() { "The tool failed".to_owned() } else { words.join("\n") }));
            let result = ToolCallResult {
                success,
                past_tense_message: StringOrMarkdown::Plain(call.title.clone()),
                content: shown,
                structured_content: None,
                error,
            };
            self.writer.tool_complete(&id, result);
        } else if (call.readied || call.asked) && !content.is_empty() && update.get("content").is_some() {
            self.writer.tool_content(&id, content);
        }
    }

    /// The agent asks before a call runs: the call waits with the agent's own options.
    pub fn ask(&mut self, tool_call: &Value, options: &[PermissionOption]) -> Option<String> {
        let (id, _) = self.call_entry(tool_call)?;
        let call = self.calls.get_mut(&id)?;
        call.asked = true;
        let meta = question_meta(call, tool_call);
        let question = Question { title: call.title.clone(), options: Some(confirmation_options(options)), meta };
        let (title, input) = (call.title.clone(), call.input.clone());
        self.writer.tool_asks(&id, &title, input, question);
        Some(id)
    }

    fn plan(&mut self, update: &Value) {
        let lines: Vec<ToolResultContent> = update
            .get("entries")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|entry| {
                let status = entry.get("status").and_then(Value::as_str).unwrap_or("pending");
                let content = entry.get("content").and_then(Value::as_str).unwrap_or_default();
                let mark = if status == "completed" { "x" } else { " " };
                let note = if status == "in_progress" { " (in progress)" } else { "" };
                text_content(format!("- [{mark}] {content}{note}"))
            })
            .collect();
        let id = self.plan_id();
        if self.plan.is_none() {
            self.writer.tool_start(&id, "plan", "Plan", None);
            self.writer.tool_running(&id, "Plan", None);
        }
        self.writer.tool_content(&id, lines.clone());
        self.plan = Some(lines);
    }

    /// The prompt's answer carried usage.
    pub fn response_usage(&mut self, usage: Option<&Value>) {
        self.response_usage = usage.filter(|u| !u.is_null()).cloned();
    }

    /// Ends the turn: the plan closed with its last state, what it used, then exactly one ending.
    /// `cost_before` is the session's cost when the turn began; answers the cost now.
    pub fn finish(&mut self, end: TurnEnd, cost_before: Option<f64>, model: Option<String>) -> Option<f64> {
        if let Some(plan) = self.plan.take() {
            let id = self.plan_id();
            let result = ToolCallResult {
                success: true,
                past_tense_message: StringOrMarkdown::Plain("Plan".into()),
                content: Some(plan),
                structured_content: None,
                error: None,
            };
            self.writer.tool_complete(&id, result);
        }
        let cost_now = self.cost.as_ref().and_then(|c| c.get("amount")).and_then(Value::as_f64);
        if self.response_usage.is_some() || self.context.is_some() || self.cost.is_some() {
            let tokens = |key: &str| self.response_usage.as_ref().and_then(|u| u.get(key)).and_then(Value::as_i64);
            let mut meta = JsonObject::new();
            if let Some(context) = &self.context {
                meta.insert("ahpd.context".into(), context.clone());
            }
            if let (Some(cost), Some(now)) = (&self.cost, cost_now) {
                let spent = now - cost_before.unwrap_or(0.0);
                meta.insert("ahpd.cost".into(), json!({"amount": spent, "currency": cost.get("currency")}));
            }
            if let Some(write) = tokens("cachedWriteTokens") {
                meta.insert("cacheWriteTokens".into(), json!(write));
            }
            self.writer.usage(UsageInfo {
                input_tokens: tokens("inputTokens"),
                output_tokens: tokens("outputTokens"),
                model,
                cache_read_tokens: tokens("cachedReadTokens"),
                meta: (!meta.is_empty()).then_some(meta),
            });
        }
        self.writer.end(end);
        cost_now.or(cost_before)
    }

    /// A notice inside the turn (the agent was started again).
    pub fn notice(&mut self, text: &str) {
        self.writer.notification(text);
    }

    /// Ends the turn in error with the provider's sentence.
    pub fn fail(&mut self, kind: &str, sentence: String) {
        self.finish(TurnEnd::Error(agent_runner::error_info(kind, sentence)), None, None);
    }

    /// The provider this turn speaks for.
    pub fn provider(&self) -> &str {
        &self.provider
    }
}

/// A call's ACP content as what a client shows: text, a diff as what it did to which file, a
/// terminal as what it printed.
fn contents(content: &[Value], terminals: &Terminals) -> Vec<ToolResultContent> {
    content
        .iter()
        .filter_map(|entry| match entry.get("type").and_then(Value::as_str)? {
            "content" => entry.get("content").and_then(block_text).map(text_content),
            "diff" => {
                let path = text_of(entry, "path")?;
                let verb = if entry.get("oldText").is_none_or(Value::is_null) { "Created" } else { "Edited" };
                Some(text_content(format!("{verb} {path}")))
            }
            "terminal" => {
                let id = text_of(entry, "terminalId")?;
                terminals.output_of(&id).filter(|o| !o.is_empty()).map(text_content)
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Vec<PermissionOption> {
        permission_options(&json!([
            {"optionId": "reject", "name": "No", "kind": "reject_once"},
            {"optionId": "always", "name": "Always", "kind": "allow_always"},
            {"optionId": "once", "name": "Yes", "kind": "allow_once"},
        ]))
    }

    #[test]
    fn approvals_come_first() {
        let shown = confirmation_options(&options());
        let ids: Vec<&str> = shown.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(ids, vec!["always", "once", "reject"]);
        assert_eq!(shown[2].kind, ConfirmationOptionKind::Deny);
    }

    #[test]
    fn a_choice_names_an_option_and_never_an_always_nobody_picked() {
        let options = options();
        assert_eq!(chosen_option(&options, true, Some("always")), Some("always".into()));
        assert_eq!(chosen_option(&options, true, None), Some("once".into()));
        assert_eq!(chosen_option(&options, false, None), Some("reject".into()));
        assert_eq!(chosen_option(&options, true, Some("made-up")), Some("once".into()));
        assert_eq!(chosen_option(&[], true, None), None);
        assert_eq!(permission_answer(None), json!({"outcome": {"outcome": "cancelled"}}));
    }

    #[test]
    fn stop_reasons() {
        assert_eq!(stop_reason_end("p", "end_turn"), TurnEnd::Complete);
        assert_eq!(stop_reason_end("p", "cancelled"), TurnEnd::Cancelled);
        for reason in ["max_tokens", "max_turn_requests", "refusal", "new_reason"] {
            assert!(matches!(stop_reason_end("p", reason), TurnEnd::Error(_)), "{reason}");
        }
    }
}
