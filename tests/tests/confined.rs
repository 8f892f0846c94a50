//! Confined sessions end to end: the real `ahpd`, the real `claude` CLI against the scripted
//! Anthropic mock, and bubblewrap from Debian's packages (`scripts/deps/sandbox.sh`). A session in
//! `isolation: "sandbox"` runs in never-ask mode; what its commands may and may not do is read in
//! the tool results the person sees in the chat, and what is outside the worktree is checked
//! unchanged on disk.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ahp_types::state::{SessionLifecycle, TurnState};
use anyhow::Context;
use serde_json::json;
use tests::git::git;
use tests::installed::{bwrap, claude_entry};
use tests::mocks::anthropic::MockAnthropic;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

/// A repository with one commit, in a folder of its own.
fn repo(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix("ahpd-repo-").tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::create_dir_all(&path).expect("mkdir");
    let path = path.canonicalize().expect("canonical");
    tests::git::repository_with_a_commit(&path);
    (dir, path)
}

/// A Bash call the mock model makes.
fn bash(command: &str) -> String {
    format!("run it TOOL:Bash ARGS:{}", json!({ "command": command }))
}

/// Runs a turn whose model runs `command`; the turn must complete without asking anybody, and
/// answers what the person sees of it.
async fn run(c: &mut TestClient, chat: &str, command: &str) -> anyhow::Result<String> {
    let turn = c.turn(chat, &bash(command)).await?;
    anyhow::ensure!(turn.state == TurnState::Complete, "the turn of `{command}` ended {:?}: {turn:?}", turn.state);
    let text = turn_text(&turn);
    anyhow::ensure!(text.contains("Tool result received:"), "the turn went on after the call: {text}");
    Ok(text)
}

/// The words of the question `request` of `chat`'s running turn.
fn question_message(c: &TestClient, chat: &str, request: &str) -> String {
    let turn = c.mirror.chat(chat).and_then(|s| s.active_turn.clone());
    let parts = turn.map(|t| t.response_parts).unwrap_or_default();
    parts
        .iter()
        .find_map(|p| match p {
            ahp_types::state::ResponsePart::InputRequest(r) if r.request.id == request => r.request.message.clone(),
            _ => None,
        })
        .unwrap_or_default()
}

/// A TCP listener on the host's loopback that no box is allowed to reach, counting connections.
async fn forbidden_listener() -> anyhow::Result<(u16, Arc<AtomicUsize>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while listener.accept().await.is_ok() {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    Ok((port, accepted))
}

/// The names in `dir`, but the agent's own state (`~/.claude`, `~/.claude.json`: the CLI writes it
/// outside the box too, and `sandboxWritable` lets it write `~/.claude` inside).
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.retain(|n| !n.starts_with(".claude"));
    names.sort();
    names
}

/// A daemon serving the real `claude` CLI against a scripted model API, and the mock.
async fn claude_daemon() -> anyhow::Result<(MockAnthropic, Daemon)> {
    let mock = MockAnthropic::start().await?;
    let config = json!({ "agents": { "claude": claude_entry(&mock) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    Ok((mock, daemon))
}

#[tokio::test]
async fn a_sandboxed_claude_session_writes_its_worktree_and_nothing_else_without_asking() -> anyhow::Result<()> {
    let Some(_bwrap) = tests::skip::or_skip(bwrap()) else { return Ok(()) };
    let (mock, daemon) = claude_daemon().await?;
    let (_project_dir, project) = repo("project");
    let (_other_dir, other) = repo("other");
    let ssh = daemon.home.join(".ssh");
    std::fs::create_dir_all(&ssh)?;
    std::fs::write(ssh.join("id_ed25519"), "PRIVATE-KEY-MATERIAL\n")?;
    let home_before = listing(&daemon.home);
    let (port, accepted) = forbidden_listener().await?;

    let mut c = TestClient::connect(&daemon.url, "a").await?;
    // The New session form offers the sandbox, and says what it reaches.
    let schema = c
        .request("resolveSessionConfig", json!({ "channel": ahp_types::ROOT_RESOURCE_URI, "provider": "claude" }))
        .await
        .context("resolveSessionConfig")?;
    let isolation = &schema["schema"]["properties"]["isolation"];
    assert!(isolation["enum"].as_array().is_some_and(|e| e.contains(&json!("sandbox"))), "{isolation}");
    let said = isolation["enumDescriptions"].to_string();
    assert!(said.contains("cannot read ~/.ssh"), "the window says what a sandbox reaches: {said}");

    let (session, chat) = c
        .open_session(json!({
            "provider": "claude",
            "workingDirectories": [format!("file://{}", project.display())],
            "config": { "isolation": "sandbox", "permissionMode": "bypassPermissions" },
        }))
        .await?;
    assert_eq!(c.mirror.session(&session).map(|s| s.lifecycle.clone()), Some(SessionLifecycle::Ready));
    let worktree = c.folder_of(&session)?;
    assert_ne!(worktree, project, "a sandboxed session works in a worktree of its own");
    // `ahpd status` shows its box once it runs (its CLI started in it with the first turn).

    // Inside its worktree, a command works, and git can commit there.
    let text = run(&mut c, &chat, "echo made > inside.txt && git add inside.txt && git -c user.name=A -c user.email=a@b commit -qm inside && cat inside.txt").await?;
    assert!(text.contains("made"), "{text}");
    assert_eq!(std::fs::read_to_string(worktree.join("inside.txt"))?, "made\n");
    let status = daemon.status().await?;
    let boxed = &status["boxes"][0];
    assert_eq!(boxed["session"], session.as_str(), "{status}");
    assert_eq!(boxed["level"], "sandbox");
    assert_eq!(boxed["engine"], "bubblewrap");
    assert_eq!(boxed["worktree"], worktree.display().to_string());
    assert!(boxed["reaches"].to_string().contains(&mock.base_url().replace("http://", "")), "{boxed}");

    // The home folder is read-only.
    let text = run(&mut c, &chat, "touch ~/outside").await?;
    assert!(text.contains("Read-only file system"), "{text}");
    // Another repository is not there at all.
    let text = run(&mut c, &chat, &format!("echo stolen > {}/stolen.txt", other.display())).await?;
    assert!(text.contains("No such file or directory"), "{text}");
    // The person's keys are hidden.
    let text = run(&mut c, &chat, "cat ~/.ssh/id_*").await?;
    assert!(text.contains("No such file or directory") && !text.contains("PRIVATE-KEY-MATERIAL"), "{text}");
    // A host not allowed cannot be reached, directly or through the daemon's proxy.
    let text = run(&mut c, &chat, &format!("curl -sS --noproxy '*' http://127.0.0.1:{port}/")).await?;
    assert!(text.contains("Failed to connect") || text.contains("Couldn't connect"), "{text}");
    // One through the daemon's proxy is asked of the person in the running turn: refused,
    // it stays out, with the proxy's sentence in the agent's own tool result.
    let turn_id = c.send(&chat, &bash(&format!("curl -sS http://10.255.255.1:{port}/"))).await?;
    let asked = c.until_questions(&chat, 1).await?;
    let message = question_message(&c, &chat, &asked[0]);
    assert_eq!(
        message,
        format!("This sandboxed session wants to reach 10.255.255.1:{port}, which it is not allowed to. Let it, for as long as the session's box lasts?")
    );
    c.answer(&chat, &asked[0], None).await?;
    let text = turn_text(&c.finished(&chat, &turn_id).await?);
    assert!(
        text.contains(
            "is not among the hosts this sandboxed session may reach, and the person did not allow it when asked"
        ),
        "{text}"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "the forbidden host heard nothing");
    // Allowed, it is let through (for the box's life: the next call is not asked).
    let through_proxy = format!("curl -sS --noproxy '' http://127.0.0.1:{port}/; echo curl said $?");
    let turn_id = c.send(&chat, &bash(&through_proxy)).await?;
    let asked = c.until_questions(&chat, 1).await?;
    c.answer(&chat, &asked[0], Some("yes")).await?;
    let text = turn_text(&c.finished(&chat, &turn_id).await?);
    assert!(text.contains("curl said 52"), "the host answered nothing, but was reached: {text}");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "the allowed host heard the box once");
    let text = run(&mut c, &chat, &through_proxy).await?;
    assert!(text.contains("curl said 52"), "{text}");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);

    // Nothing outside the worktree changed.
    assert!(!daemon.home.join("outside").exists());
    assert_eq!(listing(&daemon.home), home_before, "the home folder is as it was");
    assert!(!other.join("stolen.txt").exists());
    assert_eq!(git(&other, &["status", "--porcelain"]), "", "the other repository is untouched");
    assert_eq!(git(&project, &["status", "--porcelain"]), "", "the session's own repository is untouched");
    // The worktree's commit is on the session's branch of the repository.
    let branch = git(&worktree, &["rev-parse", "--abbrev-ref", "HEAD"]);
    assert!(git(&project, &["log", "--oneline", branch.trim()]).contains("inside"));
    c.check_against_snapshot(&chat).await?;
    Ok(())
}

/// Runs a turn whose model runs `command` with pi's bash tool; the turn must complete without
/// asking anybody, and answers everything the person is shown of it.
async fn pi_runs(c: &mut TestClient, chat: &str, command: &str) -> anyhow::Result<String> {
    let turn = c.turn(chat, &format!("[[bash {command}]]")).await?;
    anyhow::ensure!(turn.state == TurnState::Complete, "the turn of `{command}` ended {:?}: {turn:?}", turn.state);
    let shown = serde_json::to_string(&turn)?;
    anyhow::ensure!(turn_text(&turn).contains("tool said:"), "the turn went on after the call: {shown}");
    Ok(shown)
}

#[tokio::test]
async fn a_sandboxed_pi_session_writes_its_worktree_and_nothing_else_without_asking() -> anyhow::Result<()> {
    let Some(_bwrap) = tests::skip::or_skip(bwrap()) else { return Ok(()) };
    let mock = tests::mocks::openai::MockOpenAi::start().await?;
    // pi's own folder where it keeps it by default (`~/.pi/agent`, writable in a box by default).
    let home = tempfile::Builder::new().prefix("ahpd-pi-home-").tempdir()?;
    let agent_dir = home.path().join(".pi").join("agent");
    std::fs::create_dir_all(&agent_dir)?;
    let config = json!({
        "agents": { "pi": tests::installed::pi_entry(&mock, &agent_dir)? },
        // pi names its model API in its own models.json, not in a variable: the person allows it.
        "sandboxAllowHosts": [mock.base_url()],
    });
    let daemon = Daemon::start_in(home.path(), DaemonOptions::with_config(config)).await?;
    let (_project_dir, project) = repo("project");
    let (_other_dir, other) = repo("other");
    let ssh = home.path().join(".ssh");
    std::fs::create_dir_all(&ssh)?;
    std::fs::write(ssh.join("id_ed25519"), "PRIVATE-KEY-MATERIAL\n")?;
    let home_before = listing(home.path());

    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = c
        .open_session(json!({
            "provider": "pi",
            "workingDirectories": [format!("file://{}", project.display())],
            "config": { "isolation": "sandbox" },
        }))
        .await
        .with_context(|| daemon.log())?;
    let worktree = c.folder_of(&session)?;
    assert_ne!(worktree, project, "a sandboxed session works in a worktree of its own");
    // Its box is said on its `_meta` for the window's header: the one host it reaches beside the
    // daemon is the model API the person allowed.
    let shown = c.mirror.session(&session).and_then(|s| s.meta.clone()).and_then(|m| m.get("ahpd.box").cloned());
    let shown = shown.context("the session's box on its _meta")?;
    assert_eq!((shown["level"].as_str(), shown["engine"].as_str()), (Some("sandbox"), Some("bubblewrap")), "{shown}");
    assert!(shown["reaches"].to_string().contains(&format!("127.0.0.1:{}", mock.port())), "{shown}");

    // pi's own tool writes inside the worktree, nobody asked.
    let shown = pi_runs(&mut c, &chat, "echo made > inside.txt && cat inside.txt").await?;
    assert!(shown.contains("made"), "{shown}");
    assert_eq!(std::fs::read_to_string(worktree.join("inside.txt"))?, "made\n");
    let status = daemon.status().await?;
    let boxed = &status["boxes"][0];
    assert_eq!((boxed["session"].as_str(), boxed["level"].as_str()), (Some(session.as_str()), Some("sandbox")));

    // Outside it, the box holds, and the turn goes on.
    let shown = pi_runs(&mut c, &chat, "touch ~/outside").await?;
    assert!(shown.contains("Read-only file system"), "{shown}");
    let shown = pi_runs(&mut c, &chat, &format!("echo stolen > {}/stolen.txt", other.display())).await?;
    assert!(shown.contains("No such file or directory"), "{shown}");
    let shown = pi_runs(&mut c, &chat, "cat ~/.ssh/id_*").await?;
    assert!(shown.contains("No such file or directory") && !shown.contains("PRIVATE-KEY-MATERIAL"), "{shown}");

    // The host's tools still reach it (ahpd's bridge extension, loaded from pi's own folder).
    let turn = c.turn(&chat, "[[call list_sessions {}]]").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
    let session_id = session.trim_start_matches("ahp-session:/");
    assert!(serde_json::to_string(&turn)?.contains(session_id), "list_sessions answered from the box: {turn:#?}");

    assert!(!home.path().join("outside").exists());
    assert_eq!(listing(home.path()), home_before, "the home folder is as it was");
    assert!(!other.join("stolen.txt").exists());
    assert_eq!(git(&project, &["status", "--porcelain"]), "", "the session's own repository is untouched");
    c.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_bang_command_of_a_sandboxed_session_runs_in_its_box() -> anyhow::Result<()> {
    let Some(_bwrap) = tests::skip::or_skip(bwrap()) else { return Ok(()) };
    let (_mock, daemon) = claude_daemon().await?;
    let (_project_dir, project) = repo("project");
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = c
        .open_session(json!({
            "provider": "claude",
            "workingDirectories": [format!("file://{}", project.display())],
            "config": { "isolation": "sandbox" },
        }))
        .await?;
    let worktree = c.folder_of(&session)?;
    let turn = c.turn(&chat, "!touch ~/outside-bang; echo here > bang.txt; echo done").await?;
    let shown = serde_json::to_string(&turn)?;
    assert!(shown.contains("Read-only file system"), "{shown}");
    assert!(!daemon.home.join("outside-bang").exists());
    assert_eq!(std::fs::read_to_string(worktree.join("bang.txt"))?, "here\n");
    Ok(())
}

/// The figure in docs/benchmarks.md ("Confined sessions"): the time to open a session and run its
/// first turn (the CLI starts), and a later turn's (a reply with no tool call: the same work for
/// all, as the CLI refuses never-ask as root outside a box), for a worktree session, a sandboxed
/// one and (where Podman is installed) one in a container, side by side in one run. Measures;
/// asserts nothing about time. Run with
/// `cargo nextest run -p tests --test confined --run-ignored only`.
#[tokio::test]
#[ignore = "a measurement for docs/benchmarks.md, not a check"]
async fn measure_start_and_turn_per_level() -> anyhow::Result<()> {
    let Some(_bwrap) = tests::skip::or_skip(bwrap()) else { return Ok(()) };
    let mock = MockAnthropic::start().await?;
    let mut config = json!({ "agents": { "claude": claude_entry(&mock) } });
    // The container level on the test's engine, with the CLI, bash and their libraries mounted
    // into the image the test builds (`tests/tests/container_sessions.rs` does the same).
    let podman = tests::containers::podman();
    let engine = match &podman {
        Ok(podman) => Some((tests::containers::image(podman)?, tests::containers::Engine::start(podman).await?)),
        Err(_) => None,
    };
    if let Some((image, engine)) = &engine {
        let cli = tests::installed::claude_bin().canonicalize()?;
        let install = cli.ancestors().find(|p| p.ends_with("node_modules")).and_then(Path::parent).unwrap_or(&cli);
        config["containerImage"] = json!(image);
        config["containerMounts"] = json!([install, "/usr/bin/bash", "/lib/x86_64-linux-gnu"]);
        config["plugins"] = json!({ "computer": { "enabled": false, "options": { "engine": engine.url } } });
    }
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let _leftovers = match (&podman, &engine) {
        (Ok(podman), Some((_, engine))) => Some(engine.leaves_nothing_of(podman, &daemon.home)),
        _ => None,
    };
    let (_project_dir, project) = repo("project");
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    const ROUNDS: usize = 5;
    let mut rows = Vec::new();
    let levels: &[&str] =
        if engine.is_some() { &["worktree", "sandbox", "container"] } else { &["worktree", "sandbox"] };
    for &level in levels {
        let (mut opened, mut first, mut later) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let began = std::time::Instant::now();
            let (_session, chat) = c
                .open_session(json!({
                    "provider": "claude",
                    "workingDirectories": [format!("file://{}", project.display())],
                    "config": { "isolation": level },
                }))
                .await?;
            opened.push(began.elapsed().as_secs_f64() * 1e3);
            let began = std::time::Instant::now();
            anyhow::ensure!(c.turn(&chat, "say one").await?.state == TurnState::Complete);
            first.push(began.elapsed().as_secs_f64() * 1e3);
            let began = std::time::Instant::now();
            anyhow::ensure!(c.turn(&chat, "say two").await?.state == TurnState::Complete);
            later.push(began.elapsed().as_secs_f64() * 1e3);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        rows.push((level, median(&mut opened), median(&mut first), median(&mut later)));
    }
    println!("| level | session opened (ms) | first turn, CLI starting (ms) | a later turn (ms) |");
    for (level, opened, first, later) in rows {
        println!("| `{level}` | {opened:.0} | {first:.0} | {later:.0} |");
    }
    Ok(())
}

#[tokio::test]
async fn an_agent_that_cannot_be_boxed_is_refused_a_sandbox_rather_than_run_unboxed() -> anyhow::Result<()> {
    let Some(_bwrap) = tests::skip::or_skip(bwrap()) else { return Ok(()) };
    let config = json!({ "agents": { "echo": tests::agents::echo() } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let (_project_dir, project) = repo("project");
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let session = format!("ahp-session:/{}", uuid::Uuid::new_v4());
    c.request(
        "createSession",
        json!({
            "channel": session,
            "provider": "echo",
            "workingDirectories": [format!("file://{}", project.display())],
            "config": { "isolation": "sandbox" },
        }),
    )
    .await?;
    c.subscribe(&session).await?;
    let s = session.clone();
    c.until("the session to fail", move |m| m.session(&s).is_some_and(|st| st.lifecycle == SessionLifecycle::Failed))
        .await?;
    let error = c.mirror.session(&session).and_then(|s| s.creation_error.clone()).context("a creation error")?;
    assert!(
        error.message.contains(
            "This agent cannot run in a sandbox (its worker does not start what it runs through the box); pick another isolation for it."
        ),
        "{}",
        error.message
    );
    Ok(())
}
