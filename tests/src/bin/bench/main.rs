//! `scripts/bench`: what the daemon costs, each figure beside a baseline from the same run,
//! printed as ratios; asserts nothing (docs/benchmarks.md).
//!
//! - (no subcommand) the streaming fan-out at saturation: N clients subscribed to M chats while
//!   echo streams unpaced; `realistic`: the same at a model's pace (20 clients, 50 chats, 50
//!   deltas a second each, the default `deltaWindowMs`). Delivered actions/s, emit→receipt
//!   p50/p99/p999, connections cut, and the CPU of the daemon and of its workers per committed
//!   action and per envelope, against a bare WebSocket fan-out server's CPU per frame; `--tail`
//!   prints where in the run the deltas over 5 ms fell;
//! - `memory`: resident memory idle, over stored and loaded sessions, and per backend process;
//! - `store`: start-up and the first page over 10 000 stored sessions;
//! - `remote`: the fan-out through a remote host's link against the remote daemon itself;
//! - `bare-server`: the baseline server itself, run by the others in a process of its own.

mod fanout;
mod memory;
mod procfs;
mod store;

use serde_json::json;

use fanout::{Load, Measured};
use tests::{Daemon, DaemonOptions};

/// `--name N` from the command line, else `default`.
fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn has(word: &str) -> bool {
    std::env::args().skip(1).any(|a| a == word)
}

/// The load from the flags, with the preset's defaults.
fn load(realistic: bool) -> Load {
    let (clients, sessions, turns, words, pace) = if realistic { (20, 50, 1, 250, 20) } else { (4, 8, 3, 300, 0) };
    Load {
        clients: arg("--clients", clients) as usize,
        sessions: arg("--sessions", sessions) as usize,
        turns: arg("--turns", turns) as usize,
        words: arg("--words", words) as usize,
        pace_ms: arg("--pace-ms", pace),
    }
}

fn row(name: &str, m: &Measured) {
    println!(
        "{name:<26} {:>10.0} {:>7.2} {:>7.2} {:>7.2} {:>4} {:>6.2} {:>8.0} {:>8.0} {:>9.2} {:>9.2} {:>9.2}",
        m.rate(),
        m.percentile_ms(0.5),
        m.percentile_ms(0.99),
        m.percentile_ms(0.999),
        m.cut,
        m.seconds,
        m.server_cpu_ms,
        m.worker_cpu_ms,
        m.server_us_per_action(),
        m.server_us_per_envelope(),
        m.worker_us_per_action(),
    );
}

/// Where the run's tail fell (`--tail`): the 100 ms windows with the most deltas over 5 ms.
fn tail(name: &str, m: &Measured) {
    let windows = m.tail_windows(5.0, 12);
    let shown: Vec<String> = windows.iter().map(|(at, n, max)| format!("{at}ms:{n}(max {max:.0})")).collect();
    println!("{name}: deltas over 5 ms by 100 ms window of the run: {}", shown.join(" "));
}

fn ratios(name: &str, m: &Measured, base: &Measured) {
    println!(
        "{name}: throughput {:.2}x baseline; server CPU per envelope {:.2}x the bare server's per frame",
        m.rate() / base.rate(),
        m.server_us_per_envelope() / base.server_us_per_envelope()
    );
}

async fn fanout_bench(realistic: bool) -> anyhow::Result<()> {
    let load = load(realistic);
    let echo = json!({ "paceMs": load.pace_ms, "chunkWords": 1, "stamp": true });
    let mut config = json!({ "agents": {
        "echo-process": tests::agents::echo_with(echo.clone()),
        "echo-inprocess": tests::agents::in_process(tests::agents::echo_with(echo.clone())) } });
    // The harness runs tests with every delta its own action; the realistic preset keeps the
    // daemon's default window unless told.
    let window = if realistic { arg("--delta-window-ms", 50) } else { arg("--delta-window-ms", 0) };
    config["deltaWindowMs"] = json!(window);
    println!(
        "load: {} clients x {} sessions x {} turns x {} words, pace {} ms ({} deltas per client), deltaWindowMs {window}",
        load.clients,
        load.sessions,
        load.turns,
        load.words,
        load.pace_ms,
        load.sessions * load.turns * load.words
    );
    let base = fanout::baseline(load).await?;
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let process = fanout::through_ahpd(&daemon, "echo-process", load).await?;
    let inproc =
        if has("--no-inprocess") { None } else { Some(fanout::through_ahpd(&daemon, "echo-inprocess", load).await?) };
    println!(
        "{:<26} {:>10} {:>7} {:>7} {:>7} {:>4} {:>6} {:>8} {:>8} {:>9} {:>9} {:>9}",
        "",
        "actions/s",
        "p50 ms",
        "p99 ms",
        "p999 ms",
        "cut",
        "all s",
        "srv ms",
        "wrk ms",
        "srv us/a",
        "srv us/e",
        "wrk us/a"
    );
    row("baseline: bare ws fan-out", &base);
    row("ahpd, worker process", &process);
    if let Some(inproc) = &inproc {
        row("ahpd, in-process worker", inproc);
    }
    println!(
        "(srv: the server process's CPU; wrk: its worker processes'; /a per committed action, /e per envelope sent; \
         committed {} actions, {} deltas emitted)",
        process.committed,
        load.sessions * load.turns * load.words
    );
    if has("--tail") {
        tail("baseline", &base);
        tail("ahpd, worker process", &process);
    }
    ratios("ahpd, worker process", &process, &base);
    if let Some(inproc) = &inproc {
        ratios("ahpd, in-process worker", inproc, &base);
    }
    Ok(())
}

/// `bench remote`: the same fan-out through a remote host's link (issue 31): clients of a local
/// daemon watching sessions it relays from a remote daemon (`remotes.remote`, the URL form), beside
/// clients of the remote daemon itself, in the same run. The local daemon's CPU is the hop's cost.
async fn remote_bench() -> anyhow::Result<()> {
    let load = load(has("realistic"));
    let echo = json!({ "paceMs": load.pace_ms, "chunkWords": 1, "stamp": true });
    let window = if has("realistic") { arg("--delta-window-ms", 50) } else { arg("--delta-window-ms", 0) };
    let remote_config =
        json!({ "agents": { "echo": tests::agents::echo_with(echo.clone()) }, "deltaWindowMs": window });
    let remote = Daemon::start_with(DaemonOptions::with_config(remote_config)).await?;
    let token_file = tests::remotes::token_file(&remote.home);
    let local_config = json!({ "remotes": { "remote": { "url": remote.url.clone(), "tokenFile": token_file } },
        "deltaWindowMs": window });
    let local = Daemon::start_with(DaemonOptions::with_config(local_config)).await?;
    let mut watcher = tests::TestClient::connect(&local.url, "bench-remote-watcher").await?;
    tests::remotes::until_connected(&mut watcher).await?;
    println!(
        "load: {} clients x {} sessions x {} turns x {} words, pace {} ms, deltaWindowMs {window}",
        load.clients, load.sessions, load.turns, load.words, load.pace_ms
    );
    let direct = fanout::through_ahpd(&remote, "echo", load).await?;
    let hop = fanout::through_ahpd(&local, "echo@remote", load).await?;
    println!(
        "{:<26} {:>10} {:>7} {:>7} {:>7} {:>4} {:>6} {:>8} {:>8} {:>9} {:>9} {:>9}",
        "",
        "actions/s",
        "p50 ms",
        "p99 ms",
        "p999 ms",
        "cut",
        "all s",
        "srv ms",
        "wrk ms",
        "srv us/a",
        "srv us/e",
        "wrk us/a"
    );
    row("direct: the remote daemon", &direct);
    row("through the local daemon", &hop);
    println!("(direct srv: the remote daemon's CPU; through srv: the local daemon's, relaying what the remote says)");
    println!(
        "through a remote link: throughput {:.2}x direct; p50 {:+.2} ms, p99 {:+.2} ms; the relaying daemon's CPU per envelope {:.2}x the remote daemon's",
        hop.rate() / direct.rate(),
        hop.percentile_ms(0.5) - direct.percentile_ms(0.5),
        hop.percentile_ms(0.99) - direct.percentile_ms(0.99),
        hop.server_us_per_envelope() / direct.server_us_per_envelope()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if has("remote") {
        return remote_bench().await;
    }
    if has("bare-server") {
        return fanout::bare_server(load(false)).await;
    }
    if has("store") {
        return store::store_bench().await;
    }
    if has("memory") {
        return memory::memory_bench().await;
    }
    fanout_bench(has("realistic")).await
}
