//! Claude's Task subagents as chats of their own (seed 004 `subagents`): the CLI's lines of a
//! subagent carry the Task call's id as `parent_tool_use_id`. The first line of one (or its
//! `system/task_started`) opens its chat through `subagent/started`; its lines are mapped there as
//! any turn's; the Task call's result (or a `task_notification`) ends it. `stop_task` stops one.

use std::collections::HashMap;

use agent_runner::{SessionHost, TurnWriter};
use protocol::{SubagentStartedParams, ToolSpec};
use serde_json::Value;

use crate::mapper::TurnMapper;

/// One running subagent.
struct Subagent {
    mapper: TurnMapper,
    /// The CLI's id for it (`system/task_started`), which `stop_task` names.
    task_id: Option<String>,
}

/// The subagents a turn started, by the id of the Task call that started each.
#[derive(Default)]
pub struct Subagents {
    running: HashMap<String, Subagent>,
    /// Task ids said before the subagent's first line.
    task_ids: HashMap<String, String>,
    /// A command a subagent runs shows its output as a terminal the host keeps, as its parent's do.
    terminal_outputs: bool,
}

/// The Task call a line belongs to, when it is a subagent's.
pub fn parent_of(line: &Value) -> Option<&str> {
    line["parent_tool_use_id"].as_str()
}

impl Subagents {
    /// None yet; their commands' outputs kept as terminals when `terminal_outputs` (the start's).
    pub fn new(terminal_outputs: bool) -> Self {
        Self { terminal_outputs, ..Self::default() }
    }

    /// Maps a subagent's line in its own chat, opening that chat first. `input` is the Task
    /// call's input, as the turn holds it.
    pub fn line(&mut self, host: &SessionHost, tools: &[ToolSpec], call: &str, input: &Value, line: &Value) {
        let subagent = self.open(host, tools, call, input);
        let mut own = line.clone();
        // In its own chat a subagent's line is that chat's turn's.
        own["parent_tool_use_id"] = Value::Null;
        subagent.mapper.line(&own);
    }

    /// Notes the CLI's task id of a subagent (`system/task_started`), opening its chat.
    pub fn task_started(&mut self, host: &SessionHost, tools: &[ToolSpec], line: &Value, input: &Value) {
        let (Some(call), Some(task)) = (line["tool_use_id"].as_str(), line["task_id"].as_str()) else { return };
        self.task_ids.insert(call.to_owned(), task.to_owned());
        let subagent = self.open(host, tools, call, input);
        subagent.task_id = Some(task.to_owned());
    }

    fn open(&mut self, host: &SessionHost, tools: &[ToolSpec], call: &str, input: &Value) -> &mut Subagent {
        let task_id = self.task_ids.get(call).cloned();
        self.running.entry(call.to_owned()).or_insert_with(|| {
            let description = input["description"].as_str().map(str::to_owned);
            let agent_name = input["subagent_type"].as_str().map(str::to_owned);
            let turn_id = uuid::Uuid::new_v4().to_string();
            let params = SubagentStartedParams {
                chat: String::new(),
                subagent: format!("ahp-chat:/{}", uuid::Uuid::new_v4()),
                turn_id: turn_id.clone(),
                tool_call_id: call.to_owned(),
                title: description.clone().unwrap_or_else(|| "Subagent".to_owned()),
                agent_name,
                description,
                prompt: input["prompt"].as_str().unwrap_or_default().to_owned(),
            };
            let own = host.subagent_started(params);
            let mapper = TurnMapper::new(TurnWriter::new(own, turn_id), tools.to_vec())
                .with_terminal_outputs(self.terminal_outputs);
            Subagent { mapper, task_id }
        })
    }

    /// The Task call `call` ended (its result came back, or the CLI said the task ended): its
    /// subagent's turn ends with it.
    pub fn ended(&mut self, call: &str, how: End) {
        let Some(mut subagent) = self.running.remove(call) else { return };
        self.task_ids.remove(call);
        let writer = subagent.mapper.writer();
        match how {
            End::Complete => writer.complete(),
            End::Cancelled => writer.cancelled(),
            End::Failed(why) => writer.error("subagentFailed", why),
        }
    }

    /// Ends the Task calls a `user` line carries results for.
    pub fn results(&mut self, line: &Value) {
        let content = &line["message"]["content"];
        for block in content.as_array().map(Vec::as_slice).unwrap_or_default() {
            let Some(call) = block["tool_use_id"].as_str().filter(|_| block["type"] == "tool_result") else { continue };
            if !self.running.contains_key(call) {
                continue;
            }
            let how = if block["is_error"] == Value::Bool(true) {
                End::Failed(crate::tools::result_text(&block["content"]))
            } else {
                End::Complete
            };
            self.ended(call, how);
        }
    }

    /// Ends a subagent the CLI said ended (`system/task_notification`).
    pub fn notification(&mut self, line: &Value) {
        let Some(call) = line["tool_use_id"].as_str().map(str::to_owned) else { return };
        let how = match line["status"].as_str() {
            Some("completed") => End::Complete,
            Some("stopped" | "killed" | "cancelled") => End::Cancelled,
            Some("failed") => End::Failed(line["summary"].as_str().unwrap_or("The subagent failed").to_owned()),
            _ => return,
        };
        self.ended(&call, how);
    }

    /// The turn ended: every subagent still running ends with it.
    pub fn end_all(&mut self, how: &End) {
        let calls: Vec<String> = self.running.keys().cloned().collect();
        for call in calls {
            self.ended(&call, how.clone());
        }
    }

    /// The CLI's task id of the subagent `call` started, while it runs.
    pub fn task_id(&self, call: &str) -> Option<String> {
        self.running.get(call).and_then(|s| s.task_id.clone()).or_else(|| self.task_ids.get(call).cloned())
    }
}

/// How a subagent's turn ends.
#[derive(Debug, Clone)]
pub enum End {
    /// Its work is done.
    Complete,
    /// It was stopped.
    Cancelled,
    /// It failed, saying why.
    Failed(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::capture_host;
    use ahp_types::actions::StateAction;
    use serde_json::json;

    #[tokio::test]
    async fn a_subagents_lines_become_its_own_turn_which_its_task_result_ends() {
        let (host, captured) = capture_host();
        let mut subagents = Subagents::default();
        let input = json!({"description": "look around", "prompt": "look", "subagent_type": "general-purpose"});
        let started =
            json!({"type": "system", "subtype": "task_started", "task_id": "task-1", "tool_use_id": "toolu_1"});
        subagents.task_started(&host, &[], &started, &input);
        assert_eq!(subagents.task_id("toolu_1").as_deref(), Some("task-1"));
        let said = json!({"type": "assistant", "parent_tool_use_id": "toolu_1",
                          "message": {"id": "m1", "content": [{"type": "text", "text": "found it"}]}});
        assert_eq!(parent_of(&said), Some("toolu_1"));
        subagents.line(&host, &[], "toolu_1", &input, &said);
        let result = json!({"type": "user", "parent_tool_use_id": null,
                            "message": {"content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "done"}]}});
        subagents.results(&result);
        assert_eq!(subagents.task_id("toolu_1"), None, "it ended");
        let actions = captured.actions().await;
        assert!(
            actions.iter().any(|a| matches!(a, StateAction::ChatResponsePart(p)
                if matches!(&p.part, ahp_types::state::ResponsePart::Markdown(m) if m.content == "found it"))),
            "{actions:?}"
        );
        assert!(matches!(actions.last(), Some(StateAction::ChatTurnComplete(_))), "{actions:?}");
    }

    #[tokio::test]
    async fn the_turns_end_ends_every_subagent_still_running() {
        let (host, captured) = capture_host();
        let mut subagents = Subagents::default();
        let line = json!({"type": "user", "parent_tool_use_id": "toolu_2", "message": {"content": "go"}});
        subagents.line(&host, &[], "toolu_2", &Value::Null, &line);
        subagents.end_all(&End::Cancelled);
        let actions = captured.actions().await;
        assert!(matches!(actions.last(), Some(StateAction::ChatTurnCancelled(_))), "{actions:?}");
    }
}
