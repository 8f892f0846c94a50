//! What a definition must be before it is kept: a title, a message from an automation, a session
//! template its provider, model and config are revalidated against as `createSession` checks
//! them, triggers with unique ids (a schedule read by `schedule.rs`, an event trigger this host
//! defines), and at most one disable condition of each kind. Each refusal is a sentence naming
//! the field.

use std::collections::HashSet;

use ahp_types::state::{
    AutomationDefinition, AutomationDisableCondition, AutomationMisfirePolicy, AutomationTrigger, MessageKind,
};

use super::schedule::{millis_of, Schedule};
use super::triggers;
use crate::host::facade::{path_of, resolve_config};
use crate::host::Core;

/// The scheme of an automation's URI.
pub const AUTOMATION_SCHEME: &str = "ahp-automation:/";

/// Checks a client's URI for a new automation.
pub fn resource(uri: &str) -> Result<(), String> {
    match uri.strip_prefix(AUTOMATION_SCHEME) {
        Some(id) if !id.is_empty() && !id.contains('/') => Ok(()),
        _ => Err(format!("resource: {uri:?} is not an ahp-automation:/<id> URI")),
    }
}

/// Checks a definition; normalizes what the host owns of it (event triggers' titles).
pub fn definition(core: &Core, definition: &mut AutomationDefinition) -> Result<(), String> {
    if definition.title.trim().is_empty() {
        return Err("title: an automation needs a title".into());
    }
    if definition.message.origin.kind != MessageKind::Automation {
        return Err("message.origin.kind: an automation's message must have the origin kind \"automation\"".into());
    }
    if definition.message.text.trim().is_empty() {
        return Err("message.text: an automation needs a message to send its runs".into());
    }
    template(core, definition)?;
    let mut ids = HashSet::new();
    for (n, trigger) in definition.triggers.iter_mut().enumerate() {
        let id = match trigger {
            AutomationTrigger::Schedule(t) => {
                Schedule::read(&t.schedule, &format!("triggers[{n}].schedule"))?;
                if let Some(AutomationMisfirePolicy::Unknown(p)) = &t.misfire_policy {
                    return Err(format!("triggers[{n}].misfirePolicy: {p:?} is neither \"skip\" nor \"runOnce\""));
                }
                t.id.clone()
            }
            AutomationTrigger::Event(t) => {
                triggers::normalize(t).map_err(|why| format!("triggers[{n}].{why}"))?;
                t.id.clone()
            }
        };
        if id.trim().is_empty() {
            return Err(format!("triggers[{n}].id: a trigger needs an id"));
        }
        if !ids.insert(id.clone()) {
            return Err(format!("triggers[{n}].id: {id:?} is the id of another trigger of this automation"));
        }
    }
    let mut kinds = HashSet::new();
    for (n, condition) in definition.disable_conditions.iter().flatten().enumerate() {
        let kind = match condition {
            AutomationDisableCondition::AfterRuns(c) => {
                if c.max < 1 {
                    return Err(format!("disableConditions[{n}].max: {} is not a positive whole number", c.max));
                }
                "afterRuns"
            }
            AutomationDisableCondition::AfterDate(c) => {
                if millis_of(&c.date).is_none() {
                    return Err(format!("disableConditions[{n}].date: {:?} is not an ISO 8601 timestamp", c.date));
                }
                "afterDate"
            }
        };
        if !kinds.insert(kind) {
            return Err(format!("disableConditions[{n}]: {kind} appears twice; each kind may appear once"));
        }
    }
    Ok(())
}

/// The session template, revalidated as `createSession` checks a session: its provider, its
/// model among that provider's, its config against that provider's schema, its folder.
fn template(core: &Core, definition: &AutomationDefinition) -> Result<(), String> {
    let template = &definition.session;
    if template.customizations.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err("session.customizations: this host does not capture client plugins for automations".into());
    }
    if template.agent.is_some() {
        return Err("session.agent: this host's automations run the provider's own agent".into());
    }
    let provider =
        core.pick_provider(template.provider.as_deref()).map_err(|e| format!("session.provider: {}", e.message))?;
    let schema = core.started_schema(&provider).map_err(|e| format!("session.provider: {}", e.message))?;
    resolve_config(&schema, template.config.as_ref()).map_err(|e| format!("session.config: {}", e.message))?;
    if let Some(model) = &template.model {
        let offered = core.agent(&provider).is_some_and(|a| a.models.iter().any(|m| m.id == model.id));
        if !offered {
            return Err(format!("session.model: the {provider} agent offers no model {:?}", model.id));
        }
    }
    for (n, dir) in template.working_directories.iter().flatten().enumerate() {
        match path_of(dir) {
            Some(path) if path.is_dir() => {}
            _ => return Err(format!("session.workingDirectories[{n}]: {dir} is not a folder this host can reach")),
        }
    }
    Ok(())
}
