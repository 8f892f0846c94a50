//! Offers at startup: an ACP agent's models, modes and commands reach every client before any
//! session of it has opened (the worker asks a short-lived session of its own), and after a
//! restart at once, from the store, before the agent has been asked again; what a session later
//! reports replaces them. For the scripted ACP agent and the real claude-agent-acp on the mock
//! Anthropic API, read through the official client.

use std::path::Path;

use ahp_types::actions::{SessionConfigChangedAction, StateAction};
use ahp_types::state::RootState;
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::{json, Value};
use tests::installed::{acp_adapter_entry, claude_agent_acp};
use tests::mocks::anthropic::MockAnthropic;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

fn fake_agent() -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    repo.join("agent-acp/tests/fixtures/fake_acp_agent.py").display().to_string()
}

fn scripted(args: &[&str]) -> DaemonOptions {
    let mut all = vec![fake_agent()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    let entry =
        json!({ "kind": "acp", "displayName": "Scripted ACP", "options": { "command": "python3", "args": all } });
    DaemonOptions::with_config(json!({ "agents": { "scripted": entry } }))
}

/// The model ids the root state lists for `provider`.
fn models(root: Option<&RootState>, provider: &str) -> Vec<String> {
    let agent = root.and_then(|r| r.agents.iter().find(|a| a.provider == provider));
    agent.map(|a| a.models.iter().map(|m| m.id.clone()).collect()).unwrap_or_default()
}

/// Whether the root state says `provider` forks a chat (`capabilities.multipleChats.fork`).
fn forks(root: Option<&RootState>, provider: &str) -> bool {
    let agent = root.and_then(|r| r.agents.iter().find(|a| a.provider == provider));
    agent.and_then(|a| a.capabilities.as_ref()?.multiple_chats.as_ref()?.fork).unwrap_or(false)
}

/// What a new-session form reads: the schema's modes and the commands, from `resolveSessionConfig`.
async fn form(client: &TestClient, provider: &str) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let resolved =
        client.request("resolveSessionConfig", json!({ "channel": ROOT_RESOURCE_URI, "provider": provider })).await?;
    let strings = |v: &Value, field: Option<&str>| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| field.map_or(Some(x), |f| x.get(f)).and_then(Value::as_str).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let modes = strings(&resolved["schema"]["properties"]["permissionMode"]["enum"], None);
    let commands = strings(&resolved["_meta"]["commands"], Some("name"));
    Ok((modes, commands))
}

/// The scripted agent's processes among the daemon's descendants.
fn agents_of(daemon: &Daemon) -> Vec<i32> {
    tests::daemon::descendants(daemon.pid())
        .into_iter()
        .filter(|pid| tests::daemon::cmdline(*pid).contains("fake_acp_agent.py"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_acp_agent_offers_before_any_session_and_at_once_after_a_restart() -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("ahpd-acp-offers-").tempdir()?;

    // No session at all: the worker's probe session names the agent's models, modes and commands.
    let mut first = Daemon::start_in(home.path(), scripted(&[])).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    a.until("the probe's models", |m| models(m.root(), "scripted") == ["fast", "smart"]).await?;
    let (modes, commands) = form(&a, "scripted").await?;
    assert_eq!(modes, ["default", "yolo"], "the agent's modes, before any session");
    assert_eq!(commands, ["review", "explain"], "the agent's commands, before any session");
    // The probe's session is closed: no agent process outlives it.
    let left = tests::daemon::until_all_gone(&agents_of(&first), "the probe").await;
    assert!(left.is_empty(), "the probe's agent is stopped: {left:?}");

    // A session reports other commands: they replace the probe's, and are kept.
    let (session, chat) = a.create_session("scripted", None).await?;
    let turn = a.turn(&chat, "commands deploy; say named").await?;
    assert_eq!(turn_text(&turn), "named");
    let s = session.clone();
    a.until("the session's new commands", move |m| {
        let meta = m.session(&s).and_then(|st| st.meta.clone()).unwrap_or_default();
        meta.get("commands").and_then(|c| c.get(0)).and_then(|c| c.get("name")) == Some(&json!("deploy"))
    })
    .await?;
    assert_eq!(form(&a, "scripted").await?.1, ["deploy"], "the session's report replaced the probe's commands");
    drop(a);
    first.terminate().await?;

    // Restarted with an agent that never answers: the first initialize already shows what it
    // offered, from the store, with no session and no answer from the agent.
    let second = Daemon::start_in(home.path(), scripted(&["--no-initialize"])).await?;
    let b = TestClient::connect(&second.url, "b").await?;
    assert_eq!(models(b.mirror.root(), "scripted"), ["fast", "smart"], "the models at the first initialize");
    let (modes, commands) = form(&b, "scripted").await?;
    assert_eq!(modes, ["default", "yolo"], "the modes at once after the restart");
    assert_eq!(commands, ["deploy"], "the commands the session last reported");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_agent_acp_offers_before_any_session_and_at_once_after_a_restart() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let adapter_home = tempfile::Builder::new().prefix("ahpd-acp-home-").tempdir()?;
    let home = tempfile::Builder::new().prefix("ahpd-acp-offers-").tempdir()?;
    let options = || {
        let entry = acp_adapter_entry(&claude_agent_acp(), &mock, adapter_home.path());
        DaemonOptions::with_config(json!({ "agents": { "claude-acp": entry } }))
    };

    let mut first = Daemon::start_in(home.path(), options()).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    a.until("the adapter's models", |m| !models(m.root(), "claude-acp").is_empty()).await?;
    let offered = models(a.mirror.root(), "claude-acp");
    let (modes, commands) = form(&a, "claude-acp").await?;
    assert!(modes.iter().any(|m| m == "default"), "the adapter's modes before any session: {modes:?}");
    assert!(!commands.is_empty(), "the adapter's commands before any session");
    assert!(mock.turn_requests().is_empty(), "the probe asked the model nothing");
    assert!(forks(a.mirror.root(), "claude-acp"), "the probe found it loads sessions, so its chats fork");
    drop(a);
    first.terminate().await?;

    let second = Daemon::start_in(home.path(), options()).await?;
    let b = TestClient::connect(&second.url, "b").await?;
    assert_eq!(models(b.mirror.root(), "claude-acp"), offered, "the models at the first initialize");
    let (again, kept) = form(&b, "claude-acp").await?;
    assert_eq!(again, modes, "the modes at once after the restart");
    assert_eq!(kept, commands, "the commands at once after the restart");
    assert!(forks(b.mirror.root(), "claude-acp"), "and that its chats fork");
    Ok(())
}

/// The page's new-session form after a restart whose agent never answers: the modes, the models
/// and the commands the agent offered before are there, from the store. A screenshot goes to
/// target/window-shots/.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_new_session_form_shows_what_the_agent_offered_at_once_after_a_restart() -> anyhow::Result<()> {
    const TOKEN: &str = "offers-test-token";
    let home = tempfile::Builder::new().prefix("ahpd-acp-offers-").tempdir()?;
    let with_token = |args: &[&str]| {
        let mut options = scripted(args);
        options.args = vec!["--connection-token".into(), TOKEN.into()];
        options
    };
    let mut first = Daemon::start_in(home.path(), with_token(&[])).await?;
    let mut a = TestClient::connect(&format!("{}/?tkn={TOKEN}", first.url), "a").await?;
    a.until("the probe's models", |m| models(m.root(), "scripted") == ["fast", "smart"]).await?;
    drop(a);
    first.terminate().await?;

    let second = Daemon::start_in(home.path(), with_token(&["--no-initialize"])).await?;
    let page = format!("{}/?tkn={TOKEN}", second.url.replace("ws://", "http://"));
    let mut browser = tests::browser::Browser::launch().await?;
    assert_eq!(browser.open(&page, 1000, 800).await?, 200);
    browser.wait_for("document.body.dataset.connection === 'online'").await?;
    browser.click("button[data-action=new]").await?;
    browser.wait_for("document.querySelector('dialog.new-session [data-offer=commands]')").await?;
    let modes = browser
        .eval("[...document.querySelectorAll('dialog.new-session select[name=permissionMode] option')].map((o) => JSON.parse(o.value))")
        .await?;
    assert_eq!(modes, json!(["default", "yolo"]), "the agent's modes in the form");
    let shown = browser
        .eval("['models', 'commands'].map((k) => document.querySelector(`dialog.new-session [data-offer=${k}]`).textContent)")
        .await?;
    assert_eq!(shown, json!(["Models: Fast, Smart", "Commands: /review, /explain"]));
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/window-shots");
    std::fs::create_dir_all(&shots)?;
    browser.screenshot(&shots.join("acp-offers-new-session.png")).await?;
    browser.close().await?;
    Ok(())
}

/// Seed 004: "Withhold the same modes in both". Under an operator's policy that restricts elevated
/// auto-approval, the scripted agent's `yolo` (a mode that never asks) is offered neither in the
/// form drawn before a session nor in a session: a session cannot be made in it, nor moved into
/// it, and the modes that ask stay offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_policy_restricting_auto_approval_an_acp_agent_offers_no_mode_that_never_asks() -> anyhow::Result<()> {
    let mut options = scripted(&[]);
    if let Some(config) = options.config.as_mut() {
        config["autoApprovePolicyRestricted"] = json!(true);
    }
    let daemon = Daemon::start_with(options).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    a.until("the probe's models", |m| models(m.root(), "scripted") == ["fast", "smart"]).await?;
    assert_eq!(form(&a, "scripted").await?.0, ["default"], "the form before any session");

    let refused = a
        .request(
            "createSession",
            json!({ "channel": "ahp-session:/yolo", "provider": "scripted", "config": { "permissionMode": "yolo" } }),
        )
        .await;
    assert!(
        matches!(&refused, Err(ahp::ClientError::Rpc(e)) if e.message == "Session configuration 'permissionMode' does not offer 'yolo'."),
        "{refused:?}"
    );

    let (session, chat) = a.create_session("scripted", None).await?;
    let pick = [("permissionMode".to_owned(), json!("yolo"))].into_iter().collect();
    let seq = a
        .dispatch(
            &session,
            StateAction::SessionConfigChanged(SessionConfigChangedAction { config: pick, replace: None }),
        )
        .await?;
    let reason = a.refusal(seq).await?;
    assert!(reason.contains("yolo"), "moving the session into yolo is refused: {reason}");
    let turn = a.turn(&chat, "say still asking").await?;
    assert_eq!(turn_text(&turn), "still asking");
    a.check_against_snapshot(&session).await?;
    Ok(())
}

/// While the startup probe is still running, a session that says what the agent offers is
/// enough: the root's models and the new-session form show it at once, without waiting for the
/// probe; the probe's own answer follows when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_teaches_the_form_while_the_startup_probe_still_runs() -> anyhow::Result<()> {
    let gate_dir = tempfile::tempdir()?;
    let gate = gate_dir.path().join("open");
    let daemon = Daemon::start_with(scripted(&["--hold-probe", &gate.display().to_string()])).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let folder = tempfile::tempdir()?;
    let (_session, chat) = a.create_session_in("scripted", folder.path()).await?;
    assert_eq!(turn_text(&a.turn(&chat, "say hi").await?), "hi");
    a.until("the session's models on the root", |m| models(m.root(), "scripted") == ["fast", "smart"]).await?;
    let (modes, commands) = form(&a, "scripted").await?;
    assert_eq!(modes, ["default", "yolo"], "the form, while the probe still runs");
    assert_eq!(commands, ["review", "explain"]);
    assert!(!gate.exists(), "the probe was held all along");

    // Let go, the probe ends and its agent is stopped.
    let in_probe_folder = |pid: &i32| {
        std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.file_name().is_some_and(|n| n == "probe"))
    };
    let probe: Vec<i32> = agents_of(&daemon).into_iter().filter(in_probe_folder).collect();
    assert_eq!(probe.len(), 1, "the probe's agent, held: {probe:?}");
    std::fs::write(&gate, "")?;
    let left = tests::daemon::until_all_gone(&probe, "the probe").await;
    assert!(left.is_empty(), "the probe's agent is stopped once it has answered: {left:?}");
    Ok(())
}
