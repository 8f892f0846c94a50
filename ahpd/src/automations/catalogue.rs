//! The catalogue on `ahp-automations://`: each automation's entry built from its record in the
//! store (its definition, what the host owns of it, its next run, its newest runs), published as
//! `automation/set` whenever any of it changes; and the requests that change it.

use ahp_types::actions::{
    AutomationCreateRequestedAction, AutomationSetAction, AutomationUpdateRequestedAction, StateAction,
};
use ahp_types::state::{
    AutomationDefinition, AutomationDisableCondition, AutomationEntry, AutomationOperation, AutomationRunSummary,
    AutomationState, AutomationTrigger,
};

use super::schedule::{millis_of, Schedule};
use super::{runs, validate, RUN_HISTORY_LIMIT};
use crate::clock::iso;
use crate::host::facade::AUTOMATIONS_URI;
use crate::host::Core;
use crate::store::{AutomationRecord, AutomationRunRecord};
use crate::users::Principal;

/// How many runs one `fetchAutomationRuns` adds.
const PAGE: usize = RUN_HISTORY_LIMIT;

/// The catalogue as the store holds it.
pub fn load(core: &mut Core) -> AutomationState {
    let records = core.store().automations().unwrap_or_else(|e| {
        tracing::error!("could not read the automations: {e}");
        Vec::new()
    });
    let entries = records.iter().map(|r| entry(core, r, RUN_HISTORY_LIMIT)).collect();
    AutomationState { entries, meta: None }
}

/// Serves the channel of every run the catalogue shows.
pub fn open_runs(core: &mut Core) {
    let shown: Vec<String> = core
        .automations_state()
        .map(|s| s.entries.iter().flat_map(|e| e.runs.iter().map(|r| r.resource.clone())).collect())
        .unwrap_or_default();
    for uri in shown {
        if core.automation_run_state(&uri).is_none() {
            if let Some(record) = runs::record(core, &uri) {
                core.open_automation_run(record.state);
            }
        }
    }
}

/// An automation's record, when it has one.
pub fn record(core: &Core, uri: &str) -> Option<AutomationRecord> {
    core.automations_state()?.entries.iter().any(|e| e.resource == uri).then_some(())?;
    match core.store().automations() {
        Ok(records) => records.into_iter().find(|r| r.resource == uri),
        Err(e) => {
            tracing::error!("could not read the automations: {e}");
            None
        }
    }
}

/// Keeps a record and tells the catalogue's watchers.
pub fn save(core: &mut Core, record: &AutomationRecord) {
    if let Err(e) = core.store().save_automation(record) {
        tracing::error!("could not keep automation {}: {e}", record.resource);
    }
    publish(core, record);
}

/// Says an automation's entry as it stands (`automation/set`).
pub fn publish(core: &mut Core, record: &AutomationRecord) {
    let shown = core
        .automations_state()
        .and_then(|s| s.entries.iter().find(|e| e.resource == record.resource))
        .map_or(RUN_HISTORY_LIMIT, |e| e.runs.len().max(RUN_HISTORY_LIMIT));
    let automation = entry(core, record, shown);
    let runs: Vec<String> = automation.runs.iter().map(|r| r.resource.clone()).collect();
    core.apply(AUTOMATIONS_URI, StateAction::AutomationSet(Box::new(AutomationSetAction { automation })), None, None);
    for uri in runs {
        if core.automation_run_state(&uri).is_none() {
            if let Some(run) = runs::record(core, &uri) {
                core.open_automation_run(run.state);
            }
        }
    }
}

/// Publishes the entry of the automation `uri` again (a run changed).
pub fn refresh(core: &mut Core, uri: &str) {
    if let Some(record) = record(core, uri) {
        publish(core, &record);
    }
}

/// `fetchAutomationRuns`: the entry shows one page more of its older runs.
pub fn page_back(core: &mut Core, uri: &str) {
    let Some(record) = record(core, uri) else { return };
    let shown = core
        .automations_state()
        .and_then(|s| s.entries.iter().find(|e| e.resource == uri))
        .map_or(RUN_HISTORY_LIMIT, |e| e.runs.len());
    let automation = entry(core, &record, shown + PAGE);
    let runs: Vec<String> = automation.runs.iter().map(|r| r.resource.clone()).collect();
    core.apply(AUTOMATIONS_URI, StateAction::AutomationSet(Box::new(AutomationSetAction { automation })), None, None);
    for uri in runs {
        if core.automation_run_state(&uri).is_none() {
            if let Some(run) = runs::record(core, &uri) {
                core.open_automation_run(run.state);
            }
        }
    }
}

/// An entry from its record, showing its newest `shown` runs (and every run still going).
fn entry(core: &Core, record: &AutomationRecord, shown: usize) -> AutomationEntry {
    let newest = core.store().automation_runs(&record.resource, None, shown + 1).unwrap_or_else(|e| {
        tracing::error!("could not read the runs of {}: {e}", record.resource);
        Vec::new()
    });
    let more = newest.len() > shown;
    let kept: Vec<&AutomationRunRecord> = newest.iter().take(shown).collect();
    let runs_next_cursor = more.then(|| kept.last().map(|r| cursor_of(r))).flatten();
    let runs: Vec<AutomationRunSummary> = kept.iter().map(|r| runs::summary(&r.state)).collect();
    let counted = record
        .definition
        .disable_conditions
        .iter()
        .flatten()
        .any(|c| matches!(c, AutomationDisableCondition::AfterRuns(_)));
    AutomationEntry {
        resource: record.resource.clone(),
        definition: record.definition.clone(),
        next_run_at: next_run(record).map(iso),
        run_count: counted.then_some(record.run_count),
        runs,
        runs_next_cursor,
        operations: vec![AutomationOperation::Update, AutomationOperation::Remove, AutomationOperation::Run],
        customizations: None,
        created_at: record.created_at.clone(),
        modified_at: record.modified_at.clone(),
        meta: watched(core, record),
    }
}

/// What the entry's `_meta` says of its watches: the commit each `gitBranch` trigger last saw
/// (`"ahpd.branches": {trigger: commit}`), and when each GitHub trigger last looked and what went
/// wrong if it could not (`"ahpd.github": {trigger: {lookedAt, newest, error?}}`).
fn watched(core: &Core, record: &AutomationRecord) -> Option<ahp_types::common::JsonObject> {
    let mut meta = ahp_types::common::JsonObject::new();
    if !record.branches.is_empty() {
        meta.insert("ahpd.branches".into(), serde_json::json!(record.branches));
    }
    let mut github = serde_json::Map::new();
    for trigger in &record.definition.triggers {
        let AutomationTrigger::Event(t) = trigger else { continue };
        if !super::triggers::GITHUB.contains(&t.r#type.as_str()) {
            continue;
        }
        if let Ok(Some(seen)) = core.store().github_seen(&record.resource, &t.id) {
            let said = serde_json::json!({ "lookedAt": seen.looked_at, "newest": seen.newest, "error": seen.error });
            github.insert(t.id.clone(), said);
        }
    }
    if !github.is_empty() {
        meta.insert("ahpd.github".into(), serde_json::Value::Object(github));
    }
    (!meta.is_empty()).then_some(meta)
}

fn cursor_of(run: &AutomationRunRecord) -> String {
    format!("{}:{}", run.created_ms, run.state.resource)
}

/// The earliest schedule occurrence still to be looked at, while the automation is enabled.
pub fn next_run(record: &AutomationRecord) -> Option<u64> {
    if !record.definition.enabled {
        return None;
    }
    schedules(&record.definition).filter_map(|(_, s)| s.next_after(record.evaluated_to)).min()
}

/// The definition's schedules, read, with their triggers' ids.
pub fn schedules(definition: &AutomationDefinition) -> impl Iterator<Item = (&AutomationTrigger, Schedule)> {
    definition.triggers.iter().filter_map(|t| match t {
        AutomationTrigger::Schedule(s) => Schedule::read(&s.schedule, "schedule").ok().map(|read| (t, read)),
        AutomationTrigger::Event(_) => None,
    })
}

/// Checks an `automation/createRequested`; answers the definition as it would be kept.
pub fn check_create(core: &Core, action: &AutomationCreateRequestedAction) -> Result<AutomationDefinition, String> {
    validate::resource(&action.resource)?;
    let known = core.automations_state().is_some_and(|s| s.entries.iter().any(|e| e.resource == action.resource));
    if known || core.store().automations().is_ok_and(|all| all.iter().any(|r| r.resource == action.resource)) {
        return Err(format!("resource: {} names an automation that exists already", action.resource));
    }
    let mut definition = action.definition.clone();
    validate::definition(core, &mut definition)?;
    Ok(definition)
}

/// Checks an `automation/updateRequested`; answers the record as it would be kept.
pub fn check_update(core: &Core, action: &AutomationUpdateRequestedAction) -> Result<AutomationRecord, String> {
    let mut record =
        record(core, &action.resource).ok_or_else(|| format!("There is no automation {}", action.resource))?;
    let changes = action.changes.clone();
    let definition = &mut record.definition;
    let was_enabled = definition.enabled;
    let had_allowance = has_allowance(definition);
    if let Some(title) = changes.title {
        definition.title = title;
    }
    if let Some(message) = changes.message {
        definition.message = message;
    }
    if let Some(session) = changes.session {
        definition.session = session;
    }
    if let Some(enabled) = changes.enabled {
        definition.enabled = enabled;
    }
    if let Some(triggers) = changes.triggers {
        definition.triggers = triggers;
    }
    if let Some(conditions) = changes.disable_conditions {
        definition.disable_conditions = Some(conditions);
    }
    if let Some(meta) = changes.meta {
        definition.meta = Some(meta);
    }
    validate::definition(core, definition)?;
    let now = core.clock().now();
    // A fresh allowance: turned on again, or an afterRuns condition added where none was.
    if (!was_enabled && definition.enabled) || (!had_allowance && has_allowance(definition)) {
        record.run_count = 0;
    }
    if !was_enabled && record.definition.enabled {
        // What fell due while it was off is not owed.
        record.evaluated_to = now;
    }
    record.modified_at = iso(now);
    Ok(record)
}

fn has_allowance(definition: &AutomationDefinition) -> bool {
    definition.disable_conditions.iter().flatten().any(|c| matches!(c, AutomationDisableCondition::AfterRuns(_)))
}

/// Keeps a new automation and tells the catalogue's watchers.
pub fn create(core: &mut Core, principal: &Principal, action: &AutomationCreateRequestedAction) {
    let definition = match check_create(core, action) {
        Ok(definition) => definition,
        Err(e) => return tracing::warn!("an automation checked a moment ago no longer passes: {e}"),
    };
    let now = core.clock().now();
    let record = AutomationRecord {
        resource: action.resource.clone(),
        definition,
        created_at: iso(now),
        modified_at: iso(now),
        run_count: 0,
        evaluated_to: now,
        owner: principal.as_sender(),
        branches: Default::default(),
    };
    save(core, &record);
}

/// Keeps an automation's new definition and tells the catalogue's watchers.
pub fn update(core: &mut Core, action: &AutomationUpdateRequestedAction) {
    let was_enabled = record(core, &action.resource).is_some_and(|r| r.definition.enabled);
    match check_update(core, action) {
        Ok(record) => {
            if !was_enabled && record.definition.enabled {
                // What happened on GitHub while it was off is not owed: its next look notes afresh.
                if let Err(e) = core.store().forget_github_seen(&record.resource) {
                    tracing::error!("could not forget what {}'s GitHub triggers saw: {e}", record.resource);
                }
            }
            save(core, &record)
        }
        Err(e) => tracing::warn!("an automation's update checked a moment ago no longer passes: {e}"),
    }
}

/// Forgets an automation (its entry left the catalogue with the client's action) and its runs.
pub fn remove(core: &mut Core, uri: &str) {
    let runs: Vec<String> = core
        .store()
        .automation_runs(uri, None, usize::MAX)
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.state.resource)
        .collect();
    for run in runs {
        core.close_automation_run(&run);
    }
    if let Err(e) = core.store().delete_automation(uri) {
        tracing::error!("could not forget automation {uri}: {e}");
    }
}

/// Turns an automation off when a disable condition is met; answers whether it did.
pub fn disable_if_done(record: &mut AutomationRecord, now: u64) -> bool {
    if !record.definition.enabled {
        return false;
    }
    let done = record.definition.disable_conditions.iter().flatten().any(|c| match c {
        AutomationDisableCondition::AfterRuns(c) => record.run_count >= c.max,
        AutomationDisableCondition::AfterDate(c) => millis_of(&c.date).is_some_and(|date| now > date),
    });
    if done {
        record.definition.enabled = false;
    }
    done
}
