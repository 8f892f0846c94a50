//! A run, from its record to its end: [`admit`] keeps it (`pending`) before anything else happens,
//! once per `requestId` and once per occurrence; [`start`] opens its session from the template
//! (revalidated; in a worktree of its own by default), links it (`running`), and sends it the
//! automation's message as a turn nobody attends; [`turn_ended`] ends the run as the session's
//! work ended. A run a crash cut ends `failed` with the reason when the daemon starts again
//! ([`fail_interrupted`]).

use ahp_types::actions::{
    AutomationRunLifecycleChangedAction, AutomationRunPrimarySessionChangedAction, AutomationRunSessionSetAction,
    StateAction,
};
use ahp_types::common::JsonObject;
use ahp_types::state::{
    AutomationCancelledRunLifecycle, AutomationCompletedRunLifecycle, AutomationFailedRunLifecycle,
    AutomationManualRunOrigin, AutomationPendingRunLifecycle, AutomationRunLifecycle, AutomationRunOrigin,
    AutomationRunState, AutomationRunStatus, AutomationRunSummary, AutomationRunningRunLifecycle,
    AutomationSessionOrigin, AutomationTriggeredRunOrigin, ErrorInfo, ResponsePart, SessionConfigState, SessionOrigin,
    TurnState,
};
use serde_json::Value;

use super::catalogue;
use crate::clock::iso;
use crate::host::facade::{
    host_turn, new_id, path_of, resolve_config, AhpError, Delivered, FolderRequest, NewSession, Sender,
    AUTOMATION_RUN_SCHEME,
};
use crate::host::{Core, Host};
use crate::store::{AutomationRecord, AutomationRunRecord};

/// The session setting that says where a session works: `folder`, or a `worktree` of its own.
const ISOLATION: &str = "isolation";

/// Why a run is made.
#[derive(Debug, Clone)]
pub enum Why {
    /// `runAutomation`, under this request id.
    Manual { request_id: String },
    /// A schedule's occurrence (milliseconds); `catch_up` for a missed one `runOnce` makes up for.
    Schedule { trigger: String, at: u64, catch_up: bool },
    /// An event; `key` tells this event from any other of the trigger's, `event` says what it was.
    Event { trigger: String, key: String, event: JsonObject },
}

impl Why {
    fn origin(&self) -> AutomationRunOrigin {
        match self {
            Why::Manual { .. } => AutomationRunOrigin::Manual(AutomationManualRunOrigin {}),
            Why::Schedule { trigger, at, catch_up } => AutomationRunOrigin::Trigger(AutomationTriggeredRunOrigin {
                trigger_id: trigger.clone(),
                scheduled_for: Some(iso(*at)),
                catch_up: catch_up.then_some(true),
                event: None,
            }),
            Why::Event { trigger, event, .. } => AutomationRunOrigin::Trigger(AutomationTriggeredRunOrigin {
                trigger_id: trigger.clone(),
                scheduled_for: None,
                catch_up: None,
                event: Some(event.clone()),
            }),
        }
    }

    fn request_id(&self) -> Option<String> {
        match self {
            Why::Manual { request_id } => Some(request_id.clone()),
            _ => None,
        }
    }

    fn occurrence(&self) -> Option<String> {
        match self {
            Why::Manual { .. } => None,
            Why::Schedule { trigger, at, .. } => Some(format!("{trigger}@{at}")),
            Why::Event { trigger, key, .. } => Some(format!("{trigger}#{key}")),
        }
    }
}

/// A run's status.
pub fn status(lifecycle: &AutomationRunLifecycle) -> AutomationRunStatus {
    match lifecycle {
        AutomationRunLifecycle::Pending(_) => AutomationRunStatus::Pending,
        AutomationRunLifecycle::Running(_) => AutomationRunStatus::Running,
        AutomationRunLifecycle::Completed(_) => AutomationRunStatus::Completed,
        AutomationRunLifecycle::Failed(_) => AutomationRunStatus::Failed,
        AutomationRunLifecycle::Cancelled(_) => AutomationRunStatus::Cancelled,
    }
}

/// A status as a sentence says it.
pub fn word(status: AutomationRunStatus) -> &'static str {
    match status {
        AutomationRunStatus::Pending => "pending",
        AutomationRunStatus::Running => "running",
        AutomationRunStatus::Completed => "completed",
        AutomationRunStatus::Failed => "failed",
        AutomationRunStatus::Cancelled => "cancelled",
    }
}

/// A run's summary, as its automation's entry lists it.
pub fn summary(state: &AutomationRunState) -> AutomationRunSummary {
    AutomationRunSummary {
        resource: state.resource.clone(),
        automation: state.automation.clone(),
        origin: state.origin.clone(),
        lifecycle: state.lifecycle.clone(),
        primary_session: state.primary_session.clone(),
        session_count: i64::try_from(state.sessions.len()).unwrap_or(i64::MAX),
        meta: None,
    }
}

/// A run's record, when the store keeps it.
pub fn record(core: &Core, uri: &str) -> Option<AutomationRunRecord> {
    core.store().automation_run(uri).unwrap_or_else(|e| {
        tracing::error!("could not read automation run {uri}: {e}");
        None
    })
}

/// Makes a run of `automation` for `why` and starts it, or answers the run already made for the
/// same request or occurrence (`false`: nothing new was made). The run is kept before anything
/// else happens.
pub fn admit(host: &Host, core: &mut Core, automation: &str, why: Why) -> Result<(String, bool), String> {
    let (request_id, occurrence) = (why.request_id(), why.occurrence());
    let existing = core.store().automation_run_for(automation, request_id.as_deref(), occurrence.as_deref());
    match existing {
        Ok(Some(found)) => return Ok((found.state.resource, false)),
        Ok(None) => {}
        Err(e) => return Err(format!("the store could not be read: {e}")),
    }
    let now = core.clock().now();
    let state = AutomationRunState {
        resource: format!("{AUTOMATION_RUN_SCHEME}{}", new_id()),
        automation: automation.to_owned(),
        origin: why.origin(),
        lifecycle: AutomationRunLifecycle::Pending(AutomationPendingRunLifecycle { created_at: iso(now) }),
        sessions: Vec::new(),
        primary_session: None,
        meta: None,
    };
    let record = AutomationRunRecord { state: state.clone(), request_id, occurrence, created_ms: now };
    core.store().save_automation_run(&record).map_err(|e| format!("the run could not be kept: {e}"))?;
    let uri = state.resource.clone();
    core.open_automation_run(state);
    // The store keeps a bounded history: the oldest ended runs go (their sessions stay).
    match core.store().prune_automation_runs(automation, super::RUNS_KEPT) {
        Ok(gone) => gone.iter().for_each(|old| core.close_automation_run(old)),
        Err(e) => tracing::error!("could not forget the oldest runs of {automation}: {e}"),
    }
    catalogue::refresh(core, automation);
    let started = host.clone();
    let run = uri.clone();
    host.spawn("start an automation run", async move { start(&started, &run).await });
    Ok((uri, true))
}

/// What a run's session is opened as.
struct Plan {
    session: NewSession,
    message: ahp_types::state::Message,
    owner: Option<String>,
    title: String,
}

/// Opens the run's session and sends it the automation's message; a run that cannot start ends
/// `failed` with the reason.
async fn start(host: &Host, run: &str) {
    let plan = {
        let core = host.lock();
        plan(&core, run)
    };
    let mut plan = match plan {
        Ok(plan) => plan,
        Err(why) => return fail(&mut host.lock(), run, &why),
    };
    let workspaces = host.lock().workspaces();
    if workspaces.needs_folder(&plan.session.config.values) {
        let Some(from) = plan.session.working_directory.clone() else {
            let why = "Its session works in a worktree of its own, cut from the folder the template names, and it names none.";
            return fail(&mut host.lock(), run, why);
        };
        let request = FolderRequest {
            owner: plan.session.uri.clone(),
            session: plan.session.uri.clone(),
            from,
            title: Some(plan.title.clone()),
            settings: plan.session.config.values.clone(),
        };
        match workspaces.make_folder(host, request).await {
            Ok(folder) => plan.session.working_directory = Some(folder),
            Err(e) => return fail(&mut host.lock(), run, &e.message),
        }
    }
    let mut core = host.lock();
    let uri = plan.session.uri.clone();
    if !is_pending(&core, run) {
        // Cancelled while its folder was cut.
        workspaces.settle(&mut core, &uri, false);
        return;
    }
    open(host, &mut core, run, plan);
    workspaces.settle(&mut core, &uri, true);
}

fn is_pending(core: &Core, run: &str) -> bool {
    core.automation_run_state(run).is_some_and(|s| status(&s.lifecycle) == AutomationRunStatus::Pending)
}

/// The run's session as the template says, revalidated as `createSession` checks a session.
fn plan(core: &Core, run: &str) -> Result<Plan, String> {
    let state = core.automation_run_state(run).ok_or("the run is gone")?;
    let record: AutomationRecord = catalogue::record(core, &state.automation).ok_or("its automation was removed")?;
    let template = &record.definition.session;
    let provider = core.pick_provider(template.provider.as_deref()).map_err(|e| e.message)?;
    let schema = core.started_schema(&provider).map_err(|e| e.message)?;
    let working_directory = template.working_directories.iter().flatten().next().and_then(|d| path_of(d));
    let mut config = template.config.clone().unwrap_or_default();
    // A run works in a worktree of its own unless its template says otherwise (the session
    // setting clients see in every agent's schema; the workspaces feature acts on it).
    let isolation = ISOLATION;
    if working_directory.is_some()
        && schema.schema.properties.contains_key(isolation)
        && !config.contains_key(isolation)
    {
        config.insert(isolation.into(), Value::from("worktree"));
    }
    let values = resolve_config(&schema, Some(&config)).map_err(|e: AhpError| e.message)?;
    let mut message = record.definition.message.clone();
    if let AutomationRunOrigin::Trigger(AutomationTriggeredRunOrigin { event: Some(event), .. }) = &state.origin {
        if let Some(said) = super::github_watch::prompt(event) {
            message.text = format!("{}\n\n{said}", message.text);
        }
    }
    if message.model.is_none() {
        message.model = template.model.clone();
    }
    let session = NewSession {
        uri: format!("ahp-session:/{}", new_id()),
        provider,
        config: SessionConfigState { schema: schema.schema.clone(), values },
        working_directory,
        owner: record.owner.clone().filter(|_| core.has_users()),
        parent: None,
        depth: 0,
    };
    Ok(Plan { session, message, owner: record.owner.clone(), title: record.definition.title.clone() })
}

/// Opens the planned session, links it to the run (kept before its first message), and sends it
/// the automation's message.
fn open(host: &Host, core: &mut Core, run: &str, plan: Plan) {
    let Some(automation) = core.automation_run_state(run).map(|s| s.automation.clone()) else { return };
    let session = plan.session.uri.clone();
    let origin =
        SessionOrigin::Automation(AutomationSessionOrigin { automation: automation.clone(), run: run.to_owned() });
    let chat = host.open_session(core, plan.session, |core| core.set_session_origin(&session, origin));
    core.name_chat(&chat, &plan.title);
    let created_at = created_at(core, run);
    let running = AutomationRunLifecycle::Running(AutomationRunningRunLifecycle {
        created_at,
        started_at: core.clock().now_iso(),
    });
    change(core, run, StateAction::AutomationRunSessionSet(AutomationRunSessionSetAction { session: session.clone() }));
    let primary = AutomationRunPrimarySessionChangedAction { primary_session: Some(session.clone()) };
    change(core, run, StateAction::AutomationRunPrimarySessionChanged(primary));
    set_lifecycle(core, run, running);
    let sender = Sender::Scheduled { person: plan.owner };
    match host.deliver(core, &chat, host_turn(plan.message, None), sender) {
        Ok(Delivered::Started(_) | Delivered::Queued(_)) => {}
        Err(why) => fail(core, run, &format!("Its session could not take the automation's message: {why}")),
    }
}

fn created_at(core: &Core, run: &str) -> String {
    match core.automation_run_state(run).map(|s| &s.lifecycle) {
        Some(AutomationRunLifecycle::Pending(l)) => l.created_at.clone(),
        Some(AutomationRunLifecycle::Running(l)) => l.created_at.clone(),
        Some(AutomationRunLifecycle::Completed(l)) => l.created_at.clone(),
        Some(AutomationRunLifecycle::Failed(l)) => l.created_at.clone(),
        Some(AutomationRunLifecycle::Cancelled(l)) => l.created_at.clone(),
        None => core.clock().now_iso(),
    }
}

fn started_at(lifecycle: &AutomationRunLifecycle) -> Option<String> {
    match lifecycle {
        AutomationRunLifecycle::Running(l) => Some(l.started_at.clone()),
        _ => None,
    }
}

/// Says a change on the run's channel and keeps the run as it now stands.
fn change(core: &mut Core, run: &str, action: StateAction) {
    core.apply(run, action, None, None);
    keep(core, run);
}

/// Keeps the run as its channel holds it.
fn keep(core: &mut Core, run: &str) {
    let Some(state) = core.automation_run_state(run).cloned() else { return };
    let Some(mut record) = record(core, run) else { return };
    record.state = state;
    if let Err(e) = core.store().save_automation_run(&record) {
        tracing::error!("could not keep automation run {run}: {e}");
    }
}

/// Moves the run to `lifecycle`, keeps it, and tells its automation's watchers.
fn set_lifecycle(core: &mut Core, run: &str, lifecycle: AutomationRunLifecycle) {
    let action =
        StateAction::AutomationRunLifecycleChanged(Box::new(AutomationRunLifecycleChangedAction { lifecycle }));
    change(core, run, action);
    if let Some(automation) = core.automation_run_state(run).map(|s| s.automation.clone()) {
        catalogue::refresh(core, &automation);
    }
}

/// Ends the run `failed`, saying why.
pub fn fail(core: &mut Core, run: &str, why: &str) {
    let Some(lifecycle) = core.automation_run_state(run).map(|s| s.lifecycle.clone()) else { return };
    tracing::warn!(run, "an automation run failed: {why}");
    let failed = AutomationRunLifecycle::Failed(AutomationFailedRunLifecycle {
        created_at: created_at(core, run),
        started_at: started_at(&lifecycle),
        completed_at: core.clock().now_iso(),
        error: ErrorInfo { error_type: "automationRunFailed".into(), message: why.to_owned(), stack: None, meta: None },
    });
    set_lifecycle(core, run, failed);
}

/// `automationRun/cancelRequested`, accepted: the run ends `cancelled`, and the turn its session
/// runs is stopped.
pub fn cancel(_host: &Host, core: &mut Core, run: &str) {
    let Some(state) = core.automation_run_state(run).cloned() else { return };
    let cancelled = AutomationRunLifecycle::Cancelled(AutomationCancelledRunLifecycle {
        created_at: created_at(core, run),
        started_at: started_at(&state.lifecycle),
        completed_at: core.clock().now_iso(),
    });
    set_lifecycle(core, run, cancelled);
    for session in &state.sessions {
        for chat in core.chats_of(session) {
            if let Some(turn) = core.running_turn(&chat) {
                core.stop(&chat, turn);
            }
        }
    }
}

/// A turn ended in `chat`: when it is a run's session's and nothing waits behind it, the run ends
/// as the turn did.
pub fn turn_ended(core: &mut Core, chat: &str) {
    let Some(session) = core.chat(chat).map(|m| m.session.clone()) else { return };
    let Some(SessionOrigin::Automation(origin)) = core.session_state(&session).and_then(|s| s.origin.clone()) else {
        return;
    };
    let run = origin.run;
    let Some(lifecycle) = core.automation_run_state(&run).map(|s| s.lifecycle.clone()) else { return };
    if status(&lifecycle) != AutomationRunStatus::Running || core.is_busy(chat) {
        return;
    }
    let Some(turn) = core.chat_state(chat).and_then(|c| c.turns.last()).cloned() else { return };
    let created_at = created_at(core, &run);
    let started_at = started_at(&lifecycle).unwrap_or_else(|| created_at.clone());
    let completed_at = core.clock().now_iso();
    let ended = match turn.state {
        TurnState::Complete => AutomationRunLifecycle::Completed(AutomationCompletedRunLifecycle {
            created_at,
            started_at,
            completed_at,
            usage: turn.usage.clone(),
        }),
        TurnState::Cancelled => AutomationRunLifecycle::Cancelled(AutomationCancelledRunLifecycle {
            created_at,
            started_at: Some(started_at),
            completed_at,
        }),
        TurnState::Error => {
            let said = turn.response_parts.iter().rev().find_map(|p| match p {
                ResponsePart::Error(e) => Some(e.error.message.clone()),
                _ => None,
            });
            let why = said.unwrap_or_else(|| "Its session's turn failed.".into());
            return fail(core, &run, &why);
        }
    };
    set_lifecycle(core, &run, ended);
}

/// At start: a run the last daemon left pending or running was cut by a crash or a stop; it ends
/// `failed` with the reason, and is not started again.
pub fn fail_interrupted(core: &mut Core) {
    let unfinished = core.store().unfinished_automation_runs().unwrap_or_else(|e| {
        tracing::error!("could not read the automation runs: {e}");
        Vec::new()
    });
    let now = core.clock().now_iso();
    for mut record in unfinished {
        let was = status(&record.state.lifecycle);
        let created_at = match &record.state.lifecycle {
            AutomationRunLifecycle::Pending(l) => l.created_at.clone(),
            AutomationRunLifecycle::Running(l) => l.created_at.clone(),
            _ => continue,
        };
        let why = format!(
            "ahpd stopped while this run was {}, so it did not finish; its session keeps what it did.",
            word(was)
        );
        record.state.lifecycle = AutomationRunLifecycle::Failed(AutomationFailedRunLifecycle {
            created_at,
            started_at: started_at(&record.state.lifecycle),
            completed_at: now.clone(),
            error: ErrorInfo { error_type: "automationRunInterrupted".into(), message: why, stack: None, meta: None },
        });
        if let Err(e) = core.store().save_automation_run(&record) {
            tracing::error!("could not keep automation run {}: {e}", record.state.resource);
        }
    }
}
