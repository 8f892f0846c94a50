//! Fuzzes the AHP frame decoder and dispatcher: each input is split into lines, each line is one
//! text frame to `Host::handle_frame` on a fresh connection of a host with no worker process (the
//! echo agent served in this process, a session `ahp-session:/fuzz` with chat `ahp-chat:/fuzz`).
//! An input whose first byte is odd starts with a valid `initialize`, so the fuzzer reaches the
//! commands behind the handshake at once. Every message the host sends back must be JSON-RPC 2.0.
#![no_main]

use std::sync::Mutex;

use ahpd::bare::BareHost;
use ahpd::host::HostConfig;
use libfuzzer_sys::fuzz_target;

/// Inputs a host serves before it is replaced, so what fuzzed inputs created does not pile up.
const INPUTS_PER_HOST: usize = 2000;

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"channel":"ahp-root://","protocolVersions":["1.0.0"],"clientId":"fuzz","initialSubscriptions":["ahp-root://","ahp-session:/fuzz","ahp-chat:/fuzz"]}}"#;

struct Harness {
    runtime: tokio::runtime::Runtime,
    host: Option<(BareHost, tempfile::TempDir)>,
    served: usize,
}

static HARNESS: Mutex<Option<Harness>> = Mutex::new(None);

fn fresh_host(runtime: &tokio::runtime::Runtime) -> (BareHost, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temp folder");
    let host = runtime.block_on(BareHost::start(dir.path(), true, HostConfig::default())).expect("a bare host starts");
    (host, dir)
}

fuzz_target!(|data: &[u8]| {
    let mut guard = agent_runner::sync::lock(&HARNESS);
    let harness = guard.get_or_insert_with(|| Harness {
        runtime: tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime"),
        host: None,
        served: 0,
    });
    if harness.served >= INPUTS_PER_HOST {
        if let Some((old, _dir)) = harness.host.take() {
            harness.runtime.block_on(old.stop());
        }
        harness.served = 0;
    }
    if harness.host.is_none() {
        harness.host = Some(fresh_host(&harness.runtime));
    }
    harness.served += 1;
    let Some((host, _)) = harness.host.as_ref() else { return };
    let mut frames = Vec::new();
    if data.first().is_some_and(|b| b & 1 == 1) {
        frames.push(INITIALIZE.to_owned());
    }
    let body = data.get(1..).unwrap_or_default();
    frames.extend(String::from_utf8_lossy(body).split('\n').filter(|l| !l.is_empty()).map(str::to_owned));
    harness.runtime.block_on(async {
        host.ensure_session("fuzz").await.expect("the fuzz session exists");
        if let Err(e) = host.feed(&frames).await {
            panic!("{e}");
        }
    });
});
