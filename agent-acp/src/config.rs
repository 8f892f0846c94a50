//! What an ACP server offers a session - its modes, its config options, its models - as AHP
//! config keys and models, and how a change of one is asked for.
//!
//! Keys: the server's mode is `permissionMode` (from a config option of category `mode` where it
//! names one, else from the legacy `modes`); a config option of category `model` is the session's
//! models, chosen per turn rather than as a key; every other option is a control of its own under
//! `acp.<id>`, because the ids are the server's and the other keys are the host's.
//!
//! What the server sends is read as the `agent-client-protocol` schema's types; the only ACP this
//! module spells itself is the session-model API from before config options (`models`,
//! `session/set_model`), which the schema no longer carries and older agents still speak.

use std::collections::HashMap;

use agent_client_protocol_schema::v1 as acp;
use agent_client_protocol_schema::v1::{SessionConfigOptionCategory as Category, AGENT_METHOD_NAMES};
use ahp_types::common::JsonObject;
use ahp_types::state::{SessionConfigPropertySchema, SessionModelInfo};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The key the server's mode is kept under.
pub const MODE_KEY: &str = "permissionMode";
/// The prefix of every other option's key.
pub const OPTION_PREFIX: &str = "acp.";

/// The modes, among the ACP agents people use, that act without asking: claude-agent-acp's
/// `bypassPermissions`, Gemini CLI's and Qwen Code's `yolo`, Codex's `full-access`. A window whose
/// policy restricts elevated auto-approval is offered none of them, in the form drawn before a
/// session exists as in the session (seed 004: "Withhold the same modes in both").
const ELEVATED_MODES: [&str; 3] = ["bypassPermissions", "yolo", "full-access"];

/// Whether setting `key` to `value` is withheld by a policy that restricts elevated
/// auto-approval (`restricted`).
pub fn withheld(restricted: bool, key: &str, value: &Value) -> bool {
    restricted && key == MODE_KEY && value.as_str().is_some_and(|mode| ELEVATED_MODES.contains(&mode))
}

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
    pub category: Option<Category>,
    /// What it takes.
    pub kind: Kind,
    /// The value in force.
    pub current: Value,
}

impl ConfigOption {
    /// The AHP key it is kept under; none for the model option, which is the session's models.
    pub fn key(&self) -> Option<String> {
        match self.category {
            Some(Category::Model) if matches!(self.kind, Kind::Select(_)) => None,
            Some(Category::Mode) if matches!(self.kind, Kind::Select(_)) => Some(MODE_KEY.to_owned()),
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

/// The request an [`Ask`] stands for.
#[derive(Debug)]
pub enum AskRequest {
    /// `session/set_mode`.
    Mode(acp::SetSessionModeRequest),
    /// `session/set_config_option`.
    Option(acp::SetSessionConfigOptionRequest),
    /// `session/set_model`.
    Model(SetModelRequest),
}

/// `session/set_model`'s params (the session-model API from before config options).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetModelRequest {
    session_id: acp::SessionId,
    model_id: String,
}

/// The method `session/set_model`, which the schema no longer names.
pub const SET_MODEL: &str = "session/set_model";

/// `models` in a `session/new` or `session/load` answer, from before config options.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LegacyModels {
    #[serde(default)]
    current_model_id: String,
    available_models: Vec<LegacyModel>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LegacyModel {
    model_id: String,
    name: Option<String>,
    description: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct LegacyAnswer {
    models: Option<LegacyModels>,
}

fn choice(option: &acp::SessionConfigSelectOption) -> Choice {
    let value = option.value.to_string();
    let name = if option.name.is_empty() { value.clone() } else { option.name.clone() };
    Choice { value, name, description: option.description.clone() }
}

fn choices(options: &acp::SessionConfigSelectOptions) -> Vec<Choice> {
    match options {
        acp::SessionConfigSelectOptions::Ungrouped(options) => options.iter().map(choice).collect(),
        // A group's values are flattened into the one list a picker draws.
        acp::SessionConfigSelectOptions::Grouped(groups) => {
            groups.iter().flat_map(|g| g.options.iter().map(choice)).collect()
        }
        _ => Vec::new(),
    }
}

/// The server's config options as this bridge draws them: one of a kind it cannot draw is left out.
pub fn parse_options(list: &[acp::SessionConfigOption]) -> Vec<ConfigOption> {
    list.iter()
        .filter_map(|option| {
            let (kind, current) = match &option.kind {
                acp::SessionConfigKind::Select(select) => {
                    (Kind::Select(choices(&select.options)), Value::String(select.current_value.to_string()))
                }
                acp::SessionConfigKind::Boolean(boolean) => (Kind::Boolean, Value::Bool(boolean.current_value)),
                _ => return None,
            };
            let id = option.id.to_string();
            Some(ConfigOption {
                name: if option.name.is_empty() { id.clone() } else { option.name.clone() },
                description: option.description.clone(),
                category: option.category.clone(),
                current,
                kind,
                id,
            })
        })
        .collect()
}

fn parse_modes(modes: &acp::SessionModeState) -> (String, Vec<Mode>) {
    let list = modes
        .available_modes
        .iter()
        .map(|m| Mode { id: m.id.to_string(), name: m.name.clone(), description: m.description.clone() })
        .collect();
    (modes.current_mode_id.to_string(), list)
}

fn parse_legacy_models(models: LegacyModels) -> (String, Vec<Choice>) {
    let list = models
        .available_models
        .into_iter()
        .map(|m| Choice {
            name: m.name.unwrap_or_else(|| m.model_id.clone()),
            description: m.description,
            value: m.model_id,
        })
        .collect();
    (models.current_model_id, list)
}

impl Offers {
    /// What a `session/new` or `session/load` answer offers: its modes and config options as the
    /// schema reads them (`LoadSessionResponse` holds exactly what both answers offer), and the
    /// models from before config options. What cannot be read offers nothing.
    pub fn from_answer(answer: &Value) -> Self {
        let offered = acp::LoadSessionResponse::deserialize(answer).unwrap_or_default();
        let legacy = LegacyAnswer::deserialize(answer).unwrap_or_default();
        Self {
            modes: offered.modes.as_ref().map(parse_modes),
            options: offered.config_options.as_deref().map(parse_options).unwrap_or_default(),
            legacy_models: legacy.models.map(parse_legacy_models),
        }
    }

    fn option_of_category(&self, category: Category) -> Option<&ConfigOption> {
        self.options.iter().find(|o| o.category.as_ref() == Some(&category) && matches!(o.kind, Kind::Select(_)))
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
        let choices: Vec<Choice> = match (self.option_of_category(Category::Model), &self.legacy_models) {
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
        match (self.option_of_category(Category::Model), &self.legacy_models) {
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
        Ok(match self.option_of_category(Category::Model) {
            Some(option) => Ask::SetOption { config_id: option.id.clone(), value: Value::String(model.to_owned()) },
            None => Ask::SetModel(model),
        })
    }

    /// How to set config `key` to `value`: `Ok(None)` for a key this session does not take,
    /// `Err` with VS Code's sentence for a value it does not offer.
    pub fn ask(&self, key: &str, value: &Value) -> Result<Option<Ask>, NotOffered> {
        if key == MODE_KEY {
            if let Some(option) = self.option_of_category(Category::Mode) {
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
        if let Some(option) = self.options.iter_mut().find(|o| o.category == Some(Category::Mode)) {
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
        if let Some(option) = self.option_of_category(Category::Mode) {
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

/// Whether `policy` restricts elevated auto-approval.
pub fn restricts(policy: &protocol::Policy) -> bool {
    policy.auto_approve_policy_restricted == Some(true)
}

/// `properties` as a window whose policy restricts elevated auto-approval (`restricted`) is
/// offered them: without the modes that act without asking.
pub fn under_policy(
    mut properties: HashMap<String, SessionConfigPropertySchema>,
    restricted: bool,
) -> HashMap<String, SessionConfigPropertySchema> {
    let Some(mode) = properties.get_mut(MODE_KEY).filter(|_| restricted) else { return properties };
    let Some(values) = mode.r#enum.take() else { return properties };
    let kept: Vec<bool> = values.iter().map(|v| !withheld(true, MODE_KEY, v)).collect();
    let keep = |list: Option<Vec<String>>| {
        list.map(|list| list.into_iter().zip(&kept).filter(|(_, k)| **k).map(|(item, _)| item).collect())
    };
    mode.enum_labels = keep(mode.enum_labels.take());
    mode.enum_descriptions = keep(mode.enum_descriptions.take());
    mode.r#enum = Some(values.into_iter().zip(&kept).filter(|(_, k)| **k).map(|(v, _)| v).collect());
    if mode.default.as_ref().is_some_and(|d| withheld(true, MODE_KEY, d)) {
        mode.default = None;
    }
    properties
}

fn property(title: &str, description: Option<String>) -> SessionConfigPropertySchema {
    agent_runner::schema::property("string", title, description)
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

/// The request an [`Ask`] stands for, in the schema's types; none for [`Ask::Nothing`].
pub fn request_of(ask: &Ask, session_id: &str) -> Option<AskRequest> {
    let session_id = acp::SessionId::new(session_id);
    match ask {
        Ask::SetMode(id) => Some(AskRequest::Mode(acp::SetSessionModeRequest::new(session_id, id.clone()))),
        Ask::SetOption { config_id, value } => {
            let value = match value {
                Value::Bool(on) => acp::SessionConfigOptionValue::boolean(*on),
                Value::String(id) => acp::SessionConfigOptionValue::value_id(id.clone()),
                other => acp::SessionConfigOptionValue::value_id(other.to_string()),
            };
            Some(AskRequest::Option(acp::SetSessionConfigOptionRequest::new(session_id, config_id.clone(), value)))
        }
        Ask::SetModel(id) => Some(AskRequest::Model(SetModelRequest { session_id, model_id: id.clone() })),
        Ask::Nothing => None,
    }
}

impl AskRequest {
    /// The method the request goes out as.
    pub fn method(&self) -> &'static str {
        match self {
            AskRequest::Mode(_) => AGENT_METHOD_NAMES.session_set_mode,
            AskRequest::Option(_) => AGENT_METHOD_NAMES.session_set_config_option,
            AskRequest::Model(_) => SET_MODEL,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claude_like() -> Offers {
        Offers::from_answer(&json!({
            "sessionId": "s",
            "modes": {"currentModeId": "auto", "availableModes": [{"id": "auto", "name": "Auto"}, {"id": "default", "name": "Default"}]},
            "configOptions": [
                {"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": "auto",
                 "options": [{"value": "auto", "name": "Auto"}, {"value": "default", "name": "Default"}]},
                {"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": "default",
                 "options": [{"group": "main", "name": "Main", "options": [{"value": "default", "name": "Default"}]},
                             {"group": "more", "name": "More", "options": [{"value": "opus", "name": "Opus"}]}]},
                {"id": "fast", "name": "Fast", "type": "boolean", "currentValue": false},
                {"id": "weird", "name": "Weird", "type": "slider"}
            ]
        }))
    }

    #[test]
    fn a_restricting_policy_withholds_the_modes_that_never_ask_with_their_labels() {
        let offers = Offers::from_answer(&json!({
            "modes": {"currentModeId": "yolo", "availableModes": [
                {"id": "default", "name": "Ask first", "description": "Asks"},
                {"id": "yolo", "name": "Never ask", "description": "Never asks"},
                {"id": "plan", "name": "Plan", "description": "Plans"}
            ]}
        }));
        let open = under_policy(offers.properties(), false);
        assert_eq!(open[MODE_KEY].r#enum, Some(vec![json!("default"), json!("yolo"), json!("plan")]));
        let restricted = under_policy(offers.properties(), true);
        let mode = &restricted[MODE_KEY];
        assert_eq!(mode.r#enum, Some(vec![json!("default"), json!("plan")]));
        assert_eq!(mode.enum_labels, Some(vec!["Ask first".to_owned(), "Plan".to_owned()]));
        assert_eq!(mode.enum_descriptions, Some(vec!["Asks".to_owned(), "Plans".to_owned()]));
        assert_eq!(mode.default, None, "a withheld mode is nobody's default");
        assert!(withheld(true, MODE_KEY, &json!("bypassPermissions")));
        assert!(!withheld(false, MODE_KEY, &json!("yolo")));
        assert!(!withheld(true, "acp.other", &json!("yolo")));
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
