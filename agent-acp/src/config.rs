//! What an ACP server offers a session - its modes, its config options, its models - as AHP
//! config keys and models, and how a change of one is asked for.
//!
//! Keys: the server's mode is `permissionMode` (from a config option of category `mode` where it
//! names one, else from the legacy `modes`); a config option of category `model` is the session's
//! models, chosen per turn rather than as a key; every other option is a control of its own under
//! `acp.<id>`, because the ids are the server's and the other keys are the host's.

use std::collections::HashMap;

use ahp_types::common::JsonObject;
use ahp_types::state::{SessionConfigPropertySchema, SessionModelInfo};
use serde_json::{json, Value};

/// The key the server's mode is kept under.
pub const MODE_KEY: &str = "permissionMode";
/// The prefix of every other option's key.
pub const OPTION_PREFIX: &str = "acp.";

/// One value of a select.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// What is sent.
    pub value: String,
    /// What a person reads.
    pub name: String,
    /// More about it.
    pub description: Option<String>,
}

/// A select's values, or a switch.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// One of these values.
    Select(Vec<Choice>),
    /// On or off.
    Boolean,
}

/// One session config option the server named.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigOption {
    /// The server's id for it.
    pub id: String,
    /// What a person reads.
    pub name: String,
    /// More about it.
    pub description: Option<String>,
    /// `mode`, `model`, `thought_level`, ... or none.
    pub category: Option<String>,
    /// What it takes.
    pub kind: Kind,
    /// The value in force.
    pub current: Value,
}

impl ConfigOption {
    /// The AHP key it is kept under; none for the model option, which is the session's models.
    pub fn key(&self) -> Option<String> {
        match self.category.as_deref() {
            Some("model") if matches!(self.kind, Kind::Select(_)) => None,
            Some("mode") if matches!(self.kind, Kind::Select(_)) => Some(MODE_KEY.to_owned()),
            _ => Some(format!("{OPTION_PREFIX}{}", self.id)),
        }
    }

    fn offers(&self, value: &Value) -> bool {
        match (&self.kind, value) {
            (Kind::Select(choices), Value::String(v)) => choices.iter().any(|c| &c.value == v),
            (Kind::Boolean, Value::Bool(_)) => true,
            _ => false,
        }
    }
}

/// A mode from the legacy `modes` answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Mode {
    /// The id.
    pub id: String,
    /// The name.
    pub name: String,
    /// More about it.
    pub description: Option<String>,
}

/// Everything the server offers one session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Offers {
    /// The legacy modes and the one in force.
    pub modes: Option<(String, Vec<Mode>)>,
    /// The config options.
    pub options: Vec<ConfigOption>,
    /// The legacy models (`models` on `session/new`) and the one in force.
    pub legacy_models: Option<(String, Vec<Choice>)>,
}

/// Why a model cannot be chosen: a sentence a person reads as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelRefused {
    /// The server names no models at all.
    #[error("{provider}: this ACP server names no models, so \"{model}\" cannot be chosen")]
    NoneNamed {
        /// The provider.
        provider: String,
        /// The model asked for.
        model: String,
    },
    /// The server names others.
    #[error("{provider} does not offer model \"{model}\"; it offers {offered}")]
    NotOffered {
        /// The provider.
        provider: String,
        /// The model asked for.
        model: String,
        /// The ids it offers, joined.
        offered: String,
    },
}

/// A value the server does not offer for a key it does take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotOffered;

/// How a change is asked of the server.
#[derive(Debug, Clone, PartialEq)]
pub enum Ask {
    /// `session/set_mode`.
    SetMode(String),
    /// `session/set_config_option`.
    SetOption {
        /// The option's id.
        config_id: String,
        /// The value.
        value: Value,
    },
    /// `session/set_model` (servers from before config options).
    SetModel(String),
    /// Nothing to ask: the value is in force already.
    Nothing,
}

fn text(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn choices(options: &Value) -> Vec<Choice> {
    let mut out = Vec::new();
    for entry in options.as_array().into_iter().flatten() {
        // A group's values are flattened into the one list a picker draws.
        if let Some(inner) = entry.get("options").filter(|o| o.is_array()) {
            out.extend(choices(inner));
        } else if let Some(value) = text(entry, "value") {
            let name = text(entry, "name").unwrap_or_else(|| value.clone());
            out.push(Choice { value, name, description: text(entry, "description") });
        }
    }
    out
}

/// Reads a `configOptions` list leniently: an option of a kind this bridge cannot draw is left out.
pub fn parse_options(list: &Value) -> Vec<ConfigOption> {
    let mut out = Vec::new();
    for entry in list.as_array().into_iter().flatten() {
        let Some(id) = text(entry, "id") else {
            continue;
        };
        let kind = match entry.get("type").and_then(Value::as_str) {
            Some("select") | None if entry.get("options").is_some() => Kind::Select(choices(&entry["options"])),
            Some("boolean") => Kind::Boolean,
            _ => continue,
        };
        out.push(ConfigOption {
            name: text(entry, "name").unwrap_or_else(|| id.clone()),
            description: text(entry, "description"),
            category: text(entry, "category"),
            current: entry.get("currentValue").cloned().unwrap_or(Value::Null),
            kind,
            id,
        });
    }
    out
}

fn parse_modes(modes: &Value) -> Option<(String, Vec<Mode>)> {
    let available = modes.get("availableModes")?.as_array()?;
    let list: Vec<Mode> = available
        .iter()
        .filter_map(|m| {
            let id = text(m, "id")?;
            Some(Mode { name: text(m, "name").unwrap_or_else(|| id.clone()), description: text(m, "description"), id })
        })
        .collect();
    let current = text(modes, "currentModeId").or_else(|| list.first().map(|m| m.id.clone()))?;
    Some((current, list))
}

fn parse_legacy_models(models: &Value) -> Option<(String, Vec<Choice>)> {
    let available = models.get("availableModels")?.as_array()?;
    let list: Vec<Choice> = available
        .iter()
        .filter_map(|m| {
            let value = text(m, "modelId")?;
            Some(Choice {
                name: text(m, "name").unwrap_or_else(|| value.clone()),
                description: text(m, "description"),
                value,
            })
        })
        .collect();
    let current = text(models, "currentModelId").unwrap_or_default();
    Some((current, list))
}

impl Offers {
    /// What a `session/new` or `session/load` answer offers.
    pub fn from_answer(answer: &Value) -> Self {
        Self {
            modes: answer.get("modes").and_then(parse_modes),
            options: answer.get("configOptions").map(parse_options).unwrap_or_default(),
            legacy_models: answer.get("models").and_then(parse_legacy_models),
        }
    }

    fn option_of_category(&self, category: &str) -> Option<&ConfigOption> {
        self.options.iter().find(|o| o.category.as_deref() == Some(category) && matches!(o.kind, Kind::Select(_)))
    }

    /// The values in force, by AHP key.
    pub fn values(&self) -> JsonObject {
        let mut values = JsonObject::new();
        if let Some((current, _)) = &self.modes {
            values.insert(MODE_KEY.to_owned(), Value::String(current.clone()));
        }
        for option in &self.options {
            if let Some(key) = option.key() {
                values.insert(key, option.current.clone());
            }
        }
        values
    }

    /// The models a turn may name, in the server's order.
    pub fn models(&self, provider: &str) -> Vec<SessionModelInfo> {
        let choices: Vec<Choice> = match (self.option_of_category("model"), &self.legacy_models) {
            (Some(ConfigOption { kind: Kind::Select(choices), .. }), _) => choices.clone(),
            (_, Some((_, list))) => list.clone(),
            _ => Vec::new(),
        };
        choices
            .into_iter()
            .map(|c| {
                let meta = c.description.map(|d| {
                    let mut meta = JsonObject::new();
                    meta.insert("description".into(), Value::String(d));
                    meta
                });
                SessionModelInfo {
                    id: c.value,
                    provider: provider.to_owned(),
                    name: c.name,
                    max_context_window: None,
                    max_output_tokens: None,
                    max_prompt_tokens: None,
                    supports_vision: None,
                    policy_state: None,
                    config_schema: None,
                    meta,
                }
            })
            .collect()
    }

    /// The model in force, if the server names one.
    pub fn current_model(&self) -> Option<String> {
        match (self.option_of_category("model"), &self.legacy_models) {
            (Some(option), _) => option.current.as_str().map(str::to_owned),
            (_, Some((current, _))) if !current.is_empty() => Some(current.clone()),
            _ => None,
        }
    }

    /// How to point the server at `model`, or the sentence refusing it.
    pub fn ask_model(&self, provider: &str, model: &str) -> Result<Ask, ModelRefused> {
        let offered = self.models(provider);
        let (provider, model) = (provider.to_owned(), model.to_owned());
        if offered.is_empty() {
            return Err(ModelRefused::NoneNamed { provider, model });
        }
        if !offered.iter().any(|m| m.id == model) {
            let ids: Vec<&str> = offered.iter().map(|m| m.id.as_str()).collect();
            return Err(ModelRefused::NotOffered { provider, model, offered: ids.join(", ") });
        }
        if self.current_model().as_deref() == Some(model.as_str()) {
            return Ok(Ask::Nothing);
        }
        Ok(match self.option_of_category("model") {
            Some(option) => Ask::SetOption { config_id: option.id.clone(), value: Value::String(model.to_owned()) },
            None => Ask::SetModel(model),
        })
    }

    /// How to set config `key` to `value`: `Ok(None)` for a key this session does not take,
    /// `Err` with VS Code's sentence for a value it does not offer.
    pub fn ask(&self, key: &str, value: &Value) -> Result<Option<Ask>, NotOffered> {
        if key == MODE_KEY {
            if let Some(option) = self.option_of_category("mode") {
                return self.ask_option(option, value).map(Some);
            }
            let Some((current, modes)) = &self.modes else {
                return Ok(None);
            };
            let Some(id) = value.as_str().filter(|v| modes.iter().any(|m| m.id == *v)) else {
                return Err(NotOffered);
            };
            return Ok(Some(if current == id { Ask::Nothing } else { Ask::SetMode(id.to_owned()) }));
        }
        let Some(id) = key.strip_prefix(OPTION_PREFIX) else {
            return Ok(None);
        };
        match self.options.iter().find(|o| o.id == id && o.key().as_deref() == Some(key)) {
            Some(option) => self.ask_option(option, value).map(Some),
            None => Ok(None),
        }
    }

    fn ask_option(&self, option: &ConfigOption, value: &Value) -> Result<Ask, NotOffered> {
        if !option.offers(value) {
            return Err(NotOffered);
        }
        if &option.current == value {
            return Ok(Ask::Nothing);
        }
        Ok(Ask::SetOption { config_id: option.id.clone(), value: value.clone() })
    }

    /// The server moved its mode.
    pub fn mode_moved(&mut self, id: &str) {
        if let Some(option) = self.options.iter_mut().find(|o| o.category.as_deref() == Some("mode")) {
            option.current = Value::String(id.to_owned());
        }
        if let Some((current, _)) = &mut self.modes {
            *current = id.to_owned();
        }
    }

    /// The server moved its legacy model.
    pub fn legacy_model_moved(&mut self, id: &str) {
        if let Some((current, _)) = &mut self.legacy_models {
            *current = id.to_owned();
        }
    }

    /// The controls a client draws for this session, by key.
    pub fn properties(&self) -> HashMap<String, SessionConfigPropertySchema> {
        let mut properties = HashMap::new();
        if let Some(option) = self.option_of_category("mode") {
            properties.insert(MODE_KEY.to_owned(), control(option, "Mode"));
        } else if let Some((current, modes)) = &self.modes {
            let mut schema = property("Mode", Some("How the agent asks before it acts".into()));
            schema.default = Some(Value::String(current.clone()));
            schema.r#enum = Some(modes.iter().map(|m| Value::String(m.id.clone())).collect());
            schema.enum_labels = Some(modes.iter().map(|m| m.name.clone()).collect());
            schema.enum_descriptions = Some(modes.iter().map(|m| m.description.clone().unwrap_or_default()).collect());
            properties.insert(MODE_KEY.to_owned(), schema);
        }
        for option in &self.options {
            match option.key() {
                Some(key) if key != MODE_KEY => {
                    properties.insert(key, control(option, &option.name));
                }
                _ => {}
            }
        }
        properties
    }
}

fn property(title: &str, description: Option<String>) -> SessionConfigPropertySchema {
    SessionConfigPropertySchema {
        r#type: "string".into(),
        title: title.to_owned(),
        description,
        default: None,
        r#enum: None,
        enum_labels: None,
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
    }
}

fn control(option: &ConfigOption, title: &str) -> SessionConfigPropertySchema {
    let mut schema = property(title, option.description.clone());
    schema.default = Some(option.current.clone()).filter(|v| !v.is_null());
    match &option.kind {
        Kind::Boolean => schema.r#type = "boolean".into(),
        Kind::Select(choices) => {
            schema.r#enum = Some(choices.iter().map(|c| Value::String(c.value.clone())).collect());
            schema.enum_labels = Some(choices.iter().map(|c| c.name.clone()).collect());
            if choices.iter().any(|c| c.description.is_some()) {
                schema.enum_descriptions =
                    Some(choices.iter().map(|c| c.description.clone().unwrap_or_default()).collect());
            }
        }
    }
    schema
}

/// The params of the request an [`Ask`] stands for.
pub fn request_of(ask: &Ask, session_id: &str) -> Option<(&'static str, Value)> {
    match ask {
        Ask::SetMode(id) => Some(("session/set_mode", json!({"sessionId": session_id, "modeId": id}))),
        Ask::SetOption { config_id, value } => {
            Some(("session/set_config_option", json!({"sessionId": session_id, "configId": config_id, "value": value})))
        }
        Ask::SetModel(id) => Some(("session/set_model", json!({"sessionId": session_id, "modelId": id}))),
        Ask::Nothing => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claude_like() -> Offers {
        Offers::from_answer(&json!({
            "sessionId": "s",
            "modes": {"currentModeId": "auto", "availableModes": [{"id": "auto", "name": "Auto"}, {"id": "default", "name": "Default"}]},
            "configOptions": [
                {"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": "auto",
                 "options": [{"value": "auto", "name": "Auto"}, {"value": "default", "name": "Default"}]},
                {"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": "default",
                 "options": [{"value": "default", "name": "Default"}, {"group": "more", "name": "More", "options": [{"value": "opus", "name": "Opus"}]}]},
                {"id": "fast", "name": "Fast", "type": "boolean", "currentValue": false},
                {"id": "weird", "name": "Weird", "type": "slider"}
            ]
        }))
    }

    #[test]
    fn keys_values_and_models() {
        let offers = claude_like();
        let values = offers.values();
        assert_eq!(values.get(MODE_KEY), Some(&json!("auto")));
        assert_eq!(values.get("acp.fast"), Some(&json!(false)));
        assert!(!values.contains_key("acp.model"));
        assert!(!values.contains_key("acp.weird"));
        let models: Vec<String> = offers.models("claude").into_iter().map(|m| m.id).collect();
        assert_eq!(models, vec!["default", "opus"]);
        let properties = offers.properties();
        assert_eq!(properties[MODE_KEY].r#enum, Some(vec![json!("auto"), json!("default")]));
        assert_eq!(properties["acp.fast"].r#type, "boolean");
    }

    #[test]
    fn asks_go_through_the_option_where_there_is_one() {
        let offers = claude_like();
        assert_eq!(
            offers.ask(MODE_KEY, &json!("default")),
            Ok(Some(Ask::SetOption { config_id: "mode".into(), value: json!("default") }))
        );
        assert_eq!(offers.ask(MODE_KEY, &json!("auto")), Ok(Some(Ask::Nothing)));
        assert_eq!(offers.ask(MODE_KEY, &json!("nope")), Err(NotOffered));
        assert_eq!(offers.ask("voice", &json!("x")), Ok(None));
        assert_eq!(
            offers.ask_model("claude", "opus"),
            Ok(Ask::SetOption { config_id: "model".into(), value: json!("opus") })
        );
        assert!(offers.ask_model("claude", "gpt").expect_err("not offered").to_string().contains("default, opus"));
    }

    #[test]
    fn legacy_modes_and_models() {
        let offers = Offers::from_answer(&json!({
            "modes": {"currentModeId": "default", "availableModes": [{"id": "default", "name": "Default"}, {"id": "plan", "name": "Plan"}]},
            "models": {"currentModelId": "sonnet", "availableModels": [{"modelId": "sonnet", "name": "Sonnet"}, {"modelId": "haiku", "name": "Haiku"}]}
        }));
        assert_eq!(offers.ask(MODE_KEY, &json!("plan")), Ok(Some(Ask::SetMode("plan".into()))));
        assert_eq!(offers.ask_model("p", "haiku"), Ok(Ask::SetModel("haiku".into())));
        assert_eq!(offers.ask_model("p", "sonnet"), Ok(Ask::Nothing));
        assert!(Offers::default().ask_model("p", "x").expect_err("none").to_string().contains("names no models"));
    }
}
