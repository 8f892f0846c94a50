//! This host's two readers beside the reference host's session tools: `list_agents` and
//! `list_models`.

use serde_json::{json, Value};

use super::{optional_str, Group, ToolCall, ToolInfo, ToolResult};
use crate::host::Host;

/// The two readers.
pub fn tools() -> Vec<ToolInfo> {
    vec![
        ToolInfo::new(
            Group::Session,
            "list_agents",
            "List the agents a new session can be started on: for each, the agent id create_session takes, the name a person reads, the settings its config accepts, and its first five models.",
            json!({ "type": "object", "properties": {} }),
        )
        .read_only()
        .sessionless("session:read"),
        ToolInfo::new(
            Group::Session,
            "list_models",
            "List the models the agents offer, in the order the host learned them: one agent's when agent is named, every agent's otherwise.",
            json!({ "type": "object", "properties": {
                "agent": { "type": "string", "description": "An agent id from list_agents; absent lists every agent's models." }
            } }),
        )
        .read_only()
        .sessionless("session:read"),
    ]
}

/// Runs one of the readers; `None` for another tool's name.
pub async fn run(host: &Host, name: &str, call: &ToolCall) -> Option<ToolResult> {
    Some(match name {
        "list_agents" => Ok(list_agents(host)),
        "list_models" => list_models(host, call),
        _ => return None,
    })
}

fn list_agents(host: &Host) -> String {
    let core = host.lock();
    let agents: Vec<Value> = core
        .agents()
        .iter()
        .filter_map(|a| {
            let d = a.descriptor.as_ref()?;
            let settings: Vec<Value> = a
                .schema
                .as_ref()
                .map(|s| {
                    let mut keys: Vec<_> = s.schema.properties.iter().collect();
                    keys.sort_by(|x, y| x.0.cmp(y.0));
                    keys.into_iter()
                        .map(|(key, p)| {
                            let mut entry = json!({ "key": key, "title": p.title, "type": p.r#type });
                            if let Some(values) = &p.r#enum {
                                entry["values"] = Value::from(values.clone());
                            }
                            if let Some(default) = s.defaults.get(key) {
                                entry["default"] = default.clone();
                            }
                            entry
                        })
                        .collect()
                })
                .unwrap_or_default();
            let models: Vec<Value> = a.models.iter().take(5).map(|m| json!({ "id": m.id, "name": m.name })).collect();
            Some(json!({
                "agent": a.provider,
                "name": d.display_name,
                "description": d.description,
                "settings": settings,
                "models": models,
            }))
        })
        .collect();
    json!({ "agents": agents }).to_string()
}

fn list_models(host: &Host, call: &ToolCall) -> ToolResult {
    let agent = optional_str("list_models", &call.input, "agent")?;
    let core = host.lock();
    if let Some(agent) = agent {
        if !core.agents().iter().any(|a| a.provider == agent && a.descriptor.is_some()) {
            let offered: Vec<&str> =
                core.agents().iter().filter(|a| a.descriptor.is_some()).map(|a| a.provider.as_str()).collect();
            return Err(format!(
                "Invalid list_models input: agent must be one of the agents this host offers ({}).",
                offered.join(", ")
            )
            .into());
        }
    }
    let models: Vec<Value> = core
        .agents()
        .iter()
        .filter(|a| agent.is_none_or(|x| x == a.provider))
        .flat_map(|a| a.models.iter().map(move |m| json!({ "agent": a.provider, "id": m.id, "name": m.name })))
        .collect();
    Ok(json!({ "models": models }).to_string())
}
