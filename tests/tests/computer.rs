//! The computer plugin end to end (seed 000): its three tools through a session's `/ahp-mcp`,
//! offered only with `advancedTools` on, on Podman from Debian's packages serving the Docker
//! Engine API on a socket of the test's own, with an image the test builds from the host's own
//! programs (`tests/src/containers.rs`; nothing is pulled). `computersMax`, the sentences of
//! `../shared/research/ahpd-reference.md` §5.4, release on session delete, the sweep at start of
//! what a `kill -9` left, and `ahpd plugin list` with and without an engine.

use std::path::Path;

use serde_json::{json, Value};
use tests::containers::{image, podman, Engine, PRETTY_NAME};
use tests::mcp::{call_tools, endpoint, list_tools, ok_text, refused};
use tests::{Daemon, DaemonOptions, TestClient};

fn config(engine: &str, image: &str, advanced: bool) -> Value {
    json!({
        "agents": { "notes": tests::agents::notes_revealing_endpoint() },
        "advancedTools": advanced,
        "computersMax": 1,
        "plugins": { "computer": { "options": { "engine": engine, "image": image } } },
    })
}

fn tool_names(listed: &Value) -> Vec<String> {
    listed["tools"]
        .as_array()
        .or_else(|| listed.as_array())
        .map(|tools| tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

const THREE: [&str; 3] = ["request_disposable_computer", "release_computer", "run_in_computer"];

/// The containers of `session` on the engine.
fn of_session(engine: &Engine, podman: &Path, session: &str) -> Vec<String> {
    engine.labelled(podman, &format!("ahpd.session={session}"))
}

#[tokio::test]
async fn the_computer_tools_make_run_in_and_release_a_container_and_only_with_advanced_tools() -> anyhow::Result<()> {
    let Some(podman) = tests::skip::or_skip(podman()) else { return Ok(()) };
    let image = image(&podman)?;
    let engine = Engine::start(&podman).await?;

    // Off: absent from the session's tools.
    let off = Daemon::start_with(DaemonOptions::with_config(config(&engine.url, image, false))).await?;
    let mut c = TestClient::connect(&off.url, "a").await?;
    let (_session, chat) = c.create_session("notes", None).await?;
    let (url, token) = endpoint(&mut c, &chat).await?;
    let names = tool_names(&list_tools(&url, &token).await?);
    assert!(THREE.iter().all(|t| !names.contains(&t.to_string())), "{names:?}");
    drop(c);
    drop(off);

    let daemon = Daemon::start_with(DaemonOptions::with_config(config(&engine.url, image, true))).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = c.create_session("notes", None).await?;
    let (url, token) = endpoint(&mut c, &chat).await?;
    let names = tool_names(&list_tools(&url, &token).await?);
    assert!(THREE.iter().all(|t| names.contains(&t.to_string())), "{names:?}");

    let results = call_tools(
        &url,
        &token,
        &[
            ("request_disposable_computer", json!({ "name": "box1" })),
            ("request_disposable_computer", json!({ "name": "box1" })),
            ("request_disposable_computer", json!({ "name": "box2" })),
            ("run_in_computer", json!({ "id": "box1", "command": "cat /etc/os-release; nproc >/dev/null; exit 3" })),
            ("run_in_computer", json!({ "id": "computer://box1", "command": "true" })),
            ("ahp_resource", json!({ "uri": "computer://box1/status" })),
            ("release_computer", json!({ "id": "nope" })),
            ("release_computer", json!({ "id": "" })),
            ("run_in_computer", json!({ "id": "nope", "command": "true" })),
        ],
    )
    .await?;
    assert_eq!(
        ok_text(&results[0])?,
        format!("computer://box1 is running on {image}. Read computer://box1/status for what it is, or run something in it with run_in_computer.")
    );
    refused(&results[1], "There is already a computer called box1.");
    refused(
        &results[2],
        "There are already 1 computers, which is the most this host will have. Release one first: computer://box1",
    );
    let ran = ok_text(&results[3])?;
    assert!(ran.contains(PRETTY_NAME) && ran.ends_with("\n\nexit 3"), "{ran:?}");
    assert_eq!(ok_text(&results[4])?, "exit 0");
    let status: Value = serde_json::from_str(ok_text(&results[5])?)?;
    assert_eq!(status["image"], image);
    assert_eq!(status["uri"], "computer://box1");
    refused(&results[6], "There is no computer called nope.");
    refused(&results[7], "Which computer? Give the name from its computer:// URI.");
    refused(&results[8], "There is no computer called nope.");
    assert_eq!(of_session(&engine, &podman, &session).len(), 1, "box1 runs on the engine");

    // A computer an agent made goes with its session.
    c.request("disposeSession", json!({ "channel": session })).await?;
    while !of_session(&engine, &podman, &session).is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // The computer's place is free again: made, then released by its tool.
    let (_s, chat) = c.create_session("notes", None).await?;
    let (url, token) = endpoint(&mut c, &chat).await?;
    let results = call_tools(
        &url,
        &token,
        &[("request_disposable_computer", json!({ "name": "box3" })), ("release_computer", json!({ "id": "box3" }))],
    )
    .await?;
    ok_text(&results[0])?;
    assert_eq!(ok_text(&results[1])?, "box3 is gone.");
    Ok(())
}

#[tokio::test]
async fn a_kill_9_leaves_no_container_after_the_next_start() -> anyhow::Result<()> {
    let Some(podman) = tests::skip::or_skip(podman()) else { return Ok(()) };
    let image = image(&podman)?;
    let engine = Engine::start(&podman).await?;
    let home = tempfile::Builder::new().prefix("ahpd-test-").tempdir()?;
    let options = || DaemonOptions::with_config(config(&engine.url, image, true));
    let mut daemon = Daemon::start_in(home.path(), options()).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = c.create_session("notes", None).await?;
    let (url, token) = endpoint(&mut c, &chat).await?;
    let results = call_tools(&url, &token, &[("request_disposable_computer", json!({ "name": "left" }))]).await?;
    ok_text(&results[0])?;
    drop(c);
    daemon.kill9().await?;
    assert_eq!(of_session(&engine, &podman, &session).len(), 1, "the kill left its container");

    // The next start sweeps what its data folder's run left, before it listens.
    let _daemon = Daemon::start_in(home.path(), options()).await?;
    assert!(of_session(&engine, &podman, &session).is_empty(), "swept at start");
    Ok(())
}

#[tokio::test]
async fn plugin_list_says_what_would_load_with_and_without_an_engine() -> anyhow::Result<()> {
    let Some(podman) = tests::skip::or_skip(podman()) else { return Ok(()) };
    let engine = Engine::start(&podman).await?;
    let home = tests::Home::new()?;
    let run = home.expect(0, &["plugin", "list"]).await?;
    assert_eq!(run.stdout.trim(), "computer: unconfigured (set plugins.computer to turn it on)");

    home.write_config(&json!({ "plugins": { "computer": { "options": { "engine": engine.url, "image": "x" } } } }))?;
    let run = home.expect(0, &["plugin", "list"]).await?;
    assert_eq!(run.stdout.trim(), format!("computer: ready (engine {}, image x)", engine.url));

    let nowhere = format!("unix://{}/no-engine.sock", home.path().display());
    home.write_config(&json!({ "plugins": { "computer": { "options": { "engine": nowhere } } } }))?;
    let run = home.expect(0, &["plugin", "list"]).await?;
    assert_eq!(run.stdout.trim(), format!("computer: missing: no container engine answered at {nowhere}"));

    home.write_config(&json!({ "plugins": { "computer": { "enabled": false } } }))?;
    let run = home.expect(0, &["plugin", "list"]).await?;
    assert_eq!(run.stdout.trim(), "computer: disabled");
    Ok(())
}
