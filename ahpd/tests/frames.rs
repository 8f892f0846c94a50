//! The fuzz targets' properties as plain tests, over inputs a seeded generator mutates from the
//! fuzz seeds (`fuzz/seeds/`), so every `cargo test` runs them even where cargo-fuzz cannot: the
//! AHP frame handler answers every frame with JSON-RPC 2.0 and never hangs or panics, and the
//! worker-protocol decoder round-trips what it accepts and refuses the rest without panicking.

use std::path::{Path, PathBuf};

use ahpd::bare::BareHost;
use ahpd::host::HostConfig;

/// A small deterministic generator (xorshift64*), so a failure names the seed that made it.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % (n.max(1) as u64)).unwrap_or(0)
    }
}

const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "null",
    "true",
    "-1",
    "1e999",
    "18446744073709551616",
    "\"\\u0000\"",
    "\"ahp-root://\"",
    "\"ahp-session:/fuzz\"",
    "\"ahp-chat:/fuzz\"",
    "\"channel\"",
    "\"id\"",
    "\"method\"",
    "\"params\"",
    "\"action\"",
    "\"type\"",
    "\"turnId\"",
    "\"t1\"",
    "\n",
    "\u{feff}",
    "\u{1F600}",
];

/// One mutation of `input`: a byte flipped, a span cut or repeated, a token spliced in.
fn mutate(gen: &mut Gen, input: &mut Vec<u8>) {
    match gen.below(5) {
        0 if !input.is_empty() => {
            let i = gen.below(input.len());
            input[i] ^= 1 << gen.below(8);
        }
        1 if !input.is_empty() => {
            let start = gen.below(input.len());
            let end = (start + gen.below(32)).min(input.len());
            input.drain(start..end);
        }
        2 if !input.is_empty() => {
            let start = gen.below(input.len());
            let end = (start + gen.below(64)).min(input.len());
            let span = input[start..end].to_vec();
            for _ in 0..gen.below(4) {
                input.splice(start..start, span.iter().copied());
            }
        }
        _ => {
            let token = TOKENS[gen.below(TOKENS.len())].as_bytes();
            let at = gen.below(input.len() + 1);
            input.splice(at..at, token.iter().copied());
        }
    }
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds").join(target);
    let mut paths: Vec<PathBuf> =
        std::fs::read_dir(&dir).expect("fuzz/seeds").filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    paths.into_iter().map(|p| std::fs::read(p).expect("a seed")).collect()
}

/// The fuzz target's reading of an input: an odd first byte starts with `initialize`, the rest is
/// one frame per line.
fn frames_of(data: &[u8]) -> Vec<String> {
    let mut frames = Vec::new();
    if data.first().is_some_and(|b| b & 1 == 1) {
        frames.push(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"channel":"ahp-root://","protocolVersions":["1.0.0"],"clientId":"fuzz","initialSubscriptions":["ahp-root://","ahp-session:/fuzz","ahp-chat:/fuzz"]}}"#.to_owned());
    }
    let body = data.get(1..).unwrap_or_default();
    frames.extend(String::from_utf8_lossy(body).split('\n').filter(|l| !l.is_empty()).map(str::to_owned));
    frames
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_frames_are_answered_with_json_rpc_and_never_hang() {
    let dir = tempfile::tempdir().expect("temp dir");
    let host = BareHost::start(dir.path(), true, HostConfig::default()).await.expect("a bare host");
    let seeds = seeds("ahp_frames");
    let mut gen = Gen(0x05ee_da11_ce0f_00d5);
    for round in 0..1500 {
        let mut input = seeds[gen.below(seeds.len())].clone();
        for _ in 0..1 + gen.below(6) {
            mutate(&mut gen, &mut input);
        }
        host.ensure_session("fuzz").await.expect("the session exists");
        let frames = frames_of(&input);
        let answered = tokio::time::timeout(std::time::Duration::from_secs(30), host.feed(&frames)).await;
        let answers =
            answered.unwrap_or_else(|_| panic!("round {round} hung on {:?}", String::from_utf8_lossy(&input)));
        if let Err(e) = answers {
            panic!("round {round} ({:?}): {e}", String::from_utf8_lossy(&input));
        }
    }
    host.stop().await;
}

#[tokio::test]
async fn the_input_that_once_deadlocked_the_host_is_answered() {
    let dir = tempfile::tempdir().expect("temp dir");
    let host = BareHost::start(dir.path(), false, HostConfig::default()).await.expect("a bare host");
    let frames = frames_of(
        b"\x01{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"sessionConfigCompletions\",\"params\":{\"channel\":\"ahp-root://\",\"provider\":\"nobody\",\"property\":\"x\"}}",
    );
    let answers = tokio::time::timeout(std::time::Duration::from_secs(30), host.feed(&frames))
        .await
        .expect("answered, not deadlocked")
        .expect("JSON-RPC");
    let refused = answers.iter().find(|a| a["id"] == 3).expect("an answer to 3");
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
    host.stop().await;
}

#[test]
fn mutated_worker_lines_round_trip_or_are_refused() {
    let seeds = seeds("worker_frame");
    let mut gen = Gen(0xdec0_de5e_ed00_0001);
    for _ in 0..20_000 {
        let mut input = seeds[gen.below(seeds.len())].clone();
        for _ in 0..1 + gen.below(6) {
            mutate(&mut gen, &mut input);
        }
        let line = String::from_utf8_lossy(&input);
        if let Ok(frame) = protocol::Frame::decode(&line) {
            let again = protocol::Frame::decode(frame.encode().trim_end_matches('\n')).expect("re-decodes");
            assert_eq!(again, frame, "{line:?} round-trips");
        }
    }
    let deep =
        format!("{{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(protocol::Frame::decode(&deep).is_err(), "nesting past serde's limit is refused, not a stack overflow");
}
