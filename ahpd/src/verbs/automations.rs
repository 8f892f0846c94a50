//! `ahpd automations list|add|run|runs|rm`: the running daemon's automations through the official
//! client, as any AHP client sees them: the catalogue on `ahp-automations://` (its snapshot),
//! `automation/createRequested` and `automation/removed` dispatched there (the daemon's refusal
//! printed as it says it), `runAutomation` with a fresh `requestId`.

use std::process::ExitCode;

use ahp::SubscriptionEvent;
use ahp_types::actions::StateAction;
use ahp_types::state::{AutomationEntry, AutomationRunLifecycle, AutomationRunSummary, AutomationState, SnapshotState};
use serde_json::{json, Value};

use super::remote::{self as client, Connection, Target};
use super::say;
use crate::cli::{AutomationsAction, AutomationsArgs};

const CATALOGUE: &str = "ahp-automations://";
const SCHEME: &str = "ahp-automation:/";

/// Runs `ahpd automations`.
pub async fn run(args: &AutomationsArgs) -> ExitCode {
    let action = args.action.clone();
    client::run(&args.client, |target| act(target, action)).await
}

async fn act(target: Target, action: AutomationsAction) -> Result<ExitCode, String> {
    let mut conn = client::connect(&target).await?;
    if conn.init.automations.is_none() {
        return Err("This daemon keeps no automations.".into());
    }
    let said = match action {
        AutomationsAction::List { json } => list(&conn, json).await,
        AutomationsAction::Runs { automation, json } => runs(&conn, &uri_of(&automation), json).await,
        AutomationsAction::Run { automation } => start(&conn, &uri_of(&automation)).await,
        AutomationsAction::Rm { automation } => remove(&mut conn, &uri_of(&automation)).await,
        AutomationsAction::Add { title, message, id, agent, folder, cron, time_zone, misfire, disabled } => {
            let id = id.unwrap_or_else(|| slug(&title));
            let definition = definition(&title, &message, agent, folder, cron, time_zone, misfire, !disabled)?;
            add(&mut conn, &format!("{SCHEME}{id}"), definition).await
        }
    };
    conn.client.shutdown().await;
    said.map(|()| ExitCode::SUCCESS)
}

/// An automation named by its URI or its id.
fn uri_of(named: &str) -> String {
    if named.starts_with(SCHEME) {
        named.to_owned()
    } else {
        format!("{SCHEME}{named}")
    }
}

/// An id from a title: its letters and digits, lower case, words joined by `-`.
fn slug(title: &str) -> String {
    let words: Vec<String> = title
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    if words.is_empty() {
        uuid::Uuid::new_v4().to_string()
    } else {
        words.join("-")
    }
}

async fn catalogue(conn: &Connection) -> Result<AutomationState, String> {
    let (result, _handle) =
        conn.client.subscribe(CATALOGUE.to_owned()).await.map_err(|e| format!("{CATALOGUE}: {e}"))?;
    match result.snapshot.map(|s| s.state) {
        Some(SnapshotState::Automations(state)) => Ok(*state),
        _ => Err(format!("{CATALOGUE} answered no catalogue.")),
    }
}

async fn entry(conn: &Connection, uri: &str) -> Result<AutomationEntry, String> {
    let state = catalogue(conn).await?;
    state.entries.into_iter().find(|e| e.resource == uri).ok_or_else(|| format!("There is no automation {uri}."))
}

async fn list(conn: &Connection, as_json: bool) -> Result<(), String> {
    let state = catalogue(conn).await?;
    if as_json {
        say(&serde_json::to_string_pretty(&state.entries).map_err(|e| e.to_string())?);
        return Ok(());
    }
    if state.entries.is_empty() {
        say("No automations.");
    }
    for entry in &state.entries {
        let onoff = if entry.definition.enabled { "on" } else { "off" };
        let next = entry.next_run_at.as_deref().map_or_else(|| "no schedule".to_owned(), |at| format!("next {at}"));
        let last =
            entry.runs.first().map_or_else(|| "never ran".to_owned(), |r| format!("last {}", status(&r.lifecycle)));
        say(&format!("{onoff:<3} {:<28} {next:<33} {last:<16} ({})", entry.definition.title, entry.resource));
    }
    Ok(())
}

async fn runs(conn: &Connection, uri: &str, as_json: bool) -> Result<(), String> {
    let entry = entry(conn, uri).await?;
    if as_json {
        say(&serde_json::to_string_pretty(&entry.runs).map_err(|e| e.to_string())?);
        return Ok(());
    }
    if entry.runs.is_empty() {
        say("No runs yet.");
    }
    for run in &entry.runs {
        say(&run_line(run));
    }
    Ok(())
}

/// `completed  2026-12-05T03:00:00.000Z  ahp-automation-run:/…  (ahp-session:/…)`, and why a failed
/// run failed.
fn run_line(run: &AutomationRunSummary) -> String {
    let (at, why) = match &run.lifecycle {
        AutomationRunLifecycle::Pending(l) => (l.created_at.clone(), None),
        AutomationRunLifecycle::Running(l) => (l.started_at.clone(), None),
        AutomationRunLifecycle::Completed(l) => (l.completed_at.clone(), None),
        AutomationRunLifecycle::Failed(l) => (l.completed_at.clone(), Some(l.error.message.clone())),
        AutomationRunLifecycle::Cancelled(l) => (l.completed_at.clone(), None),
    };
    let session = run.primary_session.as_deref().map(|s| format!("  ({s})")).unwrap_or_default();
    let why = why.map(|w| format!("\n            {w}")).unwrap_or_default();
    format!("{:<11} {at}  {}{session}{why}", status(&run.lifecycle), run.resource)
}

fn status(lifecycle: &AutomationRunLifecycle) -> &'static str {
    match lifecycle {
        AutomationRunLifecycle::Pending(_) => "pending",
        AutomationRunLifecycle::Running(_) => "running",
        AutomationRunLifecycle::Completed(_) => "completed",
        AutomationRunLifecycle::Failed(_) => "failed",
        AutomationRunLifecycle::Cancelled(_) => "cancelled",
    }
}

async fn start(conn: &Connection, uri: &str) -> Result<(), String> {
    let params = json!({ "channel": CATALOGUE, "automation": uri, "requestId": uuid::Uuid::new_v4().to_string() });
    let answer = conn.request("runAutomation", params).await?;
    say(answer["resource"].as_str().ok_or("runAutomation answered no run")?);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn definition(
    title: &str,
    message: &str,
    agent: Option<String>,
    folder: Option<std::path::PathBuf>,
    cron: Option<String>,
    time_zone: Option<String>,
    misfire: Option<String>,
    enabled: bool,
) -> Result<Value, String> {
    let folder = folder
        .map(|f| std::fs::canonicalize(&f).map_err(|e| format!("{}: {e}", f.display())))
        .transpose()?
        .map(|f| vec![format!("file://{}", f.display())]);
    let zone = time_zone.unwrap_or_else(|| jiff::tz::TimeZone::system().iana_name().unwrap_or("UTC").to_owned());
    let triggers: Vec<Value> = cron
        .map(|expression| {
            let mut trigger = json!({ "kind": "schedule", "id": "schedule",
                "schedule": { "expression": expression, "timeZone": zone } });
            if let Some(policy) = misfire {
                trigger["misfirePolicy"] = Value::from(policy);
            }
            trigger
        })
        .into_iter()
        .collect();
    let mut session = json!({});
    if let Some(agent) = agent {
        session["provider"] = Value::from(agent);
    }
    if let Some(folder) = folder {
        session["workingDirectories"] = json!(folder);
    }
    Ok(json!({
        "title": title,
        "message": { "text": message, "origin": { "kind": "automation" } },
        "session": session,
        "enabled": enabled,
        "triggers": triggers,
    }))
}

/// Dispatches `action` on the catalogue and waits for its echo: `Ok` when the daemon took it,
/// its refusal's sentence otherwise.
async fn dispatch(conn: &mut Connection, action: Value) -> Result<(), String> {
    catalogue(conn).await?;
    let action: StateAction =
        serde_json::from_value(action).map_err(|e| format!("could not spell the request: {e}"))?;
    let handle = conn.client.dispatch(CATALOGUE.to_owned(), action).await.map_err(|e| format!("dispatch: {e}"))?;
    loop {
        let (on, event) = conn.next().await?;
        let SubscriptionEvent::Action(env) = event else { continue };
        let ours =
            env.origin.as_ref().is_some_and(|o| o.client_id == conn.client_id && o.client_seq == handle.client_seq);
        if on == CATALOGUE && ours {
            return env.rejection_reason.map_or(Ok(()), |why| Err(format!("The daemon refused it: {why}")));
        }
    }
}

async fn add(conn: &mut Connection, uri: &str, definition: Value) -> Result<(), String> {
    dispatch(conn, json!({ "type": "automation/createRequested", "resource": uri, "definition": definition })).await?;
    let created = entry(conn, uri).await?;
    let next = created.next_run_at.map(|at| format!("; next run {at}")).unwrap_or_default();
    say(&format!("Created {uri}{next}."));
    Ok(())
}

async fn remove(conn: &mut Connection, uri: &str) -> Result<(), String> {
    entry(conn, uri).await?;
    dispatch(conn, json!({ "type": "automation/removed", "resource": uri })).await?;
    say(&format!("Removed {uri} and its run history."));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_comes_from_the_title() {
        assert_eq!(slug("Nightly dependency bump!"), "nightly-dependency-bump");
        assert_eq!(uri_of("nightly"), "ahp-automation:/nightly");
        assert_eq!(uri_of("ahp-automation:/x"), "ahp-automation:/x");
    }
}
