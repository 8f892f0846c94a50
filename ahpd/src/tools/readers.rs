//! This host's two readers beside the reference host's session tools: `list_agents` (with the
//! agents remote hosts offer, `<agent>@<remote>`) and `list_models`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::session::NoArgs;
use super::{declare, Group, Tool, ToolResult};
use crate::host::Host;

/// `list_models`' arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListModels {
    /// An agent id from list_agents; absent lists every agent's models.
    pub agent: Option<String>,
}

/// The two readers.
pub fn tools() -> Vec<Tool> {
    vec![
        declare::<NoArgs>(
            Group::Session,
            "list_agents",
            "List the agents a new session can be started on: for each, the agent id create_session takes, the name a person reads, the settings its config accepts, and its first five models.",
        )
        .with(|info| info.read_only().grant("session:read").sessionless())
        .answers(|cx, _| Ok(list_agents(cx.host))),
        declare::<ListModels>(
            Group::Session,
            "list_models",
            "List the models the agents offer, in the order the host learned them: one agent's when agent is named, every agent's otherwise.",
        )
        .with(|info| info.read_only().grant("session:read").sessionless())
        .answers(|cx, args| list_models(cx.host, args)),
    ]
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
        .chain(core.remote_agents().iter().map(remote_agent))
        .collect();
    json!({ "agents": agents }).to_string()
}

/// An agent another host offers, as `list_agents` shows it: its id here (`<agent>@<remote>`) and
/// the remote it runs on; its settings are the remote's to say (`create_session` passes them on).
fn remote_agent(agent: &ahp_types::state::AgentInfo) -> Value {
    let models: Vec<Value> = agent.models.iter().take(5).map(|m| json!({ "id": m.id, "name": m.name })).collect();
    json!({
        "agent": agent.provider,
        "name": agent.display_name,
        "description": agent.description,
        "remote": agent.provider.rsplit_once('@').map(|(_, remote)| remote),
        "models": models,
    })
}

fn list_models(host: &Host, args: ListModels) -> ToolResult {
    let agent = args.agent.as_deref();
    let core = host.lock();
    // This host's agents, then the remote hosts' (`<agent>@<remote>`).
    let remote = core.remote_agents().iter().map(|a| (a.provider.as_str(), a.models.as_slice()));
    if let Some(agent) = agent {
        let up = core.agents().iter().filter(|a| a.descriptor.is_some()).map(|a| a.provider.as_str());
        let offered: Vec<&str> = up.chain(remote.clone().map(|(provider, _)| provider)).collect();
        if !offered.contains(&agent) {
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
        .map(|a| (a.provider.as_str(), a.models.as_slice()))
        .chain(remote)
        .filter(|(provider, _)| agent.is_none_or(|x| x == *provider))
        .flat_map(|(provider, models)| {
            models.iter().map(move |m| json!({ "agent": provider, "id": m.id, "name": m.name }))
        })
        .collect();
    Ok(json!({ "models": models }).to_string())
}
