//! Automations (issue 41, seed 003): agents that run on a schedule or an event, unattended, served
//! on AHP's automation channels. This room keeps the catalogue on `ahp-automations://`
//! (`catalogue.rs`: definitions created, updated and removed by clients, validated by
//! `validate.rs`), each run on `ahp-automation-run:/<id>` (`runs.rs`: kept before its first side
//! effect, its session opened from the template in a worktree of its own and sent the
//! automation's message, ended when that session's work ends), the schedules (`schedule.rs`, on
//! the daemon's clock in `scheduler.rs`) and the event triggers (`triggers.rs`, firing in
//! `events.rs`, for a branch that moved in `branches.rs`, and for GitHub's pull requests, issues
//! and checks in `github_watch.rs`).
//!
//! A run's session is unattended whoever looks on: the host decides that once for a session an
//! automation opened (`Core::is_attended`), and the session engine then neither offers it the
//! question tool nor lets a question wait, on every backend. It reaches the host through
//! `host::facade` alone, as the `facade::Automations` registered with `Host::serve_automations`.

mod branches;
mod catalogue;
pub mod events;
pub mod github_watch;
pub mod runs;
pub mod schedule;
mod scheduler;
pub mod triggers;
pub mod validate;

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::commands::{
    AutomationCapabilities, AutomationCreateCapability, AutomationRunCancellationCapability,
    AutomationScheduleCapabilities, FetchAutomationRunsParams, ListAutomationTriggerDefinitionsParams,
    ListAutomationTriggerDefinitionsResult, RunAutomationParams, RunAutomationResult,
};
use ahp_types::state::AutomationRunStatus;
use tokio::sync::Notify;

use crate::host::facade::{AhpError, WeakHost, AUTOMATION_RUN_SCHEME};
use crate::host::{Core, Host};
use crate::users::Principal;

/// The terminal runs each entry shows before `fetchAutomationRuns` pages back
/// (`runHistoryLimit`).
pub const RUN_HISTORY_LIMIT: usize = 20;

/// The ended runs the store keeps per automation (`fetchAutomationRuns` pages back through them);
/// older ones are forgotten, their sessions kept as any session is.
pub const RUNS_KEPT: usize = 200;

/// The automations feature.
pub struct Automations {
    /// Woken when a definition changes, so the schedule is looked at again.
    wake: Arc<Notify>,
    /// The host, for the runs an event starts (their sessions open in tasks of their own).
    host: WeakHost,
}

impl Automations {
    /// Reads the catalogue from the store (a run a crash cut ends `failed` with the reason),
    /// serves it on the host, and starts the schedules. Call once the agents are up: a run that
    /// falls due at start needs its agent.
    pub fn start(host: &Host, github: github_watch::Settings) -> Arc<Self> {
        let feature = Arc::new(Self { wake: Arc::new(Notify::new()), host: host.downgrade() });
        let catalogue = {
            let mut core = host.lock();
            runs::fail_interrupted(&mut core);
            catalogue::load(&mut core)
        };
        host.serve_automations(feature.clone(), catalogue);
        {
            let mut core = host.lock();
            catalogue::open_runs(&mut core);
        }
        scheduler::run(host, feature.wake.clone());
        branches::run(host);
        github_watch::run(host, github);
        feature
    }

    /// The schedule is looked at again (a definition changed).
    fn rescheduled(&self) {
        self.wake.notify_one();
    }
}

impl crate::host::facade::Automations for Automations {
    fn capabilities(&self) -> AutomationCapabilities {
        AutomationCapabilities {
            create: Some(AutomationCreateCapability {}),
            schedules: Some(AutomationScheduleCapabilities { min_interval_minutes: None }),
            run_cancellation: Some(AutomationRunCancellationCapability {}),
            run_history_limit: i64::try_from(RUN_HISTORY_LIMIT).ok(),
            customizations: None,
        }
    }

    fn check(&self, core: &Core, _principal: &Principal, channel: &str, action: &StateAction) -> Result<(), String> {
        match action {
            StateAction::AutomationCreateRequested(a) => catalogue::check_create(core, a).map(|_| ()),
            StateAction::AutomationUpdateRequested(a) => catalogue::check_update(core, a).map(|_| ()),
            StateAction::AutomationRemoved(_) => Ok(()),
            StateAction::AutomationRunCancelRequested(_) => {
                let state = core.automation_run_state(channel).ok_or("There is no such run")?;
                match runs::status(&state.lifecycle) {
                    AutomationRunStatus::Pending | AutomationRunStatus::Running => Ok(()),
                    done => Err(format!(
                        "This run is {} already; only a pending or running run can be cancelled",
                        runs::word(done)
                    )),
                }
            }
            _ => Err("Only the host says that".into()),
        }
    }

    fn accepted(&self, host: &Host, core: &mut Core, principal: &Principal, channel: &str, action: &StateAction) {
        match action {
            StateAction::AutomationCreateRequested(a) => catalogue::create(core, principal, a),
            StateAction::AutomationUpdateRequested(a) => catalogue::update(core, a),
            StateAction::AutomationRemoved(a) => catalogue::remove(core, &a.resource),
            StateAction::AutomationRunCancelRequested(_) => runs::cancel(host, core, channel),
            _ => return,
        }
        self.rescheduled();
    }

    fn run(
        &self,
        host: &Host,
        _principal: &Principal,
        params: RunAutomationParams,
    ) -> Result<RunAutomationResult, AhpError> {
        if params.request_id.trim().is_empty() {
            return Err(AhpError::invalid_params("Invalid runAutomation params: requestId must not be empty"));
        }
        let mut core = host.lock();
        if catalogue::record(&core, &params.automation).is_none() {
            return Err(AhpError::not_found(format!("There is no automation {}", params.automation)));
        }
        let why = runs::Why::Manual { request_id: params.request_id };
        let (resource, _) = runs::admit(host, &mut core, &params.automation, why).map_err(AhpError::internal)?;
        Ok(RunAutomationResult { resource })
    }

    fn fetch_runs(&self, host: &Host, params: FetchAutomationRunsParams) -> Result<(), AhpError> {
        let mut core = host.lock();
        if catalogue::record(&core, &params.automation).is_none() {
            return Err(AhpError::not_found(format!("There is no automation {}", params.automation)));
        }
        catalogue::page_back(&mut core, &params.automation);
        Ok(())
    }

    fn trigger_definitions(
        &self,
        _params: &ListAutomationTriggerDefinitionsParams,
    ) -> ListAutomationTriggerDefinitionsResult {
        ListAutomationTriggerDefinitionsResult { items: triggers::definitions() }
    }

    fn preview(&self, params: &serde_json::Value, now: u64) -> Result<serde_json::Value, AhpError> {
        let schedule: ahp_types::state::AutomationSchedule = serde_json::from_value(params["schedule"].clone())
            .map_err(|e| {
                AhpError::invalid_params(format!("Invalid ahpd/automationSchedulePreview params: schedule: {e}"))
            })?;
        let read = schedule::Schedule::read(&schedule, "schedule").map_err(AhpError::invalid_params)?;
        let count = params["count"].as_u64().unwrap_or(5).clamp(1, 50);
        let after = params["after"].as_str().and_then(schedule::millis_of).unwrap_or(now);
        let occurrences: Vec<String> =
            read.preview(after, usize::try_from(count).unwrap_or(5)).into_iter().map(crate::clock::iso).collect();
        Ok(serde_json::json!({ "occurrences": occurrences }))
    }

    fn turn_ended(&self, core: &mut Core, chat: &str) {
        runs::turn_ended(core, chat);
        if let Some(host) = self.host.upgrade() {
            events::session_ended(&host, core, chat);
        }
    }
}

/// True for a run's channel.
pub fn is_run(uri: &str) -> bool {
    uri.starts_with(AUTOMATION_RUN_SCHEME)
}
