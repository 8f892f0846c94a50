//! The streaming fan-out: N raw WebSocket clients subscribed to M chats while echo streams K turns
//! of W words, one delta a word, each stamped when emitted. Measured through ahpd (echo in process
//! or as a worker process) and through a bare WebSocket fan-out server run in a process of its own
//! (`bench bare-server`), so each side's CPU is read from `/proc` on its own.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::procfs::{cpu_ms, TreeCpu};
use tests::raw::RawSocket;
use tests::{Daemon, TestClient};

/// The load: clients, chats each subscribes to, turns per chat, words (deltas) per turn, and the
/// pause between deltas (0: unpaced).
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub clients: usize,
    pub sessions: usize,
    pub turns: usize,
    pub words: usize,
    pub pace_ms: u64,
}

impl Load {
    fn expected_ends(&self) -> usize {
        self.sessions * self.turns
    }

    /// The flags that give this load to `bench bare-server`.
    fn args(&self) -> Vec<String> {
        let pairs = [
            ("--clients", self.clients as u64),
            ("--sessions", self.sessions as u64),
            ("--turns", self.turns as u64),
            ("--words", self.words as u64),
            ("--pace-ms", self.pace_ms),
        ];
        pairs.iter().flat_map(|(k, v)| [k.to_string(), v.to_string()]).collect()
    }
}

/// What one case measured.
#[derive(Debug, Default)]
pub struct Measured {
    /// Action envelopes the measuring clients received.
    pub delivered: usize,
    /// Actions the server committed (each goes to every client): `delivered / clients`.
    pub committed: usize,
    /// Envelopes the server sent in all, the measuring clients' and the drivers' (through ahpd the
    /// client driving each chat also watches it).
    pub sent: usize,
    /// From the first envelope received to the last, across all clients.
    pub seconds: f64,
    /// CPU the server process spent (user + system), ms.
    pub server_cpu_ms: f64,
    /// CPU its worker processes spent, ms.
    pub worker_cpu_ms: f64,
    /// Emit-to-receipt latencies of stamped deltas, µs.
    pub latencies_us: Vec<u64>,
    /// When each of those was received, µs after the first envelope of the run.
    pub received_us: Vec<u64>,
    /// Connections that ended before every turn did (closed by the server, or an error).
    pub cut: usize,
}

impl Measured {
    pub fn rate(&self) -> f64 {
        self.delivered as f64 / self.seconds
    }

    pub fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        let i = ((sorted.len() - 1) as f64 * p).round() as usize;
        sorted[i] as f64 / 1000.0
    }

    /// Where in the run the tail fell: per 100 ms of the run, the deltas that took longer than
    /// `over_ms` and the longest, for the `worst` such windows, in time order.
    pub fn tail_windows(&self, over_ms: f64, worst: usize) -> Vec<(u64, usize, f64)> {
        let mut windows: std::collections::BTreeMap<u64, (usize, u64)> = std::collections::BTreeMap::new();
        for (latency, at) in self.latencies_us.iter().zip(&self.received_us) {
            if *latency as f64 / 1000.0 > over_ms {
                let w = windows.entry(at / 100_000).or_default();
                w.0 += 1;
                w.1 = w.1.max(*latency);
            }
        }
        let mut by_count: Vec<(u64, usize, f64)> =
            windows.into_iter().map(|(w, (n, max))| (w * 100, n, max as f64 / 1000.0)).collect();
        by_count.sort_by_key(|w| std::cmp::Reverse(w.1));
        by_count.truncate(worst);
        by_count.sort_by_key(|w| w.0);
        by_count
    }

    /// Server CPU per envelope it sent, µs.
    pub fn server_us_per_envelope(&self) -> f64 {
        self.server_cpu_ms * 1000.0 / self.sent as f64
    }

    /// Server CPU per action it committed, µs.
    pub fn server_us_per_action(&self) -> f64 {
        self.server_cpu_ms * 1000.0 / self.committed as f64
    }

    /// Worker CPU per action the server committed, µs.
    pub fn worker_us_per_action(&self) -> f64 {
        self.worker_cpu_ms * 1000.0 / self.committed as f64
    }

    fn add(&mut self, t: Tally, origin: Option<Instant>) {
        self.delivered += t.actions;
        if let Some(origin) = origin {
            let since =
                |at: Instant| u64::try_from(at.saturating_duration_since(origin).as_micros()).unwrap_or(u64::MAX);
            self.received_us.extend(t.received.iter().map(|at| since(*at)));
        }
        self.latencies_us.extend(t.latencies_us);
        self.cut += usize::from(t.cut);
    }
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)).unwrap_or(0)
}

/// What one client counted: action envelopes, latencies of stamped deltas, turns that ended, when
/// the first and last envelope came, and whether its connection ended early.
#[derive(Default)]
struct Tally {
    actions: usize,
    latencies_us: Vec<u64>,
    received: Vec<Instant>,
    ended: usize,
    first: Option<Instant>,
    last: Option<Instant>,
    cut: bool,
}

impl Tally {
    /// Counts one frame, reading only what it needs from the text (a full parse per frame would
    /// spend the cores the server is measured on).
    fn count(&mut self, frame: &str) {
        if !frame.starts_with(r#"{"jsonrpc":"2.0","method":"action""#) {
            return;
        }
        let now = Instant::now();
        self.first.get_or_insert(now);
        self.last = Some(now);
        self.actions += 1;
        if let Some(stamp) = number_after(frame, r#""ahpd.emittedAtUnixNs":"#) {
            self.latencies_us.push(now_ns().saturating_sub(stamp) / 1000);
            self.received.push(now);
        }
        if frame.contains(r#""type":"chat/turnComplete""#) {
            self.ended += 1;
        }
    }
}

fn number_after(text: &str, key: &str) -> Option<u64> {
    let at = text.find(key)? + key.len();
    let digits: &str = &text[at..];
    let end = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// The span from the first envelope any client got to the last.
fn span(tallies: &[Tally]) -> f64 {
    let first = tallies.iter().filter_map(|t| t.first).min();
    let last = tallies.iter().filter_map(|t| t.last).max();
    match (first, last) {
        (Some(a), Some(b)) => (b - a).as_secs_f64(),
        _ => f64::NAN,
    }
}

/// `bench bare-server`: the baseline, a bare tokio WebSocket fan-out with no state and no
/// reducers. Prints `listening ADDR`, waits for `clients` connections, sends every session's turns
/// to each of them (paced like echo when `pace_ms` is set), then stays until its stdin closes so
/// its CPU can be read.
pub async fn bare_server(load: Load) -> anyhow::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    println!("listening {}", listener.local_addr()?);
    let mut senders = Vec::new();
    let mut writers = Vec::new();
    for _ in 0..load.clients {
        let (stream, _) = listener.accept().await?;
        // As the daemon does: without it a small frame can wait for the client's delayed ACK.
        stream.set_nodelay(true)?;
        let ws = tokio_tungstenite::accept_async(stream).await?;
        let (tx, mut rx) = mpsc::channel::<String>(16_384);
        senders.push(tx);
        writers.push(tokio::spawn(async move {
            let (mut sink, _stream) = ws.split();
            while let Some(frame) = rx.recv().await {
                if sink.send(Message::Text(frame.into())).await.is_err() {
                    break;
                }
            }
            let _ = sink.close().await;
        }));
    }
    let senders = Arc::new(senders);
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
                        if load.pace_ms > 0 {
                            tokio::time::sleep(Duration::from_millis(load.pace_ms)).await;
                        }
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
    drop(senders);
    for w in writers {
        w.await?;
    }
    let mut rest = Vec::new();
    tokio::io::stdin().read_to_end(&mut rest).await?;
    Ok(())
}

/// The baseline through `bench bare-server` run as a child process.
pub async fn baseline(load: Load) -> anyhow::Result<Measured> {
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .arg("bare-server")
        .args(load.args())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).ok_or_else(|| anyhow::anyhow!("no pid"))?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let line = lines.next_line().await?.ok_or_else(|| anyhow::anyhow!("the bare server said nothing"))?;
    let addr = line.strip_prefix("listening ").ok_or_else(|| anyhow::anyhow!("the bare server said {line}"))?;
    let cpu_before = cpu_ms(pid).0;
    let mut readers = Vec::new();
    for _ in 0..load.clients {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/")).await?;
        readers.push(tokio::spawn(async move {
            let (_sink, mut stream) = ws.split();
            let mut t = Tally::default();
            while t.ended < load.expected_ends() {
                match stream.next().await {
                    Some(Ok(Message::Text(text))) => t.count(&text),
                    Some(Ok(_)) => {}
                    _ => {
                        t.cut = true;
                        break;
                    }
                }
            }
            t
        }));
    }
    let mut tallies = Vec::new();
    for r in readers {
        tallies.push(r.await?);
    }
    let mut measured = Measured { server_cpu_ms: cpu_ms(pid).0 - cpu_before, ..Measured::default() };
    measured.seconds = span(&tallies);
    let origin = tallies.iter().filter_map(|t| t.first).min();
    for t in tallies {
        measured.add(t, origin);
    }
    measured.committed = measured.delivered / load.clients.max(1);
    measured.sent = measured.delivered;
    drop(child.stdin.take());
    child.wait().await?;
    Ok(measured)
}

/// The load through `daemon`, on `provider` (an echo entry).
pub async fn through_ahpd(daemon: &Daemon, provider: &str, load: Load) -> anyhow::Result<Measured> {
    let mut driver = TestClient::connect(&daemon.url, &format!("driver-{provider}")).await?;
    let mut chats = Vec::new();
    for _ in 0..load.sessions {
        chats.push(driver.create_session(provider, None).await?.1);
    }
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
            while t.ended < load.expected_ends() {
                match ws.next_text().await {
                    Ok(Some(text)) => t.count(&text),
                    Ok(None) | Err(_) => {
                        t.cut = true;
                        break;
                    }
                }
            }
            t
        }));
    }
    let text: String = (0..load.words).map(|w| format!("word{w} ")).collect();
    let mut turn_clients = Vec::new();
    for chat in &chats {
        let mut client = TestClient::connect(&daemon.url, &format!("turns-{chat}")).await?;
        client.subscribe(chat).await?;
        turn_clients.push((client, chat.clone()));
    }
    let cpu_before = cpu_ms(daemon.pid()).0;
    let workers_before = TreeCpu::of(daemon.pid());
    let mut drivers = Vec::new();
    for (mut client, chat) in turn_clients {
        let text = text.clone();
        drivers.push(tokio::spawn(async move {
            for _ in 0..load.turns {
                client.turn(&chat, &text).await?;
            }
            anyhow::Ok(client)
        }));
    }
    // The drivers leave once every reader has all it waits for: 50 connections closing are not
    // part of the load, and would otherwise land among the last deltas of the chats still going.
    let mut finished = Vec::new();
    for d in drivers {
        finished.push(d.await??);
    }
    let mut tallies = Vec::new();
    for r in readers {
        tallies.push(r.await?);
    }
    for client in finished {
        client.client.shutdown().await;
    }
    let mut measured = Measured {
        server_cpu_ms: cpu_ms(daemon.pid()).0 - cpu_before,
        worker_cpu_ms: workers_before.spent_until(&TreeCpu::of(daemon.pid())),
        seconds: span(&tallies),
        ..Measured::default()
    };
    let origin = tallies.iter().filter_map(|t| t.first).min();
    for t in tallies {
        measured.add(t, origin);
    }
    measured.committed = measured.delivered / load.clients.max(1);
    // Each chat's driver watches it too.
    measured.sent = measured.delivered + measured.committed;
    driver.client.shutdown().await;
    Ok(measured)
}
