//! The CLI's `can_use_tool` control request as an AHP confirmation, and a person's answer back as
//! the CLI's `allow` / `deny`; `AskUserQuestion` as a chat input request and its answers back.
//!
//! A confirmation carries seed 004's host-only permission fields in `_meta` (`permissionKind`,
//! `permissionPath`, `permissionUrl`, `shellCommand`, `shellLanguage`, `requestSandboxBypass`,
//! `managedApprovalRequired`) and the CLI's own choices as options: allow once, each "always"
//! suggestion the CLI made, deny.

use std::collections::HashMap;

use agent_runner::Question;
use ahp_types::state::{
    ChatInputAnswer, ChatInputAnswerValue, ChatInputMultiSelectQuestion, ChatInputOption, ChatInputQuestion,
    ChatInputRequest, ChatInputResponseKind, ChatInputSingleSelectQuestion, ConfirmationOption, ConfirmationOptionKind,
};
use serde_json::{json, Map, Value};

use crate::tools::Named;

/// The option that allows once.
pub const ALLOW: &str = "allow";
/// The option that denies.
pub const DENY: &str = "deny";
const ALWAYS_PREFIX: &str = "always-";

/// The question a `can_use_tool` request becomes.
pub fn question(named: &Named, request: &Value) -> Question {
    let input = &request["input"];
    let title = match named.tool_name.as_str() {
        "Bash" => "Run this command?".to_owned(),
        _ => format!("Allow {}?", named.display_name),
    };
    let mut options = vec![ConfirmationOption {
        id: ALLOW.into(),
        label: "Allow".into(),
        kind: ConfirmationOptionKind::Approve,
        group: None,
    }];
    for (n, suggestion) in suggestions(request).iter().enumerate() {
        options.push(ConfirmationOption {
            id: format!("{ALWAYS_PREFIX}{n}"),
            label: describe_suggestion(suggestion),
            kind: ConfirmationOptionKind::Approve,
            group: None,
        });
    }
    options.push(ConfirmationOption {
        id: DENY.into(),
        label: "Deny".into(),
        kind: ConfirmationOptionKind::Deny,
        group: None,
    });
    Question { title, options: Some(options), meta: Some(permission_meta(&request["tool_name"], input, request)) }
}

fn suggestions(request: &Value) -> Vec<Value> {
    request["permission_suggestions"].as_array().cloned().unwrap_or_default()
}

/// Seed 004's permission fields for a call, from the CLI's tool name and input.
pub fn permission_meta(tool_name: &Value, input: &Value, request: &Value) -> Map<String, Value> {
    let tool = tool_name.as_str().unwrap_or("");
    let path = ["file_path", "notebook_path", "path"]
        .iter()
        .find_map(|k| input[*k].as_str())
        .or_else(|| request["blocked_path"].as_str());
    let mut meta = Map::new();
    let kind = match tool {
        "Bash" => {
            if let Some(command) = input["command"].as_str() {
                meta.insert("shellCommand".into(), json!(command));
            }
            meta.insert("shellLanguage".into(), json!("bash"));
            if input["dangerouslyDisableSandbox"] == Value::Bool(true) {
                meta.insert("requestSandboxBypass".into(), json!(true));
            }
            "shell"
        }
        "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => "write",
        "Read" | "Glob" | "Grep" | "LS" => "read",
        "WebFetch" | "WebSearch" => {
            if let Some(url) = input["url"].as_str() {
                meta.insert("permissionUrl".into(), json!(url));
            }
            "url"
        }
        t if t.starts_with("mcp__") => "mcp",
        _ => "custom-tool",
    };
    meta.insert("permissionKind".into(), json!(kind));
    if let (Some(path), "write" | "read") = (path, kind) {
        meta.insert("permissionPath".into(), json!(path));
    }
    meta.insert("managedApprovalRequired".into(), json!(false));
    meta
}

/// A person's words for one of the CLI's "always" suggestions.
pub fn describe_suggestion(suggestion: &Value) -> String {
    let scope = match suggestion["destination"].as_str() {
        Some("session") => " for this session",
        Some("localSettings") => " in this project (just for me)",
        Some("projectSettings") => " in this project",
        Some("userSettings") => " everywhere",
        _ => "",
    };
    match suggestion["type"].as_str() {
        Some("addRules") | Some("replaceRules") => {
            let rules: Vec<String> = suggestion["rules"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|r| match (r["toolName"].as_str(), r["ruleContent"].as_str()) {
                    (Some(tool), Some(content)) => format!("{tool}({content})"),
                    (Some(tool), None) => tool.to_owned(),
                    _ => "this".to_owned(),
                })
                .collect();
            let verb = if suggestion["behavior"] == "deny" { "Always deny" } else { "Always allow" };
            format!("{verb} {}{scope}", rules.join(", "))
        }
        Some("setMode") => match suggestion["mode"].as_str() {
            Some("acceptEdits") => format!("Allow all edits{scope}"),
            Some("bypassPermissions") => format!("Allow everything{scope}"),
            Some(mode) => format!("Switch to {mode}{scope}"),
            None => format!("Always allow{scope}"),
        },
        Some("addDirectories") => {
            let dirs: Vec<&str> = suggestion["directories"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            format!("Always allow access to {}{scope}", dirs.join(", "))
        }
        _ => format!("Always allow{scope}"),
    }
}

/// The CLI's answer to `can_use_tool` for a person's decision.
pub fn decision(request: &Value, approved: bool, option_id: Option<&str>, edited_input: Option<&str>) -> Value {
    if !approved {
        return json!({"behavior": "deny", "message": "The person denied this tool call."});
    }
    let input = edited_input
        .and_then(|edited| serde_json::from_str::<Value>(edited).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| request["input"].clone());
    let mut answer = json!({"behavior": "allow", "updatedInput": input});
    if let Some(n) = option_id.and_then(|id| id.strip_prefix(ALWAYS_PREFIX)).and_then(|n| n.parse::<usize>().ok()) {
        if let Some(suggestion) = suggestions(request).get(n) {
            answer["updatedPermissions"] = json!([suggestion]);
        }
    }
    answer
}

/// The answer to a `can_use_tool` the worker allows on its own (a host or client tool).
pub fn allow_as_is(request: &Value) -> Value {
    json!({"behavior": "allow", "updatedInput": request["input"].clone()})
}

/// What a stopped turn answers to a question it leaves.
pub fn withdrawn() -> Value {
    json!({"behavior": "deny", "message": "The turn was stopped.", "interrupt": true})
}

/// What a question asked in an unattended turn is answered: nobody can, so the model decides.
pub fn nobody_to_ask() -> Value {
    json!({"behavior": "deny", "message": "Nobody is watching this run, so nobody can answer a question. Make the choice you judge best, say which and why, and carry on."})
}

/// `AskUserQuestion`'s input as a chat input request with id `request_id`; question `n` has id
/// `q<n>`, and each option's id is its label (what the CLI wants back).
pub fn input_request(request_id: &str, input: &Value) -> ChatInputRequest {
    let questions = ask_questions(input)
        .iter()
        .enumerate()
        .map(|(n, q)| {
            let options: Vec<ChatInputOption> = q["options"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter_map(|o| {
                    let label = o["label"].as_str()?;
                    Some(ChatInputOption {
                        id: label.to_owned(),
                        label: label.to_owned(),
                        description: o["description"].as_str().map(str::to_owned),
                        recommended: None,
                    })
                })
                .collect();
            let id = format!("q{n}");
            let title = q["header"].as_str().map(str::to_owned);
            let message = q["question"].as_str().unwrap_or("").to_owned();
            if q["multiSelect"] == Value::Bool(true) {
                ChatInputQuestion::MultiSelect(ChatInputMultiSelectQuestion {
                    id,
                    title,
                    message,
                    required: Some(true),
                    options,
                    allow_freeform_input: Some(true),
                    min: None,
                    max: None,
                })
            } else {
                ChatInputQuestion::SingleSelect(ChatInputSingleSelectQuestion {
                    id,
                    title,
                    message,
                    required: Some(true),
                    options,
                    allow_freeform_input: Some(true),
                })
            }
        })
        .collect();
    ChatInputRequest {
        id: request_id.to_owned(),
        message: Some("Claude has a question".into()),
        url: None,
        questions: Some(questions),
        answers: None,
    }
}

fn ask_questions(input: &Value) -> Vec<Value> {
    input["questions"].as_array().cloned().unwrap_or_default()
}

/// The CLI's answer to `AskUserQuestion`'s `can_use_tool` for a person's answers: the tool's input
/// with `answers` keyed by question text.
pub fn answers_decision(
    input: &Value,
    response: &ChatInputResponseKind,
    answers: &HashMap<String, ChatInputAnswer>,
) -> Value {
    if *response != ChatInputResponseKind::Accept {
        return json!({"behavior": "deny", "message": "The person declined to answer."});
    }
    let mut by_question = Map::new();
    for (n, q) in ask_questions(input).iter().enumerate() {
        let Some(text) = q["question"].as_str() else { continue };
        if let Some(answer) = answers.get(&format!("q{n}")).and_then(answer_text) {
            by_question.insert(text.to_owned(), Value::String(answer));
        }
    }
    let mut updated = input.clone();
    if let Value::Object(map) = &mut updated {
        map.insert("answers".into(), Value::Object(by_question));
    }
    json!({"behavior": "allow", "updatedInput": updated})
}

fn answer_text(answer: &ChatInputAnswer) -> Option<String> {
    let value = match answer {
        ChatInputAnswer::Submitted(a) | ChatInputAnswer::Draft(a) => &a.value,
        ChatInputAnswer::Skipped(_) => return None,
    };
    match value {
        ChatInputAnswerValue::Text(t) => Some(t.value.clone()),
        ChatInputAnswerValue::Number(n) => Some(n.value.to_string()),
        ChatInputAnswerValue::Boolean(b) => Some(b.value.to_string()),
        ChatInputAnswerValue::Selected(s) => {
            let mut all = vec![s.value.clone()];
            all.extend(s.freeform_values.clone().unwrap_or_default());
            Some(all.into_iter().filter(|v| !v.is_empty()).collect::<Vec<_>>().join(", "))
        }
        ChatInputAnswerValue::SelectedMany(s) => {
            let mut all = s.value.clone();
            all.extend(s.freeform_values.clone().unwrap_or_default());
            Some(all.join(", "))
        }
        ChatInputAnswerValue::Unknown(v) => Some(v.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::name_call;
    use ahp_types::state::{ChatInputAnswered, ChatInputSelectedAnswerValue};

    fn bash_request() -> Value {
        json!({"subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "touch x", "description": "make x"},
               "tool_use_id": "toolu_1",
               "permission_suggestions": [{"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "touch x"}], "behavior": "allow", "destination": "localSettings"}]})
    }

    #[test]
    fn a_shell_question_carries_the_command_and_the_clis_choices() {
        let request = bash_request();
        let q = question(&name_call("Bash", &[]), &request);
        assert_eq!(q.title, "Run this command?");
        let meta = q.meta.expect("meta");
        assert_eq!(meta["permissionKind"], "shell");
        assert_eq!(meta["shellCommand"], "touch x");
        assert_eq!(meta["shellLanguage"], "bash");
        let options = q.options.expect("options");
        let ids: Vec<&str> = options.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(ids, vec!["allow", "always-0", "deny"]);
        assert_eq!(options[1].label, "Always allow Bash(touch x) in this project (just for me)");
    }

    #[test]
    fn a_write_question_names_its_path() {
        let request = json!({"tool_name": "Write", "input": {"file_path": "/w/a.txt", "content": "x"}});
        let meta = permission_meta(&request["tool_name"], &request["input"], &request);
        assert_eq!(meta["permissionKind"], "write");
        assert_eq!(meta["permissionPath"], "/w/a.txt");
    }

    #[test]
    fn decisions_become_allow_deny_and_rules() {
        let request = bash_request();
        assert_eq!(decision(&request, false, Some("deny"), None)["behavior"], "deny");
        let once = decision(&request, true, Some("allow"), None);
        assert_eq!(once["updatedInput"]["command"], "touch x");
        assert!(once.get("updatedPermissions").is_none());
        let always = decision(&request, true, Some("always-0"), None);
        assert_eq!(always["updatedPermissions"][0]["rules"][0]["ruleContent"], "touch x");
        let edited = decision(&request, true, None, Some(r#"{"command":"touch y"}"#));
        assert_eq!(edited["updatedInput"]["command"], "touch y");
    }

    #[test]
    fn ask_user_question_round_trips() {
        let input = json!({"questions": [{"question": "Which colour?", "header": "Colour",
                            "options": [{"label": "Blue", "description": "b"}, {"label": "Red"}], "multiSelect": false}]});
        let request = input_request("toolu_9", &input);
        assert_eq!(request.id, "toolu_9");
        let Some(ChatInputQuestion::SingleSelect(q)) = request.questions.as_ref().and_then(|q| q.first()) else {
            panic!("a single-select question")
        };
        assert_eq!(q.options[0].id, "Blue");
        let mut answers = HashMap::new();
        answers.insert(
            "q0".to_owned(),
            ChatInputAnswer::Submitted(ChatInputAnswered {
                value: ChatInputAnswerValue::Selected(ChatInputSelectedAnswerValue {
                    value: "Red".into(),
                    freeform_values: None,
                }),
            }),
        );
        let answer = answers_decision(&input, &ChatInputResponseKind::Accept, &answers);
        assert_eq!(answer["behavior"], "allow");
        assert_eq!(answer["updatedInput"]["answers"]["Which colour?"], "Red");
        assert_eq!(answers_decision(&input, &ChatInputResponseKind::Decline, &answers)["behavior"], "deny");
    }
}
