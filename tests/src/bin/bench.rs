//! `scripts/bench`: N clients subscribed to M sessions while echo streams. Reports delivered
//! actions per second and emit-to-receipt latency (p50/p99) for ahpd with its echo worker as a
//! child process and served in process, beside a baseline measured in the same run: a bare tokio
//! WebSocket fan-out of frames of the same shape. Prints the ratios; asserts nothing.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use tests::raw::RawSocket;
use tests::{Daemon, DaemonOptions, TestClient};

#[derive(Clone, Copy, Debug)]
struct Load {
    clients: usize,
    sessions: usize,
    turns: usize,
    words: usize,
}

#[derive(Debug)]
struct Measured {
    actions: usize,
    seconds: f64,
    /// CPU the daemon spent on the case, in ms (user + system, from /proc); 0 for the baseline.
    cpu_ms: f64,
    latencies_us: Vec<u64>,
}

impl Measured {
    fn rate(&self) -> f64 {
        self.actions as f64 / self.seconds
    }

    fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        let i = ((sorted.len() - 1) as f64 * p).round() as usize;
        sorted[i] as f64 / 1000.0
    }
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)).unwrap_or(0)
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What one client counted: action envelopes, latencies of stamped deltas, turns that ended.
#[derive(Default)]
struct Tally {
    actions: usize,
    latencies_us: Vec<u64>,
    ended: usize,
}

fn tally(tally: &mut Tally, frame: &str) {
    let Ok(value) = serde_json::from_str::<Value>(frame) else { return };
    if value.get("method").and_then(Value::as_str) != Some("action") {
        return;
    }
    tally.actions += 1;
    let action = &value["params"]["action"];
    if let Some(stamp) = action["_meta"]["ahpd.emittedAtUnixNs"].as_u64() {
        tally.latencies_us.push(now_ns().saturating_sub(stamp) / 1000);
    }
    if action["type"] == "chat/turnComplete" {
        tally.ended += 1;
    }
}

async fn baseline(load: Load) -> anyhow::Result<Measured> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (conn_tx, mut conn_rx) = mpsc::channel::<mpsc::Sender<String>>(load.clients);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let conn_tx = conn_tx.clone();
            tokio::spawn(async move {
                let Ok(ws) = tokio_tungstenite::accept_async(stream).await else { return };
                let (mut sink, _stream) = ws.split();
                let (tx, mut rx) = mpsc::channel::<String>(16_384);
                let _ = conn_tx.send(tx).await;
                while let Some(frame) = rx.recv().await {
                    if sink.send(Message::Text(frame.into())).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let expected_ends = load.sessions * load.turns;
    let mut readers = Vec::new();
    for _ in 0..load.clients {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/")).await?;
        readers.push(tokio::spawn(async move {
            let (_sink, mut stream) = ws.split();
            let mut t = Tally::default();
            while t.ended < expected_ends {
                match stream.next().await {
                    Some(Ok(Message::Text(text))) => tally(&mut t, &text),
                    Some(Ok(_)) => {}
                    _ => break,
                }
            }
            t
        }));
    }
    let mut senders = Vec::new();
    for _ in 0..load.clients {
        senders.push(conn_rx.recv().await.ok_or_else(|| anyhow::anyhow!("a baseline client did not connect"))?);
    }
    let senders = Arc::new(senders);
    let started = Instant::now();
    let mut producers = Vec::new();
    for s in 0..load.sessions {
        let senders = senders.clone();
        producers.push(tokio::spawn(async move {
            let mut seq = 0u64;
            for t in 0..load.turns {
                for w in 0..=load.words {
                    seq += 1;
                    let action = if w == load.words {
                        json!({ "type": "chat/turnComplete", "turnId": format!("t{t}"), "duration": 1 })
                    } else {
                        json!({ "type": "chat/delta", "turnId": format!("t{t}"), "partId": format!("t{t}:0"), "content": format!("word{w} "),
                                "_meta": { "ahpd.emittedAtUnixNs": now_ns() } })
                    };
                    let frame = json!({ "jsonrpc": "2.0", "method": "action",
                        "params": { "channel": format!("ahp-chat:/bench-{s}"), "action": action, "serverSeq": seq } })
                    .to_string();
                    for tx in senders.iter() {
                        let _ = tx.send(frame.clone()).await;
                    }
                }
            }
        }));
    }
    for p in producers {
        p.await?;
    }
    let mut measured = Measured { actions: 0, seconds: 0.0, cpu_ms: 0.0, latencies_us: Vec::new() };
    for r in readers {
        let t = r.await?;
        measured.actions += t.actions;
        measured.latencies_us.extend(t.latencies_us);
    }
    measured.seconds = started.elapsed().as_secs_f64();
    Ok(measured)
}

async fn through_ahpd(daemon: &Daemon, provider: &str, load: Load) -> anyhow::Result<Measured> {
    let mut driver = TestClient::connect(&daemon.url, &format!("driver-{provider}")).await?;
    let mut chats = Vec::new();
    for _ in 0..load.sessions {
        chats.push(driver.create_session(provider, None).await?.1);
    }
    let expected_ends = load.sessions * load.turns;
    let mut readers = Vec::new();
    for c in 0..load.clients {
        let mut ws = RawSocket::connect(&daemon.url).await?;
        let init = json!({ "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": format!("bench-{provider}-{c}") });
        ws.call(1, "initialize", init).await?;
        for (i, chat) in chats.iter().enumerate() {
            ws.call(10 + i as u64, "subscribe", json!({ "channel": chat })).await?;
        }
        readers.push(tokio::spawn(async move {
            let mut t = Tally::default();
            while t.ended < expected_ends {
                match ws.recv().await {
                    Ok(value) => tally(&mut t, &value.to_string()),
                    Err(_) => break,
                }
            }
            t
        }));
    }
    let text: String = (0..load.words).map(|w| format!("word{w} ")).collect();
    let cpu_before = cpu_ms(daemon.pid());
    let started = Instant::now();
    let mut drivers = Vec::new();
    for chat in chats.clone() {
        let mut client = TestClient::connect(&daemon.url, &format!("turns-{chat}")).await?;
        client.subscribe(&chat).await?;
        let text = text.clone();
        drivers.push(tokio::spawn(async move {
            for _ in 0..load.turns {
                client.turn(&chat, &text).await?;
            }
            anyhow::Ok(())
        }));
    }
    for d in drivers {
        d.await??;
    }
    let mut measured = Measured { actions: 0, seconds: 0.0, cpu_ms: 0.0, latencies_us: Vec::new() };
    for r in readers {
        let t = r.await?;
        measured.actions += t.actions;
        measured.latencies_us.extend(t.latencies_us);
    }
    measured.seconds = started.elapsed().as_secs_f64();
    measured.cpu_ms = cpu_ms(daemon.pid()) - cpu_before;
    driver.client.shutdown().await;
    Ok(measured)
}

fn row(name: &str, m: &Measured, baseline: Option<&Measured>) {
    let ratio = baseline.map(|b| format!("{:.2}x baseline", m.rate() / b.rate())).unwrap_or_default();
    println!(
        "{name:<28} {:>12.0} {:>9.2} {:>9.2} {:>9.2} {:>9.0}   {ratio}",
        m.rate(),
        m.percentile_ms(0.5),
        m.percentile_ms(0.99),
        m.seconds,
        m.cpu_ms
    );
}

/// The CPU `pid` has spent so far (user + system), in ms, from /proc; 0 when unreadable.
fn cpu_ms(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command (which may hold spaces) are split from its closing parenthesis.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat; 11 and 12 after the state field here.
    (ticks(11) + ticks(12)) * 1000.0 / 100.0
}

/// Seeds `count` sessions (each with one completed turn) into the store under `home`.
fn seed_store(home: &std::path::Path, count: usize) -> anyhow::Result<()> {
    use ahpd::store::{ChatRecord, SessionRecord, Store, TurnRecord};
    let mut store = Store::open(&home.join("data/ahpd/sessions.db"))?;
    store.in_transaction(|store| {
        for i in 0..count {
            let uri = format!("ahp-session:/seeded-{i:05}");
            let chat = format!("ahp-chat:/seeded-{i:05}");
            let at = format!("2026-01-01T00:{:02}:{:02}.{:03}Z", (i / 60000) % 60, (i / 1000) % 60, i % 1000);
            let record = SessionRecord {
                uri: uri.clone(),
                provider: "echo".into(),
                created_at: at.clone(),
                title: format!("seeded {i}"),
                flags: 0,
                working_directory: None,
                config: Default::default(),
                default_chat: Some(chat.clone()),
                owner: None,
                parent: None,
                depth: 0,
                meta: None,
                changes: None,
            };
            let summary = json!({ "provider": "echo", "title": record.title, "status": 1, "resource": uri,
                "createdAt": at, "modifiedAt": at, "defaultChat": chat });
            store.save_session(&record, &summary)?;
            store.save_chat(&ChatRecord {
                uri: chat.clone(),
                session: uri.clone(),
                position: 0,
                title: record.title.clone(),
                conversation_id: format!("seeded-{i:05}"),
                started_in_backend: true,
                origin: None,
                queued: Vec::new(),
                steering: None,
                draft: None,
                flags: 0,
                modified_at: Some(at.clone()),
                harness: None,
                working_directory: None,
                changes: None,
                cut: None,
            })?;
            let turn = serde_json::from_value(json!({ "id": format!("t{i}"), "startedAt": at, "duration": 5,
                "message": { "text": "hi", "origin": { "kind": "user" } },
                "responseParts": [{ "kind": "markdown", "id": "p", "content": "hi" }], "state": "complete" }))?;
            store.save_turn(&chat, 0, &TurnRecord { turn, transcript_id: None, sender: None })?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Start-up (spawn to announcement) and the first page of `listSessions`, over a store of `count`.
async fn store_case(count: usize) -> anyhow::Result<(f64, f64)> {
    let home = tempfile::Builder::new().prefix("ahpd-bench-store-").tempdir()?;
    seed_store(home.path(), count)?;
    let mut startups = Vec::new();
    let mut pages = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let mut daemon = Daemon::start_in(home.path(), DaemonOptions::default()).await?;
        startups.push(started.elapsed().as_secs_f64() * 1000.0);
        let client = TestClient::connect(&daemon.url, "bench").await?;
        let asked = Instant::now();
        let page = client.request("listSessions", json!({ "channel": "ahp-root://", "limit": 50 })).await?;
        pages.push(asked.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(page["items"].as_array().map(Vec::len) == Some(count.min(50)), "a full first page");
        client.client.shutdown().await;
        daemon.terminate().await?;
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok((median(&mut startups), median(&mut pages)))
}

async fn store_bench() -> anyhow::Result<()> {
    let small = store_case(10).await?;
    let large = store_case(10_000).await?;
    println!("{:<28} {:>14} {:>22}", "stored sessions", "start-up ms", "listSessions page ms");
    println!("{:<28} {:>14.1} {:>22.2}", "10", small.0, small.1);
    println!("{:<28} {:>14.1} {:>22.2}", "10 000", large.0, large.1);
    println!("10 000 vs 10: start-up {:.2}x, first page {:.2}x", large.0 / small.0, large.1 / small.1);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "store") {
        return store_bench().await;
    }
    let load = Load {
        clients: arg("--clients", 4),
        sessions: arg("--sessions", 8),
        turns: arg("--turns", 3),
        words: arg("--words", 300),
    };
    let echo = json!({ "paceMs": arg("--pace-ms", 0), "chunkWords": 1, "stamp": true });
    let mut config = json!({ "agents": {
        "echo-process": { "kind": "echo", "options": echo },
        "echo-inprocess": { "kind": "echo", "inProcess": true, "options": echo } } });
    let window = std::env::args().position(|a| a == "--delta-window-ms").map(|_| arg("--delta-window-ms", 0));
    if let Some(window) = window {
        config["deltaWindowMs"] = json!(window);
        println!("deltaWindowMs: {window}");
    }
    println!(
        "load: {} clients x {} sessions x {} turns x {} words ({} deltas per client)",
        load.clients,
        load.sessions,
        load.turns,
        load.words,
        load.sessions * load.turns * load.words
    );
    let base = baseline(load).await?;
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let inproc = through_ahpd(&daemon, "echo-inprocess", load).await?;
    let process = through_ahpd(&daemon, "echo-process", load).await?;
    println!("{:<28} {:>12} {:>9} {:>9} {:>9} {:>9}", "", "actions/s", "p50 ms", "p99 ms", "all s", "cpu ms");
    row("baseline: bare ws fan-out", &base, None);
    row("ahpd, in-process worker", &inproc, Some(&base));
    row("ahpd, worker process", &process, Some(&base));
    println!("worker process vs in-process worker: {:.2}x throughput", process.rate() / inproc.rate());
    Ok(())
}
