//! Event triggers firing: each event starts one run of every enabled automation whose trigger
//! chose it, once per event (a run is unique per automation by its trigger and the event's key).
//!
//! - `session`: a session's turn ended and nothing waits behind it (`finished`), or it failed
//!   (`failed`); a run's own session never starts its own automation again.
//! - `webhook`: `POST /hooks/<automation id>` carrying the trigger's secret as a Bearer token; the
//!   caller's `Idempotency-Key` (or GitHub's `X-GitHub-Delivery`) names the event, so a delivery
//!   retried makes no second run.

use ahp_types::common::JsonObject;
use ahp_types::state::{AutomationEventTrigger, AutomationTrigger, SessionOrigin, TurnState};
use serde_json::{json, Value};

use super::runs::{admit, Why};
use super::triggers::{config_str, SESSION, WEBHOOK};
use super::validate::AUTOMATION_SCHEME;
use crate::host::facade::new_id;
use crate::host::{Core, Host};
use crate::store::AutomationRecord;

/// Every enabled automation's event triggers of `kind` that chose `event`.
fn listening(core: &Core, kind: &str, event: &str) -> Vec<(AutomationRecord, AutomationEventTrigger)> {
    let records = core.store().automations().unwrap_or_else(|e| {
        tracing::error!("could not read the automations: {e}");
        Vec::new()
    });
    let mut found = Vec::new();
    for record in records.into_iter().filter(|r| r.definition.enabled) {
        for trigger in &record.definition.triggers {
            if let AutomationTrigger::Event(t) = trigger {
                if t.r#type == kind && t.events.iter().any(|e| e.id == event) {
                    found.push((record.clone(), t.clone()));
                }
            }
        }
    }
    found
}

/// Starts a run of `record` for its trigger's event `key`; answers the run (the one made already
/// for the same event, when there is one).
fn fire(
    host: &Host,
    core: &mut Core,
    record: &AutomationRecord,
    trigger: &str,
    key: String,
    event: JsonObject,
) -> Option<String> {
    let why = Why::Event { trigger: trigger.to_owned(), key, event };
    match admit(host, core, &record.resource, why) {
        Ok((run, _)) => Some(run),
        Err(e) => {
            tracing::error!(automation = record.resource, "an event's run could not be made: {e}");
            None
        }
    }
}

/// A turn ended in `chat` and nothing waits behind it: the `session` triggers hear of it.
pub fn session_ended(host: &Host, core: &mut Core, chat: &str) {
    if core.is_busy(chat) {
        return;
    }
    let Some(session) = core.chat(chat).map(|m| m.session.clone()) else { return };
    let Some(turn) = core.chat_state(chat).and_then(|c| c.turns.last()).cloned() else { return };
    let event = match turn.state {
        TurnState::Complete => "finished",
        TurnState::Error => "failed",
        TurnState::Cancelled => return,
    };
    let from = match core.session_state(&session).and_then(|s| s.origin.clone()) {
        Some(SessionOrigin::Automation(o)) => Some(o.automation),
        _ => None,
    };
    for (record, trigger) in listening(core, SESSION, event) {
        if from.as_deref() == Some(record.resource.as_str()) {
            // Its own run's session: chaining it to itself would run for ever.
            continue;
        }
        if let Some(only) = config_str(&trigger, "automation") {
            if from.as_deref() != Some(only) {
                continue;
            }
        }
        let said = json!({ "session": session, "chat": chat, "turn": turn.id, "event": event });
        let Value::Object(said) = said else { continue };
        fire(host, core, &record, &trigger.id, format!("{session}:{}", turn.id), said);
    }
}

/// Why a webhook's POST was refused: its HTTP status and the sentence.
#[derive(Debug)]
pub struct Refused {
    /// 401, 404 or 409.
    pub status: u16,
    /// Why.
    pub why: String,
}

/// `POST /hooks/<id>`: starts a run of automation `ahp-automation:/<id>` when `authorization` is
/// `Bearer <its webhook trigger's secret>`; answers the run.
pub fn webhook(host: &Host, id: &str, authorization: Option<&str>, delivery: Option<&str>) -> Result<String, Refused> {
    let uri = format!("{AUTOMATION_SCHEME}{id}");
    let mut core = host.lock();
    let unauthorized = || Refused {
        status: 401,
        why: "This webhook needs its secret: send it as Authorization: Bearer <secret>.".into(),
    };
    let presented = authorization.and_then(|a| a.strip_prefix("Bearer ")).map(str::trim).ok_or_else(unauthorized)?;
    let records = core.store().automations().unwrap_or_default();
    let record = records.into_iter().find(|r| r.resource == uri).ok_or_else(unauthorized)?;
    let trigger = record
        .definition
        .triggers
        .iter()
        .find_map(|t| match t {
            AutomationTrigger::Event(e) if e.r#type == WEBHOOK => Some(e.clone()),
            _ => None,
        })
        .ok_or_else(unauthorized)?;
    let secret = config_str(&trigger, "secret").unwrap_or_default();
    if secret.is_empty() || !crate::users::constant_time_eq(secret.as_bytes(), presented.as_bytes()) {
        return Err(unauthorized());
    }
    if !record.definition.enabled {
        return Err(Refused {
            status: 409,
            why: format!("{uri} is turned off; turn it on to let its webhook start runs."),
        });
    }
    let key = delivery.map(str::to_owned).unwrap_or_else(new_id);
    let said = json!({ "webhook": id, "delivery": key });
    let Value::Object(said) = said else { return Err(unauthorized()) };
    fire(host, &mut core, &record, &trigger.id, key, said)
        .ok_or_else(|| Refused { status: 500, why: "The run could not be kept; the daemon's log says why.".into() })
}
