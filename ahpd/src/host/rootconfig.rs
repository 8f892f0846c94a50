//! The daemon's keys as root config: shown on the root state, pushed by a client with
//! `root/configChanged`. A key that applies live takes effect at once (the sessions' tool offers
//! are rebuilt); any other is written to the config file, and the root state says a restart is
//! needed until `ahpd restart`.

use std::collections::HashMap;
use std::path::PathBuf;

use ahp_types::actions::{RootConfigChangedAction, StateAction};
use ahp_types::common::JsonObject;
use ahp_types::state::{ConfigPropertySchema, ConfigSchema, RootConfigState};
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::Value;

use super::{Core, Host, LiveSettings};
use crate::config::{self, Applies, Config, KEYS};

/// The root config key that says a pushed key waits for `ahpd restart`.
pub const RESTART_NEEDED: &str = "restartNeeded";

/// The root config key that says, while the session store cannot write, why and what to do
/// (`store/health.rs`); empty while it writes. AHP 1.0.0 changes root state live only through
/// `root/configChanged`, so the host-level notice every client folds is this read-only value.
pub const STORE_CANNOT_WRITE: &str = "storeCannotWrite";

/// The root config key that says how each remote host's link is (`connected`, `reconnecting: …`,
/// `refused: …`, by the remote's name): read-only, present only where remotes are configured.
pub const REMOTE_LINKS: &str = "remoteLinks";

fn schema_type(value: &Value) -> &'static str {
    match value {
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        _ => "string",
    }
}

fn property(spec: &config::KeySpec) -> ConfigPropertySchema {
    let default = (spec.default)();
    let kind = match spec.name {
        "connectionToken"
        | "connectionTokenFile"
        | "host"
        | "users"
        | "agentOrchestrationLimits"
        | "agentOrchestrationLimitsScope" => "string",
        "agents" | "mcpServers" | "plugins" | "managedSettings" | "remotes" => "object",
        _ => schema_type(&default),
    };
    let applies = match spec.applies {
        Applies::Live => "Applies live.",
        Applies::Restart => "Applies after ahpd restart.",
    };
    let mut property =
        agent_runner::schema::config_property(kind, spec.name, Some(format!("{} {applies}", spec.about)));
    property.default = (!default.is_null()).then_some(default);
    property.r#enum = match spec.name {
        "agentOrchestrationLimits" => Some(vec![Value::from("on"), Value::from("off")]),
        "agentOrchestrationLimitsScope" => Some(vec![Value::from("tree"), Value::from("session")]),
        _ => None,
    };
    property
}

/// A value the host shows and no client sets.
fn read_only(kind: &str, title: &str, description: &str, default: Option<Value>) -> ConfigPropertySchema {
    let mut property = agent_runner::schema::config_property(kind, title, Some(description.into()));
    property.default = default;
    property.read_only = Some(true);
    property
}

/// The root config state: every daemon key's schema and its value in force (credentials `<set>`).
pub fn root_config(config: &Config) -> RootConfigState {
    let mut properties: HashMap<String, ConfigPropertySchema> =
        KEYS.iter().map(|k| (k.name.to_owned(), property(k))).collect();
    properties.insert(
        RESTART_NEEDED.to_owned(),
        read_only(
            "boolean",
            "Restart needed",
            "A key that applies after ahpd restart was changed",
            Some(Value::Bool(false)),
        ),
    );
    properties.insert(
        STORE_CANNOT_WRITE.to_owned(),
        read_only(
            "string",
            "Session store cannot write",
            "Why the session store cannot keep what happens now, and what to do; empty while it writes",
            Some(Value::String(String::new())),
        ),
    );
    properties.insert(
        REMOTE_LINKS.to_owned(),
        read_only(
            "object",
            "Remote hosts",
            "How each remote host's link is, by its name: connected, reconnecting (and why) or refused (and why)",
            None,
        ),
    );
    // Its value is set as the backends say it, for the connections that may read it (`account.rs`).
    properties.insert(
        super::account::ACCOUNT_KEY.to_owned(),
        read_only(
            "object",
            "Account",
            "The account each backend bills to, by provider (what it says; absent for one that cannot say). Needs account:read.",
            None,
        ),
    );
    let mut values: JsonObject = config.shown().into_iter().map(|(k, v, _)| (k, v)).collect();
    values.insert(RESTART_NEEDED.to_owned(), Value::Bool(false));
    values.insert(STORE_CANNOT_WRITE.to_owned(), Value::String(String::new()));
    if config.get("remotes").as_object().is_some_and(|r| !r.is_empty()) {
        values.insert(REMOTE_LINKS.to_owned(), Value::Object(JsonObject::new()));
    }
    RootConfigState { schema: ConfigSchema { r#type: "object".into(), properties, required: None }, values }
}

impl Core {
    /// Shows every client whether the store can write now: the root config's `storeCannotWrite`
    /// follows the store's trouble (told only when it changes).
    pub fn show_store_trouble(&mut self) {
        let said = self.store.cannot_write().unwrap_or_default();
        if self.root_value(STORE_CANNOT_WRITE) == Some(&Value::String(said.clone())) {
            return;
        }
        if said.is_empty() {
            tracing::info!("the session store writes again");
        } else {
            tracing::error!("{said}");
        }
        self.show_notice(STORE_CANNOT_WRITE, Value::String(said));
    }

    /// Shows every client how each remote host's link is (the root config's `remoteLinks`), told
    /// only when it changed.
    pub fn show_remote_links(&mut self, links: JsonObject) {
        let links = Value::Object(links);
        if self.root_value(REMOTE_LINKS) != Some(&links) {
            self.show_notice(REMOTE_LINKS, links);
        }
    }

    /// A read-only key's value on the root config, as clients hold it.
    fn root_value(&self, key: &str) -> Option<&Value> {
        self.ch.root.config.as_ref()?.values.get(key)
    }

    /// Says a read-only key of the root config (a notice of the host's) to every client: AHP 1.0.0
    /// changes the root live only through `root/configChanged`. A root with no config says none.
    fn show_notice(&mut self, key: &str, value: Value) {
        if self.ch.root.config.is_none() {
            return;
        }
        let mut notice = JsonObject::new();
        notice.insert(key.to_owned(), value);
        let action = StateAction::RootConfigChanged(RootConfigChangedAction { config: notice, replace: None });
        self.apply(ROOT_RESOURCE_URI, action, None, None);
    }
}

/// The providers whose plugin says `hostTools: false` (`plugins.<name>.hostTools`, default true):
/// their sessions are offered none of this host's own tools, nor handed its `/ahp-mcp` endpoint.
pub fn host_tools_withheld(config: &Config) -> std::collections::BTreeSet<String> {
    let plugins = config.get("plugins");
    let Some(plugins) = plugins.as_object() else { return Default::default() };
    plugins
        .iter()
        .filter(|(_, plugin)| plugin.get("hostTools").and_then(Value::as_bool) == Some(false))
        .map(|(name, _)| name.clone())
        .collect()
}

/// A push split in two: (keys that apply live, keys that apply after a restart).
pub type SplitPush = (Vec<(String, Value)>, Vec<(String, Value)>);

/// Why a client's push of the daemon's keys is refused (its `rejectionReason`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushRefused {
    /// `replace: true`.
    #[error("The daemon's config is changed key by key, not replaced whole")]
    Whole,
    /// A key ahpd does not have.
    #[error("{0} is not a setting ahpd knows")]
    Unknown(String),
    /// A value the key does not take.
    #[error("{key} must be {expected}")]
    Invalid {
        /// The key.
        key: String,
        /// What it takes.
        expected: &'static str,
    },
}

/// Why pushed keys could not be written to the config file.
#[derive(Debug, thiserror::Error)]
pub enum WriteKeysError {
    /// The file holds something that is not JSON.
    #[error("{0} is not JSON: {1}")]
    NotJson(String, serde_json::Error),
    /// It could not be read.
    #[error("could not read {0}: {1}")]
    Read(String, std::io::Error),
    /// What it would hold could not be encoded.
    #[error("{0}")]
    Encode(serde_json::Error),
    /// It could not be written.
    #[error("could not write {0}: {1}")]
    Write(String, std::io::Error),
}

/// Checks a client's push: every key known, writable and valid. Answers the live keys and the
/// restart keys it changes.
pub fn check_push(push: &JsonObject, replace: bool) -> Result<SplitPush, PushRefused> {
    if replace {
        return Err(PushRefused::Whole);
    }
    let mut live = Vec::new();
    let mut restart = Vec::new();
    for (key, value) in push {
        let Some(spec) = config::key(key) else {
            return Err(PushRefused::Unknown(key.clone()));
        };
        if spec.secret && value.as_str() == Some("<set>") {
            continue;
        }
        (spec.check)(value).map_err(|expected| PushRefused::Invalid { key: key.clone(), expected })?;
        match spec.applies {
            Applies::Live => live.push((key.clone(), value.clone())),
            Applies::Restart => restart.push((key.clone(), value.clone())),
        }
    }
    Ok((live, restart))
}

/// The live settings with pushed keys applied.
pub fn apply_live(settings: &LiveSettings, changes: &[(String, Value)]) -> LiveSettings {
    let mut next = settings.clone();
    for (key, value) in changes {
        match key.as_str() {
            "advancedTools" => next.advanced_tools = value.as_bool().unwrap_or(next.advanced_tools),
            "sessionTools" => next.session_tools = value.as_bool().unwrap_or(next.session_tools),
            "sessionToolsProviders" => {
                next.session_tools_providers = value
                    .as_array()
                    .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                    .unwrap_or_default()
            }
            "mcpServers" => {
                next.mcp_servers = value.as_object().filter(|m| !m.is_empty()).map(|m| {
                    m.iter().filter_map(|(k, v)| Some((k.clone(), serde_json::from_value(v.clone()).ok()?))).collect()
                })
            }
            "agentOrchestrationLimits" => next.orchestration_limits = value.as_str() != Some("off"),
            "agentOrchestrationLimitsScope" => next.limits_per_session = value.as_str() == Some("session"),
            "deltaWindowMs" => next.delta_window_ms = value.as_u64().unwrap_or(next.delta_window_ms),
            _ => {}
        }
    }
    next
}

/// Writes keys into a JSON config file, keeping every other key as it was (atomically).
pub fn write_keys(file: &PathBuf, changes: &[(String, Value)]) -> Result<(), WriteKeysError> {
    let shown = || file.display().to_string();
    let mut current: JsonObject = match std::fs::read_to_string(file) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| WriteKeysError::NotJson(shown(), e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => JsonObject::new(),
        Err(e) => return Err(WriteKeysError::Read(shown(), e)),
    };
    for (key, value) in changes {
        current.insert(key.clone(), value.clone());
    }
    let text = serde_json::to_string_pretty(&Value::Object(current)).map_err(WriteKeysError::Encode)?;
    crate::fsutil::write_private(file, format!("{text}\n").as_bytes()).map_err(|e| WriteKeysError::Write(shown(), e))
}

impl Host {
    /// After a client's `root/configChanged` was said: live keys take effect, restart keys are
    /// written to the config file and the root state says a restart is needed.
    pub(super) fn root_config_pushed(
        &self,
        core: &mut Core,
        live: Vec<(String, Value)>,
        restart: Vec<(String, Value)>,
    ) {
        if !live.is_empty() {
            let next = apply_live(&core.settings, &live);
            if next != core.settings {
                core.settings = next;
                self.offers_changed(core);
            }
        }
        if restart.is_empty() {
            return;
        }
        match &self.config().config_file {
            Some(file) => {
                if let Err(why) = write_keys(file, &restart) {
                    tracing::error!("a pushed setting could not be kept: {why}");
                    return;
                }
                tracing::info!(file = %file.display(), "settings that apply after ahpd restart were written");
            }
            None => tracing::warn!("no config file to keep pushed settings in"),
        }
        let mut flag = JsonObject::new();
        flag.insert(RESTART_NEEDED.to_owned(), Value::Bool(true));
        core.apply(
            ROOT_RESOURCE_URI,
            StateAction::RootConfigChanged(RootConfigChangedAction { config: flag, replace: None }),
            None,
            None,
        );
    }

    /// The config files were read again (SIGHUP): the keys that apply live and changed take effect
    /// as a client's push of them would, and the root state shows `shown` (their values with
    /// credentials as `<set>`, and `restartNeeded` when a key that applies after a restart changed).
    pub fn config_reread(&self, live: Vec<(String, Value)>, shown: JsonObject) {
        if shown.is_empty() {
            return;
        }
        let mut core = self.lock();
        core.apply(
            ROOT_RESOURCE_URI,
            StateAction::RootConfigChanged(RootConfigChangedAction { config: shown, replace: None }),
            None,
            None,
        );
        self.root_config_pushed(&mut core, live, Vec::new());
    }

    /// The live settings changed: every loaded session's offer is worked out again; a session
    /// whose host tools changed says `session/serverToolsChanged`, and its backends and endpoint
    /// are handed the new set.
    pub fn offers_changed(&self, core: &mut Core) {
        let sessions: Vec<String> = core.ch.sessions.keys().cloned().collect();
        for session in sessions {
            let tools = core.server_tools(&session);
            let before = core.ch.sessions.get(&session).and_then(|s| s.server_tools.clone());
            if before.as_ref() != Some(&tools) {
                let action =
                    StateAction::SessionServerToolsChanged(ahp_types::actions::SessionServerToolsChangedAction {
                        tools,
                    });
                core.apply(&session, action, None, None);
                self.tools_changed(core, &session);
            }
        }
        // A caller with no session may see another list too.
        core.endpoints.sessionless_tools_changed();
    }
}
