//! `schedule_wakeup`, the third of this host's own tools, and the timer that keeps its promise: a
//! new turn in the calling chat, `delaySeconds` (60 s to 30 days) from now, beginning with
//! `prompt`.
//!
//! A chat holds one wakeup: a new call replaces it and `stop: true` cancels it. It is kept in the
//! store's `wakeups` table, so it survives the session going to sleep and the daemon restarting or
//! being killed, and nothing is kept awake for it: the timer reads the store. When one is due the
//! host loads the session if it is not in memory and begins the turn, or queues the prompt behind
//! a turn that is running. The store forgets the wakeup in the same savepoint that records the
//! turn's start, so it fires once. A wakeup that fell due while the daemon was down fires once,
//! when it starts. One whose turn is refused, or whose agent is not running, stays stored and is
//! tried again when the daemon next starts. Due times are on the host's [`Clock`], which tests
//! move instead of waiting.
//!
//! [`Clock`]: crate::clock::Clock

use std::collections::HashSet;
use std::sync::Arc;

use ahp_types::common::JsonObject;
use ahp_types::state::{Message, MessageKind, MessageOrigin};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{declare, Group, Own, Refusal, Tool, ToolCall, ToolResult};
use crate::clock::iso;
use crate::host::facade::{host_turn, Delivered, Sender};
use crate::host::{Core, Host};
use crate::store::WakeupRecord;

const NAME: &str = "schedule_wakeup";

/// The shortest delay, in seconds.
pub const MIN_DELAY: u64 = 60;
/// The longest delay, in seconds (30 days).
pub const MAX_DELAY: u64 = 2_592_000;

/// `schedule_wakeup`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleWakeup {
    /// Seconds from now until the turn begins, from 60 to 2592000 (30 days).
    #[schemars(with = "Option<Own<f64>>", range(min = 60, max = 2_592_000))]
    pub delay_seconds: Option<Value>,
    /// The text the turn begins with.
    #[schemars(with = "Option<Own<String>>")]
    pub prompt: Option<Value>,
    /// Cancel this chat's wakeup instead of scheduling one.
    pub stop: Option<bool>,
}

/// The tool's declaration.
pub fn tool() -> Tool {
    declare::<ScheduleWakeup>(
        Group::Own,
        NAME,
        "Begin a new turn in this chat later. After delaySeconds (60 to 2592000, which is 30 days) this host begins a turn here with prompt as its message, waking the session if it sleeps, or queues the prompt behind a turn that is running then. A chat holds one wakeup: a new call replaces it, and stop: true cancels it. It survives the daemon restarting. Answers when the wakeup is due.",
    )
    .with(|info| info.titled("Schedule a wakeup").writes())
    .answers(|cx, args| schedule(cx.host, cx.call, args))
}

fn schedule(host: &Host, call: &ToolCall, args: ScheduleWakeup) -> ToolResult {
    let stop = args.stop.unwrap_or(false);
    let (Some(chat), Some(session)) = (call.chat.clone(), call.session.clone()) else {
        return Err(format!("{NAME} begins a turn in the chat it is called from, and this call has none.").into());
    };
    if stop {
        return cancel(host, &chat);
    }
    let delay = args
        .delay_seconds
        .as_ref()
        .and_then(Value::as_f64)
        .filter(|d| (MIN_DELAY as f64..=MAX_DELAY as f64).contains(d))
        .ok_or_else(|| {
            format!("Invalid {NAME} input: delaySeconds must be a number from {MIN_DELAY} to {MAX_DELAY} (30 days).")
        })?;
    let prompt = match args.prompt {
        Some(Value::String(p)) if !p.trim().is_empty() => p,
        _ => return Err(format!("Invalid {NAME} input: prompt must be a non-empty string.").into()),
    };
    let clock = &host.config().clock;
    // Within the bounds checked above, so it fits.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let delay_ms = (delay * 1000.0).round() as u64;
    let record = WakeupRecord {
        chat,
        session,
        prompt,
        due_at_ms: clock.now().saturating_add(delay_ms),
        scheduled_at: clock.now_iso(),
        // The wake's turn acts as the person whose turn asked for it, and never as more.
        sender: call.caller.turn_sender(),
    };
    let replaced =
        host.lock().store().save_wakeup(&record).map_err(|e| format!("The wakeup could not be kept: {e}"))?;
    let mut said = format!(
        "Wakeup scheduled: this chat begins a new turn at {} ({} seconds from now) with your prompt.",
        iso(record.due_at_ms),
        delay_ms.div_ceil(1000)
    );
    if let Some(before) = replaced {
        said.push_str(&format!(" It replaces the wakeup that was due at {}.", iso(before.due_at_ms)));
    }
    Ok(said)
}

fn cancel(host: &Host, chat: &str) -> ToolResult {
    let gone =
        host.lock().store().delete_wakeup(chat).map_err(|e| format!("The wakeup could not be cancelled: {e}"))?;
    Ok(match gone {
        Some(w) => format!("Wakeup cancelled; it was due at {}.", iso(w.due_at_ms)),
        None => "This chat has no wakeup to cancel.".to_owned(),
    })
}

/// Wakeups refused in this process, by (chat, due time): tried again only when the daemon next
/// starts, or when the chat schedules another.
type Refused = HashSet<(String, u64)>;

impl Host {
    /// Begins the turns of wakeups that fell due while the daemon was down, before any client can
    /// connect, then keeps a timer for the rest until the daemon stops.
    pub fn run_wakeups(&self) {
        let mut refused = Refused::new();
        self.fire_due_wakeups(&mut refused);
        let host = self.clone();
        self.spawn("wakeups", async move {
            let notify: Arc<tokio::sync::Notify> = host.lock().store().wakeup_changes();
            let clock = host.config().clock.clone();
            loop {
                match host.next_wakeup(&refused) {
                    Some(due) if due <= clock.now() => host.fire_due_wakeups(&mut refused),
                    Some(due) => {
                        tokio::select! {
                            _ = clock.sleep_until(due) => {}
                            _ = notify.notified() => {}
                        }
                    }
                    None => notify.notified().await,
                }
            }
        });
    }

    /// When the soonest wakeup not refused is due.
    fn next_wakeup(&self, refused: &Refused) -> Option<u64> {
        let core = self.lock();
        let all = core.store().wakeups().unwrap_or_else(|e| {
            tracing::error!("could not read the wakeups: {e}");
            Vec::new()
        });
        all.into_iter().map(|w| (w.chat, w.due_at_ms)).filter(|k| !refused.contains(k)).map(|(_, due)| due).min()
    }

    /// Fires every wakeup that is due now, soonest first.
    fn fire_due_wakeups(&self, refused: &mut Refused) {
        let now = self.config().clock.now();
        let mut core = self.lock();
        let due: Vec<WakeupRecord> = match core.store().wakeups() {
            Ok(all) => all.into_iter().filter(|w| w.due_at_ms <= now).collect(),
            Err(e) => {
                tracing::error!("could not read the wakeups: {e}");
                return;
            }
        };
        for wakeup in due {
            let key = (wakeup.chat.clone(), wakeup.due_at_ms);
            if refused.contains(&key) {
                continue;
            }
            match self.fire_wakeup(&mut core, &wakeup) {
                Ok(how) => tracing::info!(chat = %wakeup.chat, "a wakeup fell due: {how}"),
                Err(why) => {
                    tracing::warn!(
                        chat = %wakeup.chat,
                        "a wakeup fell due but its turn could not begin ({why}); it stays stored and is tried again when the daemon next starts"
                    );
                    refused.insert(key);
                }
            }
        }
    }

    /// Begins one wakeup's turn (or queues its prompt), forgetting it in the same savepoint.
    fn fire_wakeup(&self, core: &mut Core, wakeup: &WakeupRecord) -> Result<&'static str, Refusal> {
        const SAVEPOINT: &str = "wakeup";
        core.store().savepoint(SAVEPOINT).map_err(|e| e.to_string())?;
        let fired = core.store().delete_wakeup(&wakeup.chat).map_err(|e| e.to_string()).and_then(|_| {
            let sender = Sender::Scheduled { person: wakeup.sender.clone() };
            self.deliver(core, &wakeup.chat, host_turn(wakeup_message(wakeup), None), sender)
        });
        let kept = match fired {
            Ok(_) => core.store().release(SAVEPOINT),
            Err(_) => core.store().roll_back(SAVEPOINT),
        };
        // A store that could not keep the outcome may still hold the wakeup: it is not tried
        // again in this process, so the timer cannot spin on it.
        kept.map_err(|e| e.to_string())?;
        match fired? {
            Delivered::Started(_) => Ok("its turn began"),
            Delivered::Queued(_) => Ok("its prompt is queued behind the running turn"),
        }
    }
}

/// The message a wakeup's turn begins with: the model's own prompt, marked as a wakeup's.
fn wakeup_message(wakeup: &WakeupRecord) -> Message {
    let mut meta = JsonObject::new();
    meta.insert(
        "ahpd.wakeup".to_owned(),
        json!({ "dueAt": iso(wakeup.due_at_ms), "scheduledAt": wakeup.scheduled_at }),
    );
    Message {
        text: wakeup.prompt.clone(),
        origin: MessageOrigin { kind: MessageKind::Agent },
        attachments: None,
        model: None,
        agent: None,
        meta: Some(meta),
    }
}
