//! `ahpd --stdio` where a daemon already serves this data folder: a bridge, one more client of
//! that daemon's WebSocket (`server::bridge` relays the lines), rather than a host of its own.

use std::process::ExitCode;
use std::time::Duration;

use crate::daemon::Plan;
use crate::paths::Paths;

/// How long `--stdio` waits for a daemon that is starting to listen.
const STARTING_WAIT: Duration = Duration::from_secs(60);

/// `--stdio` bridged to the daemon running on this data folder, when one runs: a plain client of
/// its WebSocket, presenting the token the client verbs would (the owner's). Stdin closing is a
/// clean end; the daemon closing is said on stderr and exits 1. Nothing of the daemon's is started
/// or stopped here. `None` when no daemon runs: `--stdio` serves in process.
pub fn run(plan: &Plan) -> Option<ExitCode> {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("could not start the async runtime: {e}");
            return Some(ExitCode::FAILURE);
        }
    };
    let record = match runtime.block_on(daemon_to_bridge(&plan.paths)) {
        Ok(Some(record)) => record,
        Ok(None) => return None,
        Err(why) => {
            eprintln!("ahpd --stdio: {why}");
            return Some(ExitCode::FAILURE);
        }
    };
    let ended = runtime.block_on(async {
        let max_frame =
            daemons_max_frame(&plan.paths).await.unwrap_or(crate::daemon::limits(&plan.config).max_frame_bytes);
        let token = super::remote::token(&crate::cli::ClientArgs::default(), &plan.paths, Some(&record))
            .await
            .map_err(anyhow::Error::msg)?;
        eprintln!("ahpd over stdio, bridged to the daemon at {} (pid {})", record.url, record.pid);
        let daemon = crate::server::bridge::Daemon { url: record.url.clone(), token };
        crate::server::bridge::relay(&daemon, crate::daemon::hard_frame_bytes(max_frame), max_frame).await
    });
    // A read of stdin still waiting must not hold the process open.
    runtime.shutdown_background();
    Some(match ended {
        Ok(crate::server::bridge::Ending::ClientClosed) => ExitCode::SUCCESS,
        Ok(crate::server::bridge::Ending::DaemonClosed(why)) => {
            eprintln!("ahpd --stdio: the daemon at {} (pid {}) ended the connection: {why}", record.url, record.pid);
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("ahpd --stdio: {e:#}");
            ExitCode::FAILURE
        }
    })
}

/// The running daemon's own `maxFrameBytes` (its status carries the config it runs with): the
/// bridge skips the lines that daemon would not read, whatever config this process reads.
async fn daemons_max_frame(paths: &Paths) -> Option<usize> {
    let reply = super::ask(paths, &crate::control::Request::Status).await.ok()?;
    let value = reply.status?.config.get("maxFrameBytes")?.as_u64()?;
    usize::try_from(value).ok()
}

/// The daemon `--stdio` bridges to: the one whose record names a live process, or one still
/// starting, waited for (its control socket answers at once, its record follows once its port is
/// bound): a host in process beside it would serve the same store twice.
async fn daemon_to_bridge(paths: &Paths) -> Result<Option<crate::control::Record>, String> {
    let deadline = tokio::time::Instant::now() + STARTING_WAIT;
    let mut said = false;
    loop {
        if let Some(record) = super::remote::running(paths)? {
            return Ok(Some(record));
        }
        let starting = crate::control::client::listening(&paths.socket()).await;
        // Between a restarted daemon's exit and its successor's start nothing answers; the mark
        // `ahpd restart` leaves says one is coming.
        if !starting && !crate::control::restarting::under_way(paths) {
            return Ok(None);
        }
        if !said {
            let what = if starting { "a daemon is starting" } else { "ahpd restart is replacing the daemon" };
            eprintln!("ahpd --stdio: {what} on {}; waiting for it to listen", paths.data_dir.display());
            said = true;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "the daemon starting on {} did not listen within {} s",
                paths.data_dir.display(),
                STARTING_WAIT.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
