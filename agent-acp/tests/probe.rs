//! The worker's startup probe against the scripted ACP agent, driven as the daemon drives it: the
//! first `agent/probe` opens a short-lived session of the agent's own and answers its models and
//! commands, the schema follows with its modes and options, and the agent is stopped; a probe the
//! agent refuses is an error (so the daemon keeps what it remembered), not an empty offer.

mod common;

use common::*;
use protocol::methods::parent as methods;
use serde_json::json;

/// The scripted agents still running under this test's process.
fn fake_agents_left() -> Vec<String> {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let parent = stat.rsplit(')').next()?.split_whitespace().nth(1)?.to_owned();
            let cmdline = std::fs::read_to_string(e.path().join("cmdline")).ok()?.replace('\0', " ");
            (parent == me && cmdline.contains("fake_acp_agent.py")).then_some(cmdline)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_probe_opens_a_session_of_its_own_and_stops_the_agent() {
    let dir = scratch("probe");
    let parent = parent("fake", fake_options(&[]), &dir).await;
    let peer = parent.peer().clone();
    let before = peer.request_value(methods::SCHEMA, json!({"policy": {}})).await.expect("schema");
    assert_eq!(before["schema"]["properties"], json!({}), "nothing is known before the probe");

    let probe = peer.request_value(methods::PROBE, json!({})).await.expect("probe");
    let models: Vec<&str> =
        probe["models"].as_array().expect("models").iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(models, ["fast", "smart"]);
    let commands: Vec<&str> =
        probe["commands"].as_array().expect("commands").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(commands, ["review", "explain"]);
    let schema = peer.request_value(methods::SCHEMA, json!({"policy": {}})).await.expect("schema");
    assert_eq!(schema["schema"]["properties"]["permissionMode"]["enum"], json!(["default", "yolo"]));
    assert_eq!(schema["schema"]["properties"]["acp.verbosity"]["enum"], json!(["terse", "chatty"]));
    assert!(dir.join("probe").is_dir(), "the probe's session ran in the worker's own folder");
    assert_eq!(fake_agents_left(), Vec::<String>::new(), "the probe's agent was stopped");

    // Asked again, the probe is not run again.
    let again = peer.request_value(methods::PROBE, json!({})).await.expect("probe");
    assert_eq!(again, probe);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_the_agent_refuses_is_an_error_with_a_sentence() {
    let dir = scratch("probe-refused");
    let parent = parent("fake", fake_options(&["--auth-methods", "token"]), &dir).await;
    let refused = parent.peer().request_value(methods::PROBE, json!({})).await.expect_err("no offer");
    let sentence = refused.to_string();
    assert!(sentence.contains("fake") && sentence.contains("session/new"), "{sentence}");
    assert!(sentence.contains("Authentication required"), "the agent's own words: {sentence}");
    assert_eq!(fake_agents_left(), Vec::<String>::new(), "the refused probe's agent was stopped");
}
