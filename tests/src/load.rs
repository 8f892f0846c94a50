//! The load run behind `scripts/load` and the short load test: clients connecting and disconnecting
//! at random on sessions whose chats stream all the while, each client's folded state checked
//! against the host's snapshot whenever it leaves in good order, every chat checked at the end,
//! and the daemon's resident memory before, during and after.
//!
//! Loopback only: the daemon is a child process on 127.0.0.1 and every request loop is bounded by
//! the run's deadline.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahp_types::commands::ReconnectResult;
use anyhow::{anyhow, bail, Context};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::{Daemon, DaemonOptions, Mirror, TestClient};

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// Clients at once.
    pub clients: usize,
    /// Sessions (each with its default chat) the clients share.
    pub sessions: usize,
    /// How long the load lasts.
    pub duration: Duration,
    /// The echo agent's pause between deltas.
    pub pace_ms: u64,
    /// Words per turn.
    pub words: usize,
    /// The seed for every random choice.
    pub seed: u64,
    /// `sessionIdleUnloadMs` for the daemon: sessions nobody watches leave memory after this
    /// (0: they stay). Short, so the run can watch the history leave memory once the load ends.
    pub idle_unload_ms: u64,
}

impl Default for LoadPlan {
    fn default() -> Self {
        Self {
            clients: 20,
            sessions: 50,
            duration: Duration::from_secs(300),
            pace_ms: 10,
            words: 20,
            seed: 1,
            idle_unload_ms: 2000,
        }
    }
}

/// What a run counted and measured.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Connections opened (handshakes that succeeded).
    pub connections: usize,
    /// Of those, ones that resumed with `reconnect`: by replay, by snapshots.
    pub resumed_replay: usize,
    /// See `resumed_replay`.
    pub resumed_snapshot: usize,
    /// Connections dropped without a goodbye.
    pub dropped: usize,
    /// Turns the clients started.
    pub turns: usize,
    /// Action envelopes the clients received.
    pub actions: usize,
    /// Folded states that were compared with a snapshot and equal it.
    pub checks: usize,
    /// The daemon's VmRSS, in KiB: before the load, the most seen during it, after it (before and
    /// after: once the idle sessions have left memory, when they do).
    pub rss_before_kib: u64,
    /// See `rss_before_kib`.
    pub rss_peak_kib: u64,
    /// See `rss_before_kib`.
    pub rss_after_kib: u64,
    /// Its VmRSS right after the load, while every chat's history was loaded for the last check.
    pub rss_loaded_after_kib: u64,
    /// Sessions still in memory when `rss_after_kib` was read.
    pub loaded_after: u64,
    /// The chats' snapshots, in bytes of JSON, before and after: the history the load added.
    pub state_before_bytes: usize,
    /// See `state_before_bytes`.
    pub state_after_bytes: usize,
}

impl LoadReport {
    /// The memory verdict: after the load the daemon holds no more than it did before, plus the
    /// history the load added when sessions are still loaded (counted three times over, for the
    /// structures around the JSON), plus a margin of 16 MiB or a quarter of where it started,
    /// whichever is larger, for what the allocator keeps.
    pub fn memory_returned(&self) -> bool {
        let added = self.state_after_bytes.saturating_sub(self.state_before_bytes) as u64;
        let history_kib = if self.loaded_after > 0 { added * 3 / 1024 } else { 0 };
        let margin_kib = (16 * 1024).max(self.rss_before_kib / 4);
        self.rss_after_kib <= self.rss_before_kib + history_kib + margin_kib
    }

    /// The numbers, one per line.
    pub fn lines(&self, plan: &LoadPlan) -> Vec<String> {
        vec![
            format!(
                "load: {} clients on {} sessions for {} s (echo pace {} ms, {} words a turn, seed {}, idle sessions unloaded after {} ms)",
                plan.clients,
                plan.sessions,
                plan.duration.as_secs(),
                plan.pace_ms,
                plan.words,
                plan.seed,
                plan.idle_unload_ms
            ),
            format!(
                "connections: {} ({} resumed by replay, {} by snapshots, {} dropped without a goodbye)",
                self.connections, self.resumed_replay, self.resumed_snapshot, self.dropped
            ),
            format!("turns started: {}; actions received: {}", self.turns, self.actions),
            format!("folded states equal to their snapshots: {} checks, none differed", self.checks),
            format!(
                "daemon VmRSS: {:.1} MiB before, {:.1} MiB at most during, {:.1} MiB right after (every chat loaded), {:.1} MiB after ({} sessions left in memory)",
                self.rss_before_kib as f64 / 1024.0,
                self.rss_peak_kib as f64 / 1024.0,
                self.rss_loaded_after_kib as f64 / 1024.0,
                self.rss_after_kib as f64 / 1024.0,
                self.loaded_after
            ),
            format!(
                "chat history held (snapshot JSON): {:.1} MiB before, {:.1} MiB after",
                self.state_before_bytes as f64 / 1_048_576.0,
                self.state_after_bytes as f64 / 1_048_576.0
            ),
            format!(
                "memory returned near its level before the load: {}",
                if self.memory_returned() { "yes" } else { "NO" }
            ),
        ]
    }
}

/// A process's resident memory in KiB (from /proc).
pub fn vm_rss_kib(pid: i32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no VmRSS for pid {pid}"))
}

#[derive(Default)]
struct Counters {
    connections: AtomicUsize,
    resumed_replay: AtomicUsize,
    resumed_snapshot: AtomicUsize,
    dropped: AtomicUsize,
    turns: AtomicUsize,
    actions: AtomicUsize,
    checks: AtomicUsize,
}

/// Runs the load against a fresh daemon and answers what it counted; a folded state that differs
/// from its snapshot, or a client that cannot do its part, is an error.
pub async fn run(plan: &LoadPlan) -> anyhow::Result<LoadReport> {
    let config = json!({
        "agents": { "echo": crate::agents::echo_paced(plan.pace_ms) },
        "maxSessionsPerMinute": plan.sessions.max(60),
        "clientToolCallDisconnectTimeoutMs": 0,
        "sessionIdleUnloadMs": plan.idle_unload_ms,
    });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let chats = setup(&daemon.url, plan).await?;
    let text: String = (0..plan.words).map(|i| format!("w{i} ")).collect::<String>().trim_end().to_owned();
    let state_before = settled_state(&daemon.url, &chats, None).await?;
    until_unloaded(&daemon, plan).await?;
    let rss_before = settled_rss(daemon.pid()).await?;

    let counters = Arc::new(Counters::default());
    let deadline = Instant::now() + plan.duration;
    let mut tasks = Vec::new();
    for i in 0..plan.clients {
        let (url, chats, text, counters) = (daemon.url.clone(), chats.clone(), text.clone(), counters.clone());
        let seed = plan.seed.wrapping_mul(1_000_003).wrapping_add(i as u64);
        tasks.push(tokio::spawn(async move { client_life(i, &url, &chats, &text, seed, deadline, &counters).await }));
    }
    let mut peak = rss_before;
    while Instant::now() < deadline {
        peak = peak.max(vm_rss_kib(daemon.pid())?);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for task in tasks {
        task.await.context("a load client panicked")?.map_err(|e| e.context(warnings_of(&daemon)))?;
    }
    let state_after = settled_state(&daemon.url, &chats, Some(&counters)).await?;
    let rss_loaded_after = vm_rss_kib(daemon.pid())?;
    let loaded_after = until_unloaded(&daemon, plan).await?;
    let rss_after = settled_rss(daemon.pid()).await?;
    let c = &counters;
    Ok(LoadReport {
        connections: c.connections.load(Ordering::Relaxed),
        resumed_replay: c.resumed_replay.load(Ordering::Relaxed),
        resumed_snapshot: c.resumed_snapshot.load(Ordering::Relaxed),
        dropped: c.dropped.load(Ordering::Relaxed),
        turns: c.turns.load(Ordering::Relaxed),
        actions: c.actions.load(Ordering::Relaxed),
        checks: c.checks.load(Ordering::Relaxed),
        rss_before_kib: rss_before,
        rss_peak_kib: peak.max(rss_after).max(rss_loaded_after),
        rss_after_kib: rss_after,
        rss_loaded_after_kib: rss_loaded_after,
        loaded_after,
        state_before_bytes: state_before,
        state_after_bytes: state_after,
    })
}

/// The daemon's warnings and errors so far (its last 20), to say beside a client's failure.
fn warnings_of(daemon: &Daemon) -> String {
    let log = daemon.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
    let tail = &lines[lines.len().saturating_sub(20)..];
    format!("the daemon's warnings: {}", if tail.is_empty() { "none".to_owned() } else { tail.join("\n") })
}

/// Creates the sessions and runs one turn on each (so "before" has every structure warm).
async fn setup(url: &str, plan: &LoadPlan) -> anyhow::Result<Vec<String>> {
    let mut maker = TestClient::connect(url, "load-setup").await?;
    let mut chats = Vec::new();
    for _ in 0..plan.sessions {
        let (_session, chat) = maker.create_session("echo", None).await?;
        maker.turn(&chat, "warm up").await?;
        chats.push(chat);
    }
    maker.client.shutdown().await;
    Ok(chats)
}

/// Waits until no chat runs a turn, checks every chat's fold against its snapshot, and answers
/// the snapshots' total size.
async fn settled_state(url: &str, chats: &[String], counters: Option<&Counters>) -> anyhow::Result<usize> {
    let mut watcher = TestClient::connect(url, "load-watcher").await?;
    for chat in chats {
        watcher.subscribe(chat).await?;
    }
    let all = chats.to_vec();
    watcher
        .until("every chat to be idle", move |m| all.iter().all(|c| m.chat(c).is_some_and(|s| s.active_turn.is_none())))
        .await?;
    let mut bytes = 0;
    for chat in chats {
        watcher.check_against_snapshot(chat).await?;
        if let Some(counters) = counters {
            counters.checks.fetch_add(1, Ordering::Relaxed);
        }
        bytes +=
            watcher.mirror.states.get(chat).map(|s| serde_json::to_vec(s).map(|v| v.len())).transpose()?.unwrap_or(0);
    }
    watcher.client.shutdown().await;
    Ok(bytes)
}

/// Waits (a minute at most) until the daemon has unloaded every session, when it unloads idle
/// ones; answers how many it still holds.
async fn until_unloaded(daemon: &Daemon, plan: &LoadPlan) -> anyhow::Result<u64> {
    let mut loaded = daemon.loaded_sessions().await?;
    if plan.idle_unload_ms == 0 {
        return Ok(loaded);
    }
    let deadline = Instant::now() + Duration::from_millis(plan.idle_unload_ms * 3) + Duration::from_secs(60);
    while loaded > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        loaded = daemon.loaded_sessions().await?;
    }
    Ok(loaded)
}

/// The daemon's VmRSS once it stopped moving (three readings 300 ms apart within 1 MiB).
async fn settled_rss(pid: i32) -> anyhow::Result<u64> {
    let mut readings = vec![vm_rss_kib(pid)?];
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        readings.push(vm_rss_kib(pid)?);
        let last3 = &readings[readings.len().saturating_sub(3)..];
        if last3.len() == 3 && last3.iter().max().unwrap_or(&0) - last3.iter().min().unwrap_or(&0) < 1024 {
            break;
        }
    }
    readings.last().copied().ok_or_else(|| anyhow!("no reading"))
}

/// What a client keeps between its connections, to resume.
struct Kept {
    mirror: Mirror,
    last_seen: u64,
    watched: Vec<String>,
}

/// One client: connections one after another until the deadline, each watching a few chats,
/// starting turns on idle ones, and leaving after a random while, in good order (its folds checked)
/// or abruptly; the next connection resumes with `reconnect` half the time.
async fn client_life(
    index: usize,
    url: &str,
    chats: &[String],
    text: &str,
    seed: u64,
    deadline: Instant,
    counters: &Counters,
) -> anyhow::Result<()> {
    let mut rng = StdRng::seed_from_u64(seed);
    let client_id = format!("load-{index}");
    let mut kept: Option<Kept> = None;
    while Instant::now() < deadline {
        let resume = kept.take().filter(|_| rng.random_bool(0.5));
        let (mut client, base_seen) = match resume {
            Some(k) => resumed(url, &client_id, k, counters).await?,
            None => (fresh(url, &client_id, chats, &mut rng).await?, 0),
        };
        counters.connections.fetch_add(1, Ordering::Relaxed);
        let watched: Vec<String> = chats.iter().filter(|c| client.mirror.chat(c).is_some()).cloned().collect();
        let stay = Duration::from_millis(rng.random_range(1_000..8_000));
        let leave_at = (Instant::now() + stay).min(deadline);
        while Instant::now() < leave_at {
            for chat in &watched {
                let idle = client.mirror.chat(chat).is_some_and(|s| s.active_turn.is_none());
                if idle && rng.random_bool(0.3) {
                    client.send(chat, text).await?;
                    counters.turns.fetch_add(1, Ordering::Relaxed);
                }
            }
            let _ = client.next_event(Duration::from_millis(200)).await;
            client.pump()?;
        }
        let abrupt = rng.random_bool(0.3);
        if !abrupt {
            for chat in &watched {
                client.check_against_snapshot(chat).await.with_context(|| format!("{client_id} on {chat}"))?;
                counters.checks.fetch_add(1, Ordering::Relaxed);
            }
        }
        client.pump()?;
        counters.actions.fetch_add(client.envelopes.len(), Ordering::Relaxed);
        // Everything up to here is folded: a replay from the highest number seen continues it.
        let seen = client.envelopes.iter().map(|e| e.server_seq).max().unwrap_or(0).max(base_seen);
        let mirror = std::mem::take(&mut client.mirror);
        if abrupt {
            counters.dropped.fetch_add(1, Ordering::Relaxed);
            drop(client);
        } else {
            client.client.shutdown().await;
        }
        kept = Some(Kept { mirror, last_seen: seen, watched });
    }
    Ok(())
}

async fn fresh(url: &str, client_id: &str, chats: &[String], rng: &mut StdRng) -> anyhow::Result<TestClient> {
    let mut client = TestClient::connect(url, client_id).await?;
    let n = rng.random_range(2..=5).min(chats.len());
    let mut picked: Vec<&String> = Vec::new();
    while picked.len() < n {
        let chat = &chats[rng.random_range(0..chats.len())];
        if !picked.contains(&chat) {
            picked.push(chat);
        }
    }
    for chat in picked {
        client.subscribe(chat).await?;
    }
    Ok(client)
}

/// Reconnects with what the last connection kept; answers the client and the highest sequence
/// number its mirror now holds.
async fn resumed(url: &str, client_id: &str, kept: Kept, counters: &Counters) -> anyhow::Result<(TestClient, u64)> {
    let mut client = TestClient::connect_raw(url, client_id).await?;
    client.mirror = kept.mirror;
    let mut seen = kept.last_seen;
    let last_seen = i64::try_from(kept.last_seen)?;
    match client.client.reconnect(client_id.to_owned(), last_seen, kept.watched.clone()).await? {
        ReconnectResult::Replay(replay) => {
            counters.resumed_replay.fetch_add(1, Ordering::Relaxed);
            if !replay.missing.is_empty() {
                bail!("{client_id}: reconnect says {:?} are missing", replay.missing);
            }
            for env in &replay.actions {
                client.mirror.fold(env);
                seen = seen.max(env.server_seq);
            }
        }
        ReconnectResult::Snapshot(snapshots) => {
            counters.resumed_snapshot.fetch_add(1, Ordering::Relaxed);
            for snapshot in snapshots.snapshots {
                client.mirror.seed(snapshot);
            }
        }
    }
    Ok((client, seen))
}
