//! How a worker learns that its parent is gone, at once and even in the middle of a turn: SIGTERM
//! (which Linux sends when the parent dies, see `child`), SIGHUP, or its parent's pid changing
//! (the watch macOS relies on). Its stdin reaching its end without a `shutdown` first is the
//! fourth sign, seen by the frame loop.

use std::time::Duration;

use nix::unistd::{getppid, Pid};
use tokio::signal::unix::{signal, SignalKind};

/// How often the parent's pid is looked at.
const PARENT_POLL: Duration = Duration::from_millis(500);

/// Resolves, with the reason in words, once the worker should consider its parent gone.
pub async fn gone() -> String {
    #[cfg(target_os = "linux")]
    {
        // Already set when the parent is ahpd; a worker started by anything else gets it here.
        if let Err(e) = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM) {
            tracing::debug!(error = %e, "could not ask to be told of the parent's death");
        }
    }
    let parent = getppid();
    tokio::select! {
        why = on_signal(SignalKind::terminate(), "SIGTERM") => why,
        why = on_signal(SignalKind::hangup(), "SIGHUP") => why,
        why = reparented(parent) => why,
    }
}

async fn on_signal(kind: SignalKind, name: &str) -> String {
    match signal(kind) {
        Ok(mut stream) => {
            stream.recv().await;
            format!("{name} came")
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not listen for {name}");
            std::future::pending().await
        }
    }
}

async fn reparented(parent: Pid) -> String {
    let mut tick = tokio::time::interval(PARENT_POLL);
    loop {
        tick.tick().await;
        if getppid() != parent {
            return format!("the parent process (pid {parent}) is gone");
        }
    }
}
