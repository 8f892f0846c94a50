//! One turn's `session/update`s said as AHP chat actions, through [`TurnWriter`] so seed 004's
//! silent rules hold: prose and thinking into markdown and reasoning parts, a tool call started,
//! readied (not-needed, or asking) and completed with one result, the plan as a call of its own,
//! and exactly one ending. A subagent's updates go to a turn of its own in its own chat
//! ([`crate::subagents`]).

use std::collections::{HashMap, HashSet};

use agent_client_protocol_schema::v1 as acp;
use agent_client_protocol_schema::v1::{PermissionOptionKind, SessionUpdate, ToolCallStatus, ToolKind};
use agent_runner::engine::calls::Calls;
use agent_runner::{Keeper, Question, TurnEnd, TurnWriter};
use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::state::{
    ConfirmationOption, ConfirmationOptionKind, ToolCallResult, ToolResultContent, ToolResultTextContent, UsageInfo,
};
use serde_json::{json, Value};

use crate::client::Terminals;

fn approves(option: &acp::PermissionOption) -> bool {
    matches!(option.kind, PermissionOptionKind::AllowOnce | PermissionOptionKind::AllowAlways)
}

/// The agent's own options as a confirmation offers them: approvals first, each group in the
/// agent's order.
pub fn confirmation_options(options: &[acp::PermissionOption]) -> Vec<ConfirmationOption> {
    let approvals = options.iter().filter(|o| approves(o));
    let denials = options.iter().filter(|o| !approves(o));
    approvals
        .map(|o| (o, ConfirmationOptionKind::Approve, 0))
        .chain(denials.map(|o| (o, ConfirmationOptionKind::Deny, 1)))
        .map(|(o, kind, group)| ConfirmationOption {
            id: o.option_id.to_string(),
            label: o.name.clone(),
            kind,
            group: Some(group),
        })
        .collect()
}

/// The option ids of a "no" that ends the agent's prompt rather than letting it go on: codex-acp's
/// `abort` ("No, and tell Codex what to do differently", Codex's `TurnAborted`). A person's plain
/// "no" is the one that goes on (codex-acp's `denied`, "No, continue without running it") where
/// the agent offers one.
const ENDS_THE_PROMPT: &[&str] = &["abort"];

fn ends_the_prompt(option: &acp::PermissionOption) -> bool {
    ENDS_THE_PROMPT.contains(&&*option.option_id.0)
}

/// The outcome a person's answer stands for: the option they picked when it is one of the
/// agent's, else the agent's "once" option of the kind they chose (never an "always" nobody
/// picked; for a "no", one that lets the prompt go on before one that ends it), else whatever
/// option of that kind there is; `None` when the agent offered none.
pub fn chosen_option(
    options: &[acp::PermissionOption],
    approved: bool,
    picked: Option<&str>,
) -> Option<acp::PermissionOptionId> {
    if let Some(picked) = picked {
        if let Some(option) = options.iter().find(|o| &*o.option_id.0 == picked) {
            return Some(option.option_id.clone());
        }
    }
    let once = if approved { PermissionOptionKind::AllowOnce } else { PermissionOptionKind::RejectOnce };
    let of_kind = |o: &&acp::PermissionOption| o.kind == once;
    let of_side = |o: &&acp::PermissionOption| approves(o) == approved;
    let goes_on = |o: &&acp::PermissionOption| !ends_the_prompt(o);
    options
        .iter()
        .find(|o| of_kind(o) && goes_on(o))
        .or_else(|| options.iter().find(|o| of_side(o) && goes_on(o)))
        .or_else(|| options.iter().find(of_kind))
        .or_else(|| options.iter().find(of_side))
        .map(|o| o.option_id.clone())
}

/// The answer to `session/request_permission`: the option chosen, or `cancelled`.
pub fn permission_answer(option: Option<acp::PermissionOptionId>) -> acp::RequestPermissionResponse {
    acp::RequestPermissionResponse::new(match option {
        Some(id) => acp::RequestPermissionOutcome::Selected(acp::SelectedPermissionOutcome::new(id)),
        None => acp::RequestPermissionOutcome::Cancelled,
    })
}

/// How a prompt's answer ends the turn: by its stop reason, or as an error when the answer is not
/// one ACP's schema reads (a stop reason newer than it, say).
pub fn prompt_end(provider: &str, answer: &Result<acp::PromptResponse, String>) -> TurnEnd {
    let error =
        |kind: &str, sentence: &str| TurnEnd::Error(agent_runner::error_info(kind, format!("{provider}: {sentence}")));
    let reason = match answer {
        Ok(answer) => answer.stop_reason,
        Err(why) => {
            return error("stopReason", &format!("the agent stopped for a reason this host does not know: {why}"))
        }
    };
    match reason {
        acp::StopReason::EndTurn => TurnEnd::Complete,
        acp::StopReason::Cancelled => TurnEnd::Cancelled,
        acp::StopReason::MaxTokens => error("maxTokens", "the agent stopped: the model reached its output limit"),
        acp::StopReason::MaxTurnRequests => {
            error("maxTurnRequests", "the agent stopped: it made as many model requests as one turn allows")
        }
        acp::StopReason::Refusal => error("refusal", "the agent refused to go on"),
        other => error("stopReason", &format!("the agent stopped for a reason this host does not know: {other:?}")),
    }
}

fn text_of(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn text_content(text: String) -> ToolResultContent {
    ToolResultContent::Text(ToolResultTextContent { text })
}

/// What an ACP content block says, as text: prose as it is, a link as a link.
fn block_text(block: &acp::ContentBlock) -> Option<String> {
    match block {
        acp::ContentBlock::Text(text) => Some(text.text.clone()),
        acp::ContentBlock::ResourceLink(link) => {
            let name = if link.name.is_empty() { &link.uri } else { &link.name };
            Some(format!("[{name}]({})", link.uri))
        }
        acp::ContentBlock::Resource(embedded) => match &embedded.resource {
            acp::EmbeddedResourceResource::TextResourceContents(text) => Some(text.text.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// A kind's name as ACP spells it (`execute`, `switch_mode`, ...).
fn kind_name(kind: ToolKind) -> Option<String> {
    serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(str::to_owned))
}

/// What the map keeps of one tool call as the agent updates it, beside the engine's bookkeeping
/// of what was said of it ([`Calls`]).
#[derive(Debug, Default)]
struct Call {
    title: String,
    kind: Option<ToolKind>,
    input: Option<String>,
    status: ToolCallStatus,
    /// Known only from the agent's question (`session/request_permission` for a call it never
    /// announced: a pi extension's `select`): answering it is all it does.
    question_only: bool,
    content: Vec<acp::ToolCallContent>,
    raw_output: Option<Value>,
    /// What the host was handed of its inline content, by place: its size and how it shows, so an
    /// update that says the same content again does not hand it over again.
    kept: HashMap<usize, (usize, ToolResultContent)>,
}

impl Call {
    fn merge(&mut self, fields: &acp::ToolCallUpdateFields) {
        if let Some(title) = fields.title.as_ref().filter(|t| !t.is_empty()) {
            self.title = title.clone();
        }
        if let Some(kind) = fields.kind {
            self.kind = Some(kind);
        }
        if let Some(status) = fields.status {
            self.status = status;
        }
        match &fields.raw_input {
            Some(Value::Object(map)) if map.is_empty() => {}
            Some(Value::Null) | None => {}
            Some(input) => self.input = Some(input.to_string()),
        }
        if let Some(content) = &fields.content {
            self.content = content.clone();
        }
        if let Some(output) = fields.raw_output.as_ref().filter(|o| !o.is_null()) {
            self.raw_output = Some(output.clone());
        }
    }

    fn started(&self) -> bool {
        matches!(self.status, ToolCallStatus::InProgress | ToolCallStatus::Completed | ToolCallStatus::Failed)
    }

    fn finished(&self) -> bool {
        matches!(self.status, ToolCallStatus::Completed | ToolCallStatus::Failed)
    }
}

/// A `tool_call` as the update it amounts to: what it leaves at the schema's defaults (no
/// content, no locations, `pending`) moves nothing a call already has.
fn update_of_call(call: &acp::ToolCall) -> acp::ToolCallUpdate {
    let mut update = acp::ToolCallUpdate::from(call.clone());
    let fields = &mut update.fields;
    fields.content = fields.content.take().filter(|c| !c.is_empty());
    fields.locations = fields.locations.take().filter(|l| !l.is_empty());
    fields.status = fields.status.filter(|s| *s != ToolCallStatus::Pending);
    update
}

/// The name a call is drawn under: the harness's own tool name where it says one.
pub(crate) fn tool_name(update: &acp::ToolCallUpdate) -> Option<String> {
    update
        .meta
        .as_ref()
        .and_then(|meta| meta.get("claudeCode"))
        .and_then(|claude| text_of(claude, "toolName"))
        .or_else(|| update.fields.name.clone())
        .or_else(|| update.fields.kind.and_then(kind_name))
}

/// Host-only fields of a question: what it asks to do, so the host can decide by its policy.
/// The input is the agent's own (`rawInput` is free-form in ACP), read for the fields harnesses use.
fn question_meta(call: &Call, tool_call: &acp::ToolCallUpdate) -> Option<serde_json::Map<String, Value>> {
    let mut meta = serde_json::Map::new();
    let input: Value = call.input.as_deref().and_then(|i| serde_json::from_str(i).ok()).unwrap_or(Value::Null);
    let path = tool_call
        .fields
        .locations
        .as_ref()
        .and_then(|l| l.first())
        .map(|l| l.path.display().to_string())
        .or_else(|| text_of(&input, "file_path"))
        .or_else(|| text_of(&input, "path"));
    match call.kind {
        Some(ToolKind::Execute) => {
            meta.insert("permissionKind".into(), json!("shell"));
            if let Some(command) = text_of(&input, "command") {
                meta.insert("shellCommand".into(), json!(command));
            }
        }
        Some(ToolKind::Edit | ToolKind::Delete | ToolKind::Move) => {
            meta.insert("permissionKind".into(), json!("write"));
        }
        Some(ToolKind::Read | ToolKind::Search) => {
            meta.insert("permissionKind".into(), json!("read"));
        }
        Some(ToolKind::Fetch) => {
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
    calls: Calls<Call>,
    plan: Option<Vec<ToolResultContent>>,
    response_usage: Option<acp::Usage>,
    context: Option<(u64, u64)>,
    cost: Option<acp::Cost>,
    /// The running subagents' turns, by the call of this turn that started each.
    subagents: HashMap<String, TurnMap>,
    /// Calls whose subagents ended: what they say late is dropped.
    ended_subagents: HashSet<String>,
}

impl TurnMap {
    /// A turn said through `writer`.
    pub fn new(provider: &str, writer: TurnWriter) -> Self {
        Self {
            provider: provider.to_owned(),
            writer,
            calls: Calls::default(),
            plan: None,
            response_usage: None,
            context: None,
            cost: None,
            subagents: HashMap::new(),
            ended_subagents: HashSet::new(),
        }
    }

    /// The turn's id.
    pub fn turn_id(&self) -> &str {
        self.writer.turn_id()
    }

    /// The writer the turn is said through.
    pub fn writer(&mut self) -> &mut TurnWriter {
        &mut self.writer
    }

    fn plan_id(&self) -> String {
        format!("{}:plan", self.writer.turn_id())
    }

    /// Takes one `session/update` of the kinds a turn streams; answers false for a kind that is
    /// not the turn's (config, commands), which the session handles.
    pub fn update(&mut self, update: &SessionUpdate, terminals: &Terminals) -> bool {
        if let Some(parent) = crate::subagents::parent_call(update) {
            if let Some(subagent) = self.subagent_of(&parent) {
                return subagent.update(update, terminals);
            }
            if self.knows_subagent(&parent) {
                // Its subagent ended: nothing it says late belongs anywhere.
                return true;
            }
        }
        match update {
            SessionUpdate::AgentMessageChunk(chunk) => {
                if let Some(text) = block_text(&chunk.content) {
                    self.writer.text(&text);
                }
            }
            SessionUpdate::AgentThoughtChunk(chunk) => {
                if let Some(text) = block_text(&chunk.content) {
                    self.writer.reasoning(&text);
                }
            }
            SessionUpdate::ToolCall(call) => self.tool_call(&update_of_call(call), terminals),
            SessionUpdate::ToolCallUpdate(update) => self.tool_call(update, terminals),
            SessionUpdate::Plan(plan) => self.plan(plan),
            SessionUpdate::UsageUpdate(usage) => {
                self.context = Some((usage.used, usage.size));
                if let Some(cost) = &usage.cost {
                    self.cost = Some(cost.clone());
                }
            }
            SessionUpdate::UserMessageChunk(_) => {}
            _ => return false,
        }
        true
    }

    fn call_entry(&mut self, update: &acp::ToolCallUpdate) -> String {
        let id = update.tool_call_id.to_string();
        if !self.calls.contains(&id) {
            let title = update.fields.title.clone().filter(|t| !t.is_empty());
            let name = tool_name(update).or_else(|| title.clone()).unwrap_or_else(|| "tool".to_owned());
            let title = title.unwrap_or_else(|| name.clone());
            // A call ends the prose before it: the next chunk opens a part of its own.
            let call = Call { title: title.clone(), ..Call::default() };
            self.calls.start(&mut self.writer, &id, &name, &title, None, call);
        }
        if let Some(call) = self.calls.get_mut(&id) {
            call.of.merge(&update.fields);
        }
        id
    }

    fn tool_call(&mut self, update: &acp::ToolCallUpdate, terminals: &Terminals) {
        let id = self.call_entry(update);
        let Some(call) = self.calls.get(&id).filter(|c| !c.done) else { return };
        // `pending` is the agent holding the call; a ready that says nobody will be asked waits
        // until the agent says it runs (or the call asks, which is its ready).
        if call.of.started() {
            let (title, input) = (call.of.title.clone(), call.of.input.clone());
            self.calls.running(&mut self.writer, &id, &title, input);
        }
        let host = self.writer.host().clone();
        let Some(entry) = self.calls.get_mut(&id) else { return };
        let ready = entry.ready;
        let call = &mut entry.of;
        let content = contents(&id, &call.content, &mut call.kept, &host, terminals);
        if !call.finished() {
            if ready && !content.is_empty() && update.fields.content.is_some() {
                self.writer.tool_content(&id, content);
            }
            return;
        }
        let success = call.status == ToolCallStatus::Completed;
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
        let subagent_end = if success {
            TurnEnd::Complete
        } else {
            TurnEnd::Error(agent_runner::error_info("subagentFailed", words.join("\n")))
        };
        let result = ToolCallResult {
            success,
            past_tense_message: StringOrMarkdown::Plain(call.title.clone()),
            content: shown,
            structured_content: None,
            error,
        };
        self.end_subagent(&id, subagent_end);
        self.calls.complete(&mut self.writer, &id, result);
    }

    /// The turn of the subagent the call `parent` started, opened on its first update: this
    /// turn's call, or a call of one of its subagents (a subagent's own subagent).
    fn subagent_of(&mut self, parent: &str) -> Option<&mut TurnMap> {
        let opens = !self.subagents.contains_key(parent)
            && !self.ended_subagents.contains(parent)
            && self.calls.get(parent).is_some_and(|c| !c.done);
        if opens {
            let call = &self.calls.get(parent)?.of;
            let (host, turn_id) =
                crate::subagents::open(self.writer.host(), parent, &call.title, call.input.as_deref());
            let subagent = TurnMap::new(&self.provider, TurnWriter::new(host, turn_id));
            self.subagents.insert(parent.to_owned(), subagent);
        }
        if self.subagents.contains_key(parent) {
            return self.subagents.get_mut(parent);
        }
        self.subagents.values_mut().find_map(|s| s.subagent_of(parent))
    }

    /// Whether `parent` started a subagent of this turn's, running or ended.
    fn knows_subagent(&self, parent: &str) -> bool {
        self.ended_subagents.contains(parent) || self.subagents.values().any(|s| s.knows_subagent(parent))
    }

    /// Whether the call `id` is this turn's or one of its subagents'.
    fn holds_call(&self, id: &str) -> bool {
        self.calls.contains(id) || self.subagents.values().any(|s| s.holds_call(id))
    }

    /// The call `call` ended: the subagent it started, if any, ends with it.
    fn end_subagent(&mut self, call: &str, end: TurnEnd) {
        if let Some(mut subagent) = self.subagents.remove(call) {
            subagent.finish(end, None, None);
            self.ended_subagents.insert(call.to_owned());
        }
    }

    /// The agent asks before a call runs: the call waits with the agent's own options.
    pub fn ask(&mut self, tool_call: &acp::ToolCallUpdate, options: &[acp::PermissionOption]) -> Option<String> {
        let id = tool_call.tool_call_id.to_string();
        if !self.calls.contains(&id) {
            let parent = crate::subagents::parent_of_call(tool_call);
            let owner = match parent {
                Some(parent) => self.subagent_of(&parent),
                None => self.subagents.values_mut().find(|s| s.holds_call(&id)),
            };
            if let Some(subagent) = owner {
                return subagent.ask(tool_call, options);
            }
        }
        let announced = self.calls.contains(&id);
        let id = self.call_entry(tool_call);
        self.calls.get_mut(&id)?.of.question_only = !announced;
        let call = &self.calls.get(&id)?.of;
        let meta = question_meta(call, tool_call);
        let question = Question { title: call.title.clone(), options: Some(confirmation_options(options)), meta };
        let (title, input) = (call.title.clone(), call.input.clone());
        self.calls.asks(&mut self.writer, &id, &title, input, question);
        Some(id)
    }

    /// A person answered the call's question: a call denied is said no more (the host cancelled it).
    pub fn answered(&mut self, id: &str, approved: bool) {
        if self.calls.contains(id) {
            return self.calls.answered(id, approved);
        }
        if let Some(subagent) = self.subagents.values_mut().find(|s| s.holds_call(id)) {
            subagent.answered(id, approved);
        }
    }

    /// The person said yes to the call `id`, picking `label`: a call that was only the agent's
    /// question is done with that answer (the agent reports nothing more of it, and the turn's end
    /// would otherwise show it skipped).
    pub fn answered_yes(&mut self, id: &str, label: &str) {
        let Some(call) = self.calls.get(id).filter(|c| c.of.question_only && !c.done) else { return };
        let title = call.of.title.clone();
        self.calls.complete(&mut self.writer, id, agent_runner::tool_result(true, title, Some(label.to_owned()), None));
    }

    fn plan(&mut self, plan: &acp::Plan) {
        let lines: Vec<ToolResultContent> = plan
            .entries
            .iter()
            .map(|entry| {
                let mark = if entry.status == acp::PlanEntryStatus::Completed { "x" } else { " " };
                let note = if entry.status == acp::PlanEntryStatus::InProgress { " (in progress)" } else { "" };
                text_content(format!("- [{mark}] {}{note}", entry.content))
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
    pub fn response_usage(&mut self, usage: Option<acp::Usage>) {
        self.response_usage = usage;
    }

    /// Ends the turn: the plan closed with its last state, what it used, then exactly one ending.
    /// `cost_before` is the session's cost when the turn began; answers the cost now.
    pub fn finish(&mut self, end: TurnEnd, cost_before: Option<f64>, model: Option<String>) -> Option<f64> {
        let running: Vec<String> = self.subagents.keys().cloned().collect();
        for call in running {
            self.end_subagent(&call, end.clone());
        }
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
        let cost_now = self.cost.as_ref().map(|c| c.amount);
        if self.response_usage.is_some() || self.context.is_some() || self.cost.is_some() {
            let usage = self.response_usage.as_ref();
            let tokens = |count: Option<u64>| count.and_then(|n| i64::try_from(n).ok());
            let mut meta = JsonObject::new();
            if let Some((used, size)) = self.context {
                meta.insert("ahpd.context".into(), json!({"used": used, "size": size}));
            }
            if let (Some(cost), Some(now)) = (&self.cost, cost_now) {
                let spent = now - cost_before.unwrap_or(0.0);
                meta.insert("ahpd.cost".into(), json!({"amount": spent, "currency": cost.currency}));
            }
            if let Some(write) = tokens(usage.and_then(|u| u.cached_write_tokens)) {
                meta.insert("cacheWriteTokens".into(), json!(write));
            }
            self.writer.usage(UsageInfo {
                input_tokens: tokens(usage.map(|u| u.input_tokens)),
                output_tokens: tokens(usage.map(|u| u.output_tokens)),
                model,
                cache_read_tokens: tokens(usage.and_then(|u| u.cached_read_tokens)),
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

    /// The provider this turn speaks for.
    pub fn provider(&self) -> &str {
        &self.provider
    }
}

/// A call's ACP content as what a client shows: text, a diff as what it did to which file, a
/// terminal as what it printed, and an image, audio or embedded resource handed to the host to keep
/// (named by its reference, or a sentence saying it was left out; `kept` holds what was handed
/// over already).
fn contents(
    call_id: &str,
    content: &[acp::ToolCallContent],
    kept: &mut HashMap<usize, (usize, ToolResultContent)>,
    keeper: &dyn Keeper,
    terminals: &Terminals,
) -> Vec<ToolResultContent> {
    content
        .iter()
        .enumerate()
        .filter_map(|(index, entry)| match entry {
            acp::ToolCallContent::Content(content) => match inline_content(&content.content) {
                Some((kind, data)) => {
                    let size = data.len();
                    if let Some((_, shown)) = kept.get(&index).filter(|(said, _)| *said == size) {
                        return Some(shown.clone());
                    }
                    let place = u32::try_from(index).unwrap_or(u32::MAX);
                    let name = agent_runner::kept::content_name(call_id, place, &kind);
                    let shown = keeper.content(call_id, place, &name, &kind, &data);
                    kept.insert(index, (size, shown.clone()));
                    Some(shown)
                }
                None => block_text(&content.content).map(text_content),
            },
            acp::ToolCallContent::Diff(diff) => {
                let verb = if diff.old_text.is_none() { "Created" } else { "Edited" };
                Some(text_content(format!("{verb} {}", diff.path.display())))
            }
            acp::ToolCallContent::Terminal(terminal) => {
                terminals.output_of(&terminal.terminal_id.0).filter(|o| !o.is_empty()).map(text_content)
            }
            _ => None,
        })
        .collect()
}

/// Content a part would carry inline, as its type and base64 bytes: an image, audio, or an
/// embedded resource's blob or text (seed 004's `storeToolResultResource`).
fn inline_content(block: &acp::ContentBlock) -> Option<(String, String)> {
    use base64::Engine;
    match block {
        acp::ContentBlock::Image(image) => Some((image.mime_type.clone(), image.data.clone())),
        acp::ContentBlock::Audio(audio) => Some((audio.mime_type.clone(), audio.data.clone())),
        acp::ContentBlock::Resource(embedded) => match &embedded.resource {
            acp::EmbeddedResourceResource::BlobResourceContents(blob) => Some((
                blob.mime_type.clone().unwrap_or_else(|| "application/octet-stream".to_owned()),
                blob.blob.clone(),
            )),
            acp::EmbeddedResourceResource::TextResourceContents(text) => Some((
                text.mime_type.clone().unwrap_or_else(|| "text/plain".to_owned()),
                base64::engine::general_purpose::STANDARD.encode(&text.text),
            )),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Vec<acp::PermissionOption> {
        serde_json::from_value(json!([
            {"optionId": "reject", "name": "No", "kind": "reject_once"},
            {"optionId": "always", "name": "Always", "kind": "allow_always"},
            {"optionId": "once", "name": "Yes", "kind": "allow_once"},
        ]))
        .expect("options")
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
        let chosen = |approved, picked| chosen_option(&options, approved, picked).map(|id| id.to_string());
        assert_eq!(chosen(true, Some("always")), Some("always".into()));
        assert_eq!(chosen(true, None), Some("once".into()));
        assert_eq!(chosen(false, None), Some("reject".into()));
        assert_eq!(chosen(true, Some("made-up")), Some("once".into()));
        assert_eq!(chosen_option(&[], true, None), None);
    }

    #[test]
    fn a_no_lets_the_prompt_go_on_where_the_agent_offers_one_that_does() {
        // codex-acp's options for a command: its `abort` ends Codex's turn, its `denied` goes on.
        let codex: Vec<acp::PermissionOption> = serde_json::from_value(json!([
            {"optionId": "approved", "name": "Yes, proceed", "kind": "allow_once"},
            {"optionId": "abort", "name": "No, and tell Codex what to do differently", "kind": "reject_once"},
            {"optionId": "denied", "name": "No, continue without running it", "kind": "reject_once"},
        ]))
        .expect("options");
        let chosen = |options: &[acp::PermissionOption]| chosen_option(options, false, None).map(|id| id.to_string());
        assert_eq!(chosen(&codex), Some("denied".into()));
        // Where `abort` is the only "no" (an escalated command), it is the person's "no".
        assert_eq!(chosen(&codex[..2]), Some("abort".into()));
        // The person may still pick it.
        assert_eq!(chosen_option(&codex, false, Some("abort")).map(|id| id.to_string()), Some("abort".into()));
    }

    #[test]
    fn a_cancelled_permission_answers_cancelled() {
        assert_eq!(
            serde_json::to_value(permission_answer(None)).expect("json"),
            json!({"outcome": {"outcome": "cancelled"}})
        );
    }

    #[test]
    fn stop_reasons() {
        let stop_reason_end = |_: &str, reason: &str| {
            let answer = serde_json::from_value(json!({"stopReason": reason})).map_err(|e| e.to_string());
            prompt_end("p", &answer)
        };
        assert_eq!(stop_reason_end("p", "end_turn"), TurnEnd::Complete);
        assert_eq!(stop_reason_end("p", "cancelled"), TurnEnd::Cancelled);
        for reason in ["max_tokens", "max_turn_requests", "refusal", "new_reason"] {
            assert!(matches!(stop_reason_end("p", reason), TurnEnd::Error(_)), "{reason}");
        }
    }
}
