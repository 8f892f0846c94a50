//! The schedules, on the daemon's clock (manual in tests): one task looks at every enabled
//! automation's schedules when the earliest occurrence falls due or a definition changes, makes
//! one run per occurrence that fell due since it last looked, and applies each trigger's misfire
//! policy to occurrences that were missed (the daemon down, the laptop asleep): `runOnce` makes
//! one catch-up run for all of them, `skip` none.

use std::sync::Arc;

use ahp_types::state::{AutomationMisfirePolicy, AutomationTrigger};
use tokio::sync::Notify;

use super::catalogue::{disable_if_done, next_run, save, schedules};
use super::runs::{admit, Why};
use super::schedule::GRACE_MS;
use crate::host::{Core, Host};
use crate::store::AutomationRecord;

/// The longest the task sleeps before it looks again, whatever is due (wall time can jump).
const LOOK_AGAIN_MS: u64 = 60_000;

/// The most occurrences one look makes up for, per trigger (the rest were passed over long ago).
const MOST_DUE: usize = 64;

/// Starts the task.
pub fn run(host: &Host, wake: Arc<Notify>) {
    let looking = host.clone();
    host.spawn("automation schedules", async move {
        agents_known(&looking).await;
        let mut starting = true;
        loop {
            let (next, clock) = {
                let mut core = looking.lock();
                let next = look(&looking, &mut core, starting);
                (next, core.clock().clone())
            };
            starting = false;
            let until = next.unwrap_or(u64::MAX).min(clock.now().saturating_add(LOOK_AGAIN_MS));
            tokio::select! {
                _ = clock.sleep_until(until) => {}
                _ = wake.notified() => {}
            }
        }
    });
}

/// Waits (at most the host's worker wait) until the host has heard every running agent say what it
/// is: a catch-up run at start opens its session from the agent's schema, and the worker's
/// `Ready` may still be on its way to the host when the supervisor reports it running. Nothing
/// signals that moment, so it is looked for, briefly, once, at start.
async fn agents_known(host: &Host) {
    let deadline = tokio::time::Instant::now() + host.config().worker_wait;
    loop {
        let waiting = {
            let core = host.lock();
            host.supervisor()
                .providers()
                .into_iter()
                .any(|p| host.supervisor().current(&p).is_some() && core.agent(&p).is_none_or(|a| a.schema.is_none()))
        };
        if !waiting || tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Looks at every automation's schedules now; answers when the next occurrence falls due.
/// `starting`: the daemon just started, so whatever fell due was missed while it was down.
fn look(host: &Host, core: &mut Core, starting: bool) -> Option<u64> {
    let records = core.store().automations().unwrap_or_else(|e| {
        tracing::error!("could not read the automations: {e}");
        Vec::new()
    });
    let now = core.clock().now();
    let mut next: Option<u64> = None;
    for mut record in records {
        if look_at(host, core, &mut record, now, starting) {
            save(core, &record);
        }
        if let Some(at) = next_run(&record) {
            next = Some(next.map_or(at, |n| n.min(at)));
        }
    }
    next
}

/// One automation's schedules; answers whether its record changed.
fn look_at(host: &Host, core: &mut Core, record: &mut AutomationRecord, now: u64, starting: bool) -> bool {
    let mut changed = disable_if_done(record, now);
    if !record.definition.enabled {
        return changed;
    }
    let triggers: Vec<(String, AutomationMisfirePolicy, Vec<u64>)> = schedules(&record.definition)
        .filter_map(|(trigger, schedule)| {
            let AutomationTrigger::Schedule(t) = trigger else { return None };
            let due = schedule.due(record.evaluated_to, now, MOST_DUE);
            let policy = t.misfire_policy.clone().unwrap_or(AutomationMisfirePolicy::RunOnce);
            (!due.is_empty()).then(|| (t.id.clone(), policy, due))
        })
        .collect();
    for (trigger, policy, due) in triggers {
        changed = true;
        let (missed, on_time): (Vec<u64>, Vec<u64>) =
            due.into_iter().partition(|at| starting || now.saturating_sub(*at) > GRACE_MS);
        let why = match (on_time.last(), missed.last()) {
            (Some(at), _) => Why::Schedule { trigger: trigger.clone(), at: *at, catch_up: false },
            (None, Some(at)) if policy == AutomationMisfirePolicy::RunOnce => {
                Why::Schedule { trigger: trigger.clone(), at: *at, catch_up: true }
            }
            _ => {
                tracing::info!(
                    automation = record.resource,
                    trigger,
                    "missed occurrences passed over (misfirePolicy skip)"
                );
                continue;
            }
        };
        match admit(host, core, &record.resource, why) {
            Ok((_, true)) => record.run_count += 1,
            Ok((_, false)) => {}
            Err(e) => tracing::error!(automation = record.resource, "a scheduled run could not be made: {e}"),
        }
        if disable_if_done(record, now) {
            break;
        }
    }
    if changed {
        record.evaluated_to = now;
    }
    changed
}
