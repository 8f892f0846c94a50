//! What the mock model APIs answer the side calls a CLI makes beside the conversation: a request
//! that forces a tool call (`tool_choice` naming a function, or `required`/`any`) or asks for JSON
//! (`response_format`, `text.format`, `output_format`, `responseSchema`). Safety classifiers
//! (Qwen Code's, Claude Code's auto mode), title and memory extraction, model routers and
//! next-speaker checks are asked this way, and read the answer as the verdict.
//!
//! Every dialect's request is read into one [`Asked`] (by [`openai_chat`], [`responses`],
//! [`anthropic`], [`gemini`]), and answered by [`Side::answer`]: an object of the shape the
//! request's schema asks, each field as the [`Verdict`] the test chose reads it (a classifier's
//! `shouldBlock` is `false` when it allows), with the fields the test named laid over it. A mock
//! that is never told answers every side call [`Verdict::Allow`]: a CLI that lets such a call
//! decide for the person runs what the person was never asked about, and the test sees it.

use std::sync::Mutex;

use agent_runner::lock;
use serde_json::{json, Map, Value};

/// How a side call's answer reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Verdict {
    /// Whatever a classifier may answer to let an action through: `shouldBlock: false`,
    /// `allowed: true`, `decision: "allow"`.
    #[default]
    Allow,
    /// The opposite.
    Deny,
}

/// The answer a test chooses for the side calls: a verdict, and fields named outright.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SideCalls {
    /// How the fields that say yes or no read.
    pub verdict: Verdict,
    /// Fields (at any depth of the answer) set to these values whatever the verdict says.
    pub fields: Map<String, Value>,
}

impl SideCalls {
    /// Every side call says `verdict`.
    pub fn say(verdict: Verdict) -> Self {
        Self { verdict, fields: Map::new() }
    }

    /// Also answers `field` with `value` wherever the schema has it.
    pub fn with(mut self, field: &str, value: Value) -> Self {
        self.fields.insert(field.to_owned(), value);
        self
    }
}

/// What a side call asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Asked {
    /// A call of this function (named by the request, or the one it offers), whose arguments
    /// have the shape `schema`.
    Call {
        /// The function.
        name: String,
        /// Its parameters' JSON schema (OpenAPI's for Gemini).
        schema: Value,
    },
    /// Text that is a JSON value of the shape `schema` (`{}` for "any object").
    Json {
        /// The schema.
        schema: Value,
    },
}

/// One side call a mock answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    /// The function called, when it forced one.
    pub function: Option<String>,
    /// What it was answered.
    pub answer: Value,
}

/// A mock's side of it: what the test chose, and what was answered.
#[derive(Debug, Default)]
pub struct Side {
    chosen: Mutex<SideCalls>,
    answered: Mutex<Vec<Answered>>,
}

impl Side {
    /// From now on every side call is answered as `choice` says.
    pub fn choose(&self, choice: SideCalls) {
        *lock(&self.chosen) = choice;
    }

    /// The side calls answered so far, oldest first.
    pub fn answered(&self) -> Vec<Answered> {
        lock(&self.answered).clone()
    }

    /// The answer to `asked` (a function's arguments, or the JSON value), kept in
    /// [`Side::answered`].
    pub fn answer(&self, asked: &Asked) -> Value {
        let choice = lock(&self.chosen).clone();
        let (function, schema) = match asked {
            Asked::Call { name, schema } => (Some(name.clone()), schema),
            Asked::Json { schema } => (None, schema),
        };
        let answer = shaped(schema, None, &choice);
        lock(&self.answered).push(Answered { function, answer: answer.clone() });
        answer
    }
}

/// Words in a field's name or a value that mean "let it through".
const YES: [&str; 8] = ["allow", "approv", "safe", "permit", "accept", "pass", "yes", "low"];
/// Words that mean "stop it".
const NO: [&str; 10] = ["block", "deny", "denied", "reject", "danger", "unsafe", "risk", "harm", "malicious", "high"];

fn says(text: &str, words: &[&str]) -> bool {
    let text = text.to_ascii_lowercase();
    words.iter().any(|w| text.contains(w))
}

/// A value of the shape `schema` (JSON Schema or OpenAPI) describes, for the field `name`, read
/// as `choice` says.
fn shaped(schema: &Value, name: Option<&str>, choice: &SideCalls) -> Value {
    if let Some(chosen) = name.and_then(|n| choice.fields.get(n)) {
        return chosen.clone();
    }
    let allow = choice.verdict == Verdict::Allow;
    if let Some(values) = schema["enum"].as_array().filter(|v| !v.is_empty()) {
        let wanted = if allow { &YES[..] } else { &NO[..] };
        let fitting = values.iter().find(|v| v.as_str().is_some_and(|s| says(s, wanted)));
        return fitting.unwrap_or(&values[0]).clone();
    }
    let kind = match &schema["type"] {
        Value::Array(kinds) => kinds.iter().find(|k| *k != "null").and_then(Value::as_str).unwrap_or("object"),
        other => other.as_str().unwrap_or("object"),
    };
    let name = name.unwrap_or_default();
    match kind.to_ascii_lowercase().as_str() {
        "string" if says(name, &["decision", "verdict", "outcome"]) => json!(if allow { "allow" } else { "deny" }),
        "string" => json!("mock"),
        "integer" | "number" => schema.get("minimum").cloned().unwrap_or(json!(1)),
        "boolean" if says(name, &NO) => json!(!allow),
        "boolean" if says(name, &YES) => json!(allow),
        "boolean" => json!(false),
        "array" => json!([]),
        _ => {
            let properties = schema["properties"].as_object().cloned().unwrap_or_default();
            let mut object: Map<String, Value> =
                properties.iter().map(|(k, v)| (k.clone(), shaped(v, Some(k), choice))).collect();
            // A field the test named that the schema leaves open (a JSON object of any shape).
            if properties.is_empty() {
                object.extend(choice.fields.clone());
            }
            Value::Object(object)
        }
    }
}

/// The function a forced choice names among `offered` (name, schema): the one named, else the
/// only or first one offered.
fn forced(offered: Vec<(String, Value)>, named: Option<&str>) -> Option<Asked> {
    let pick = match named {
        Some(name) => offered.into_iter().find(|(n, _)| n == name),
        None => offered.into_iter().next(),
    };
    pick.map(|(name, schema)| Asked::Call { name, schema })
}

fn text(value: &Value) -> Option<&str> {
    value.as_str()
}

/// An OpenAI chat completions request's side call: `tool_choice` `required` or naming a function,
/// or `response_format` `json_schema` / `json_object`.
pub fn openai_chat(body: &Value) -> Option<Asked> {
    let choice = &body["tool_choice"];
    let forcing = choice == "required" || choice["type"] == "function";
    if forcing {
        let tools = body["tools"].as_array().cloned().unwrap_or_default();
        let offered = tools
            .iter()
            .filter_map(|t| Some((text(&t["function"]["name"])?.to_owned(), t["function"]["parameters"].clone())))
            .collect();
        return forced(offered, text(&choice["function"]["name"]));
    }
    json_format(&body["response_format"], &body["response_format"]["json_schema"]["schema"])
}

/// A Responses request's side call: `tool_choice` `required` or naming a function, or
/// `text.format` `json_schema` / `json_object`.
pub fn responses(body: &Value) -> Option<Asked> {
    let choice = &body["tool_choice"];
    if choice == "required" || choice["type"] == "function" {
        let tools = body["tools"].as_array().cloned().unwrap_or_default();
        let offered = tools
            .iter()
            .filter(|t| t["type"] == "function")
            .filter_map(|t| Some((text(&t["name"])?.to_owned(), t["parameters"].clone())))
            .collect();
        return forced(offered, text(&choice["name"]));
    }
    let format = &body["text"]["format"];
    json_format(format, &format["schema"])
}

fn json_format(format: &Value, schema: &Value) -> Option<Asked> {
    match format["type"].as_str() {
        Some("json_schema") => Some(Asked::Json { schema: schema.clone() }),
        Some("json_object") => Some(Asked::Json { schema: json!({}) }),
        _ => None,
    }
}

/// An Anthropic Messages request's side call: `tool_choice` `tool` or `any`, or a JSON
/// `output_format` (also under `output_config.format`).
pub fn anthropic(body: &Value) -> Option<Asked> {
    let choice = &body["tool_choice"];
    if choice["type"] == "tool" || choice["type"] == "any" {
        let tools = body["tools"].as_array().cloned().unwrap_or_default();
        let offered =
            tools.iter().filter_map(|t| Some((text(&t["name"])?.to_owned(), t["input_schema"].clone()))).collect();
        return forced(offered, text(&choice["name"]));
    }
    let format =
        if body["output_format"].is_null() { &body["output_config"]["format"] } else { &body["output_format"] };
    json_format(format, &format["schema"])
}

/// A Gemini request's side call: `toolConfig.functionCallingConfig.mode` `ANY`, or a JSON
/// `responseMimeType` (its `responseJsonSchema` or `responseSchema`).
pub fn gemini(body: &Value) -> Option<Asked> {
    let calling = &body["toolConfig"]["functionCallingConfig"];
    if calling["mode"] == "ANY" {
        let tools = body["tools"].as_array().cloned().unwrap_or_default();
        let offered = tools
            .iter()
            .flat_map(|t| t["functionDeclarations"].as_array().cloned().unwrap_or_default())
            .filter_map(|f| {
                let schema =
                    if f["parametersJsonSchema"].is_null() { &f["parameters"] } else { &f["parametersJsonSchema"] };
                Some((text(&f["name"])?.to_owned(), schema.clone()))
            })
            .collect();
        return forced(offered, calling["allowedFunctionNames"][0].as_str());
    }
    let config = &body["generationConfig"];
    let schema =
        if config["responseJsonSchema"].is_null() { &config["responseSchema"] } else { &config["responseJsonSchema"] };
    let json = config["responseMimeType"] == "application/json" || !schema.is_null();
    json.then(|| Asked::Json { schema: if schema.is_null() { json!({}) } else { schema.clone() } })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qwen Code's safety classifier, as it asks through an OpenAI-compatible API.
    fn classifier() -> Value {
        json!({
            "messages": [{"role": "system", "content": "You are a security classifier"}, {"role": "user", "content": "touch x"}],
            "tools": [{"type": "function", "function": {"name": "respond_in_schema", "parameters": {
                "type": "object", "required": ["shouldBlock"],
                "properties": {"shouldBlock": {"type": "boolean"}, "reason": {"type": "string"}}}}}],
            "tool_choice": "required"
        })
    }

    #[test]
    fn a_forced_choice_is_answered_with_the_verdict_the_test_chose() {
        let side = Side::default();
        let asked = openai_chat(&classifier()).expect("a side call");
        assert!(matches!(&asked, Asked::Call { name, .. } if name == "respond_in_schema"));
        assert_eq!(side.answer(&asked), json!({"shouldBlock": false, "reason": "mock"}), "allowed when not told");
        side.choose(SideCalls::say(Verdict::Deny));
        assert_eq!(side.answer(&asked)["shouldBlock"], json!(true));
        side.choose(SideCalls::say(Verdict::Deny).with("reason", json!("too risky")));
        assert_eq!(side.answer(&asked)["reason"], json!("too risky"));
        assert_eq!(side.answered().len(), 3);
    }

    #[test]
    fn every_dialect_says_what_its_side_calls_ask() {
        let named = json!({"tools": [{"type": "function", "function": {"name": "a", "parameters": {}}},
                                     {"type": "function", "function": {"name": "b", "parameters": {"type": "object"}}}],
                           "tool_choice": {"type": "function", "function": {"name": "b"}}});
        assert!(matches!(openai_chat(&named), Some(Asked::Call { name, .. }) if name == "b"));
        assert_eq!(
            openai_chat(&json!({"response_format": {"type": "json_object"}})),
            Some(Asked::Json { schema: json!({}) })
        );
        assert_eq!(openai_chat(&json!({"tool_choice": "auto", "tools": []})), None);
        let responses_body =
            json!({"tools": [{"type": "function", "name": "verdict", "parameters": {}}], "tool_choice": "required"});
        assert!(matches!(responses(&responses_body), Some(Asked::Call { name, .. }) if name == "verdict"));
        let text = json!({"text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}});
        assert_eq!(responses(&text), Some(Asked::Json { schema: json!({"type": "object"}) }));
        let claude =
            json!({"tools": [{"name": "t", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "t"}});
        assert!(matches!(anthropic(&claude), Some(Asked::Call { name, .. }) if name == "t"));
        let structured = json!({"output_format": {"type": "json_schema", "schema": {"type": "object"}}});
        assert!(matches!(anthropic(&structured), Some(Asked::Json { .. })));
        let router = json!({"generationConfig": {"responseMimeType": "application/json",
                            "responseJsonSchema": {"type": "object", "properties": {"model_choice": {"type": "string", "enum": ["flash", "pro"]}}}}});
        assert_eq!(Side::default().answer(&gemini(&router).expect("json")), json!({"model_choice": "flash"}));
        let any = json!({"tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "OBJECT"}}]}],
                         "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}});
        assert!(matches!(gemini(&any), Some(Asked::Call { name, .. }) if name == "f"));
        assert_eq!(gemini(&json!({"contents": []})), None);
    }

    #[test]
    fn enums_and_names_read_as_the_verdict() {
        let schema = json!({"type": "object", "properties": {
            "decision": {"type": "string", "enum": ["block", "ask", "allow"]},
            "risk_level": {"type": "string", "enum": ["high", "medium", "low"]},
            "verdict": {"type": "string"}, "safe": {"type": "boolean"}, "next_speaker": {"type": "string", "enum": ["user", "model"]}}});
        let allow = shaped(&schema, None, &SideCalls::default());
        assert_eq!(
            allow,
            json!({"decision": "allow", "risk_level": "low", "verdict": "allow", "safe": true, "next_speaker": "user"})
        );
        let deny = shaped(&schema, None, &SideCalls::say(Verdict::Deny));
        assert_eq!(
            deny,
            json!({"decision": "block", "risk_level": "high", "verdict": "deny", "safe": false, "next_speaker": "user"})
        );
    }
}
