//! Container sessions end to end (`isolation: "container"`): the real `ahpd`, Podman from
//! Debian's packages serving the Docker Engine API on a socket of the test's own, and an image
//! the test builds from the host's own programs (`tests/src/containers.rs`; nothing is pulled).
//! What a person sees is read in the chat (a `!` command's output, or the real `claude` CLI's
//! Bash tool's against the scripted Anthropic mock, names the image's `/etc/os-release`), in a
//! terminal, in the Changes view (what a command inside wrote) and in `ahpd status`; what is left
//! on the engine is read by the session's label.

use std::path::{Path, PathBuf};

use ahp_types::actions::{StateAction, TerminalInputAction};
use ahp_types::state::ChangesetState;
use anyhow::Context;
use serde_json::{json, Value};
use tests::browser::{announced_page, js_str, online, Browser};
use tests::client::terminal_output;
use tests::containers::{image, podman, Engine, PRETTY_NAME};
use tests::git::git;
use tests::{Daemon, DaemonOptions, TestClient};

/// A daemon's config: notes, and the container level on `engine` with `image`.
fn config(engine: &str, image: &str) -> Value {
    json!({
        "agents": { "notes": tests::agents::notes() },
        "containerImage": image,
        "plugins": { "computer": { "enabled": false, "options": { "engine": engine } } },
    })
}

/// A repository with one commit, in a folder of its own.
fn repo() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix("ahpd-repo-").tempdir().expect("temp dir");
    let path = dir.path().join("project");
    std::fs::create_dir_all(&path).expect("mkdir");
    let path = path.canonicalize().expect("canonical");
    tests::git::repository_with_a_commit(&path);
    (dir, path)
}

/// Opens a notes session in a container on `project`, never asking.
async fn container_session(c: &mut TestClient, project: &Path) -> anyhow::Result<(String, String)> {
    c.open_session(json!({
        "provider": "notes",
        "workingDirectories": [format!("file://{}", project.display())],
        "config": { "isolation": "container", "ask": "never" },
    }))
    .await
}

/// Runs a `!` command in `chat`; answers everything the person is shown of its turn.
async fn bang(c: &mut TestClient, chat: &str, command: &str) -> anyhow::Result<String> {
    let turn = c.turn(chat, &format!("!{command}")).await?;
    Ok(serde_json::to_string(&turn)?)
}

/// The containers of `session` on the engine.
fn of_session(engine: &Engine, podman: &Path, session: &str) -> Vec<String> {
    engine.labelled(podman, &format!("ahpd.session={session}"))
}

/// The session's branch changeset, as the Changes view folds it, and its URI.
async fn branch_changes(c: &mut TestClient, session: &str) -> anyhow::Result<(String, ChangesetState)> {
    let listed = c.mirror.session(session).and_then(|s| s.changesets.clone()).unwrap_or_default();
    let uri = listed
        .into_iter()
        .find(|e| e.change_kind == "branch")
        .map(|e| e.uri_template)
        .context("the session advertises its branch's changes")?;
    c.subscribe(&uri).await?;
    let state = c.mirror.changeset(&uri).cloned().context("the branch's changes")?;
    Ok((uri, state))
}

#[tokio::test]
async fn a_container_session_runs_its_commands_in_its_image_and_its_edits_show_in_changes_and_merge(
) -> anyhow::Result<()> {
    let Some(podman) = tests::skip::or_skip(podman()) else { return Ok(()) };
    let image = image(&podman)?;
    let engine = Engine::start(&podman).await?;
    let mut config = config(&engine.url, image);
    // Its own limits: the memory as the person writes it, the CPUs as a fraction.
    config["containerCpus"] = json!(1.5);
    config["containerMemory"] = json!("256m");
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let _leftovers = engine.leaves_nothing_of(&podman, &daemon.home);
    let (_project_dir, project) = repo();
    let mut c = TestClient::connect(&daemon.url, "a").await?;

    // The New session form offers the container, and says what it reaches.
    let schema = c
        .request("resolveSessionConfig", json!({ "channel": ahp_types::ROOT_RESOURCE_URI, "provider": "notes" }))
        .await
        .context("resolveSessionConfig")?;
    let isolation = &schema["schema"]["properties"]["isolation"];
    assert!(isolation["enum"].as_array().is_some_and(|e| e.contains(&json!("container"))), "{isolation}");
    let said = isolation["enumDescriptions"].to_string();
    assert!(said.contains(&format!("disposable container on the engine at {}", engine.url)), "{said}");

    let (session, chat) = container_session(&mut c, &project).await.with_context(|| daemon.log())?;
    let worktree = c.folder_of(&session)?;
    assert_ne!(worktree, project, "a container session works in a worktree of its own");

    // The session says its box on its `_meta`, as every client folds it, and the window's header
    // shows it with its limits.
    let shown = c.mirror.session(&session).and_then(|s| s.meta.clone()).and_then(|m| m.get("ahpd.box").cloned());
    assert_eq!(
        shown,
        Some(json!({ "level": "container", "engine": engine.url, "reaches": ["the engine machine's network"],
                     "cpuLimit": 1.5, "memoryLimitBytes": 256 << 20 }))
    );
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 800).await?;
    online(&mut browser).await?;
    browser.wait_for(&format!("window.ahpd.sessions.has({})", js_str(&session))).await?;
    browser.eval(&format!("window.ahpd.open({}).then(() => true)", js_str(&session))).await?;
    let pane = js_str(&format!(".pane[data-chat=\"{chat}\"] .pane-box"));
    let said = browser.wait_for(&format!("document.querySelector({pane})?.textContent")).await?;
    assert_eq!(said, json!("Container 1.5 CPUs, 256 MiB"));
    let title = browser.eval(&format!("document.querySelector({pane}).title")).await?;
    assert_eq!(
        title,
        json!(format!("Everything this session runs is in a container on {}; it reaches only the engine machine's network; limits 1.5 CPUs, 256 MiB", engine.url))
    );
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("window-shots");
    std::fs::create_dir_all(&shots)?;
    browser.screenshot(&shots.join("container-session-1280x800.png")).await?;
    browser.close().await?;

    // Its `!` command runs in the image, in its worktree.
    let shown = bang(&mut c, &chat, "cat /etc/os-release; pwd").await?;
    assert!(shown.contains(PRETTY_NAME), "the image's os-release: {shown}");
    assert!(shown.contains(&worktree.display().to_string()), "it runs in its worktree: {shown}");
    // What it writes there lands in the worktree, and shows in the Changes view.
    bang(&mut c, &chat, "echo from the container > made.txt").await?;
    assert_eq!(std::fs::read_to_string(worktree.join("made.txt"))?, "from the container\n");
    let (branch, changes) = branch_changes(&mut c, &session).await?;
    let files: Vec<String> = changes.files.iter().map(|f| serde_json::to_string(f).unwrap_or_default()).collect();
    assert!(files.iter().any(|f| f.contains("made.txt")), "the Changes view shows it: {files:?}");
    assert_eq!(git(&project, &["status", "--porcelain"]), "", "the session's own repository is untouched");

    // Its terminal runs there too, in the image's shell.
    let terminal = format!("ahp-terminal:/{}", uuid::Uuid::new_v4());
    let claim = json!({ "kind": "session", "session": session, "chat": chat });
    c.request("createTerminal", json!({ "channel": terminal, "claim": claim })).await?;
    c.subscribe(&terminal).await?;
    let typed = TerminalInputAction { data: "cat /etc/os-release\r".into() };
    c.dispatch(&terminal, StateAction::TerminalInput(typed)).await?;
    let t = terminal.clone();
    c.until("the terminal to print the image's name", move |m| {
        m.terminal(&t).is_some_and(|t| terminal_output(t).contains(PRETTY_NAME))
    })
    .await?;
    c.check_against_snapshot(&terminal).await?;

    // `ahpd status` shows its container and engine.
    let containers = of_session(&engine, &podman, &session);
    assert_eq!(containers.len(), 1, "one container for the session");
    let status = daemon.status().await?;
    let boxed = &status["boxes"][0];
    assert_eq!(boxed["session"], session.as_str(), "{status}");
    assert_eq!(boxed["level"], "container");
    assert_eq!(boxed["engine"], engine.url.as_str());
    assert_eq!(boxed["image"], image);
    assert!(boxed["container"].as_str().is_some_and(|id| id.starts_with(&containers[0])), "{boxed}");
    assert!(boxed["memoryBytes"].as_u64().is_some_and(|m| m > 0), "the engine's stats: {boxed}");
    assert_eq!((boxed["cpuLimit"].as_f64(), boxed["memoryLimitBytes"].as_u64()), (Some(1.5), Some(256 << 20)));
    let said = tests::daemon::run_ahpd(&daemon.home, &["status"]).await?.stdout;
    let line = format!("box: {session} container {} on {image} (engine {})", &containers[0], engine.url);
    assert!(said.contains(&line) && said.contains("s of CPU"), "{line} in:\n{said}");
    assert!(said.contains("; limits 1.5 CPUs, 256 MiB"), "{said}");
    // The engine holds the container to them.
    let inspected = std::process::Command::new(&podman)
        .args(["inspect", "--format", "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}}", &containers[0]])
        .output()?;
    assert_eq!(String::from_utf8_lossy(&inspected.stdout).trim(), format!("1500000000 {}", 256 << 20));
    c.check_against_snapshot(&chat).await?;

    // Merging it back works as for any worktree.
    let merged = c.request("invokeChangesetOperation", json!({ "channel": branch, "operationId": "merge" })).await?;
    assert!(merged["message"].as_str().is_some_and(|m| m.starts_with("Merged ")), "{merged}");
    assert_eq!(std::fs::read_to_string(project.join("made.txt"))?, "from the container\n");
    c.check_against_snapshot(&branch).await?;

    // Deleting the session removes its container.
    c.request("disposeSession", json!({ "channel": session })).await?;
    while !of_session(&engine, &podman, &session).is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Ok(())
}

#[tokio::test]
async fn a_kill_9_leaves_no_session_container_after_the_next_start() -> anyhow::Result<()> {
    let Some(podman) = tests::skip::or_skip(podman()) else { return Ok(()) };
    let image = image(&podman)?;
    let engine = Engine::start(&podman).await?;
    let home = tempfile::Builder::new().prefix("ahpd-test-").tempdir()?;
    let (_project_dir, project) = repo();
    let options = || DaemonOptions::with_config(config(&engine.url, image));
    let mut daemon = Daemon::start_in(home.path(), options()).await?;
    let _leftovers = engine.leaves_nothing_of(&podman, &daemon.home);
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = container_session(&mut c, &project).await?;
    let shown = bang(&mut c, &chat, "cat /etc/os-release").await?;
    assert!(shown.contains(PRETTY_NAME), "{shown}");
    drop(c);
    daemon.kill9().await?;
    assert_eq!(of_session(&engine, &podman, &session).len(), 1, "the kill left its container");

    // The next start sweeps what its data folder's run left, before it listens; the session
    // gets a container again when it next runs something.
    let daemon = Daemon::start_in(home.path(), options()).await?;
    let _leftovers = engine.leaves_nothing_of(&podman, &daemon.home);
    assert!(of_session(&engine, &podman, &session).is_empty(), "swept at start");
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    c.subscribe(&session).await?;
    c.subscribe(&chat).await?;
    let shown = bang(&mut c, &chat, "cat /etc/os-release").await?;
    assert!(shown.contains(PRETTY_NAME), "{shown}");
    assert_eq!(of_session(&engine, &podman, &session).len(), 1);
    Ok(())
}

#[tokio::test]
async fn without_an_engine_the_level_is_not_offered_and_a_lost_engine_is_named() -> anyhow::Result<()> {
    let Some(podman) = tests::skip::or_skip(podman()) else { return Ok(()) };
    let image = image(&podman)?;
    let (_project_dir, project) = repo();

    // No engine answers: the form does not offer the level.
    let nowhere = tempfile::Builder::new().prefix("ahpd-noengine-").tempdir()?;
    let url = format!("unix://{}/podman.sock", nowhere.path().display());
    let daemon = Daemon::start_with(DaemonOptions::with_config(config(&url, image))).await?;
    let c = TestClient::connect(&daemon.url, "a").await?;
    let schema = c
        .request("resolveSessionConfig", json!({ "channel": ahp_types::ROOT_RESOURCE_URI, "provider": "notes" }))
        .await?;
    let isolation = &schema["schema"]["properties"]["isolation"];
    assert!(isolation["enum"].as_array().is_some_and(|e| !e.contains(&json!("container"))), "{isolation}");
    drop(c);
    drop(daemon);

    // The engine goes away under a session: its command says which engine did not answer.
    let engine = Engine::start(&podman).await?;
    let daemon = Daemon::start_with(DaemonOptions::with_config(config(&engine.url, image))).await?;
    let _leftovers = engine.leaves_nothing_of(&podman, &daemon.home);
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = container_session(&mut c, &project).await?;
    bang(&mut c, &chat, "true").await?;
    let url = engine.url.clone();
    let left = of_session(&engine, &podman, &session);
    drop(engine);
    let shown = bang(&mut c, &chat, "true").await?;
    let _ = std::process::Command::new(&podman).arg("rm").arg("-f").args(&left).output();
    assert!(shown.contains(&format!("no container engine answered at {url}")), "{shown}");
    Ok(())
}

/// What a `!` command leaves running in its container ends with it, as it would on the machine
/// (where the command's process group goes with it): a program it put in the background, and the
/// program of a command the person stopped. An engine's exec cannot end what it started; each
/// launcher's processes carry its mark, and what carries it is ended once the launcher is gone.
#[tokio::test]
async fn what_a_command_leaves_running_in_its_container_ends_with_it() -> anyhow::Result<()> {
    let Some(podman) = tests::skip::or_skip(podman()) else { return Ok(()) };
    let image = image(&podman)?;
    let engine = Engine::start(&podman).await?;
    let (_project_dir, project) = repo();
    let daemon = Daemon::start_with(DaemonOptions::with_config(config(&engine.url, image))).await?;
    let _leftovers = engine.leaves_nothing_of(&podman, &daemon.home);
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = container_session(&mut c, &project).await?;

    // Put in the background, its output elsewhere: the command ends at once, and so does it (its
    // terminal's hangup ends it as on the machine; what runs without a terminal, as a worker's
    // children do, only the sweep ends).
    let shown = bang(&mut c, &chat, "sleep 6011 </dev/null >/dev/null 2>&1 & echo started").await?;
    assert!(shown.contains("started"), "{shown}");
    until("no sleep 6011", || !runs(&["sleep", "6011"])).await.with_context(|| daemon.log())?;

    // Stopped by the person while it runs in the container.
    let turn_id = c.send(&chat, "!sleep 6013").await?;
    until("sleep 6013 to run in the container", || runs(&["sleep", "6013"])).await?;
    c.dispatch(&chat, tests::turns::stop(&turn_id)).await?;
    let turn = c.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, ahp_types::state::TurnState::Cancelled, "{turn:?}");
    until("no sleep 6013", || !runs(&["sleep", "6013"])).await.with_context(|| daemon.log())?;

    // What the person is shown of the container's processes names neither.
    let shown = bang(&mut c, &chat, "cat /proc/[0-9]*/cmdline; echo listed").await?;
    assert!(shown.contains("listed") && shown.contains("infinity"), "{shown}");
    assert!(!shown.contains("6011") && !shown.contains("6013"), "{shown}");
    Ok(())
}

/// Whether a live process runs with exactly `argv` (a container's processes are this machine's,
/// seen in its `/proc`).
fn runs(argv: &[&str]) -> bool {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    live_command_lines().contains(&want)
}

/// Until `holds` is true, looked at every 50 ms, at most the tests' patience (a failure names
/// `what`).
async fn until(what: &str, holds: impl Fn() -> bool) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + tests::PATIENCE;
    while !holds() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    anyhow::ensure!(holds(), "waited {:?} for {what}", tests::PATIENCE);
    Ok(())
}

/// Commits `files` (path, text) to `repo`.
fn commit(repo: &Path, files: &[(&str, String)]) {
    for (path, text) in files {
        let file = repo.join(path);
        std::fs::create_dir_all(file.parent().expect("a folder")).expect("mkdir");
        std::fs::write(file, text).expect("write");
        git(repo, &["add", path]);
    }
    git(repo, &["commit", "-q", "-m", "dev container"]);
}

#[tokio::test]
async fn the_repositorys_dev_container_names_the_image_or_builds_it() -> anyhow::Result<()> {
    let Some(podman) = tests::skip::or_skip(podman()) else { return Ok(()) };
    let image = image(&podman)?;
    let engine = Engine::start(&podman).await?;
    // No image in the config: only the repositories name one.
    let mut config = config(&engine.url, image);
    config.as_object_mut().map(|c| c.remove("containerImage"));
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let _leftovers = engine.leaves_nothing_of(&podman, &daemon.home);
    let mut c = TestClient::connect(&daemon.url, "a").await?;

    // `image`, in JSON with comments as editors write it.
    let (_named_dir, named) = repo();
    let json =
        format!("// the team's box\n{{\n  \"name\": \"test\",\n  \"image\": \"{image}\", // built by the test\n}}\n");
    commit(&named, &[(".devcontainer/devcontainer.json", json)]);
    let (_s, chat) = container_session(&mut c, &named).await?;
    let shown = bang(&mut c, &chat, "cat /etc/os-release").await?;
    assert!(shown.contains(PRETTY_NAME), "{shown}");

    // `build`: a Containerfile on the test's image, built through the engine's API.
    let (_built_dir, built) = repo();
    let containerfile = format!(
        "FROM {image}\nARG FLAVOUR\nRUN echo \"PRETTY_NAME=\\\"built $FLAVOUR\\\"\" > /etc/os-release\nCOPY hello.txt /hello.txt\n"
    );
    let json = r#"{ "build": { "dockerfile": "Containerfile", "context": ".", "args": { "FLAVOUR": "from the repository" } } }"#;
    commit(
        &built,
        &[
            (".devcontainer/devcontainer.json", json.to_owned()),
            (".devcontainer/Containerfile", containerfile),
            (".devcontainer/hello.txt", "hello from the context\n".to_owned()),
        ],
    );
    let (session, chat) = container_session(&mut c, &built).await?;
    let shown = bang(&mut c, &chat, "cat /etc/os-release /hello.txt").await?;
    assert!(shown.contains("built from the repository") && shown.contains("hello from the context"), "{shown}");
    let status = daemon.status().await?;
    let boxed = status["boxes"].as_array().and_then(|b| b.iter().find(|b| b["session"] == session.as_str()));
    let built_image = boxed.and_then(|b| b["image"].as_str()).unwrap_or_default();
    assert!(built_image.contains("ahpd-devcontainer-"), "{status}");

    // No dev container and no image named: the session says why nothing runs.
    let (_plain_dir, plain) = repo();
    let (_s, chat) = container_session(&mut c, &plain).await?;
    let shown = bang(&mut c, &chat, "true").await?;
    assert!(
        shown.contains("the repository has no .devcontainer/devcontainer.json and this host names no image for container sessions (containerImage)"),
        "{shown}"
    );
    Ok(())
}

/// Runs a turn whose model runs `command` with Claude Code's Bash tool; the turn must complete
/// without asking anybody, and answers what the person sees of it.
async fn claude_runs(c: &mut TestClient, chat: &str, command: &str) -> anyhow::Result<String> {
    let prompt = format!("run it TOOL:Bash ARGS:{}", json!({ "command": command }));
    let turn = c.turn(chat, &prompt).await?;
    let text = tests::turn_text(&turn);
    anyhow::ensure!(
        turn.state == ahp_types::state::TurnState::Complete,
        "the turn of `{command}` ended {:?}: {turn:?}",
        turn.state
    );
    anyhow::ensure!(text.contains("Tool result received:"), "the turn went on after the call: {text}");
    Ok(text)
}

#[tokio::test]
async fn a_claude_container_session_runs_its_cli_and_its_commands_in_the_container() -> anyhow::Result<()> {
    let Some(podman) = tests::skip::or_skip(podman()) else { return Ok(()) };
    let image = image(&podman)?;
    let engine = Engine::start(&podman).await?;
    let mock = tests::mocks::anthropic::MockAnthropic::start().await?;
    // The image has neither the CLI nor bash: they are mounted read-only, with the libraries
    // they load, as `containerMounts` lets a person do.
    let cli = tests::installed::claude_bin().canonicalize()?;
    let install = cli.ancestors().find(|p| p.ends_with("node_modules")).and_then(Path::parent).unwrap_or(&cli);
    let mut config = config(&engine.url, image);
    config["agents"] = json!({ "claude": tests::installed::claude_entry(&mock) });
    config["containerMounts"] = json!([install, "/usr/bin/bash", "/lib/x86_64-linux-gnu"]);
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let _leftovers = engine.leaves_nothing_of(&podman, &daemon.home);
    let (_project_dir, project) = repo();
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = c
        .open_session(json!({
            "provider": "claude",
            "workingDirectories": [format!("file://{}", project.display())],
            "config": { "isolation": "container", "permissionMode": "bypassPermissions" },
        }))
        .await
        .with_context(|| daemon.log())?;
    let worktree = c.folder_of(&session)?;

    let text = claude_runs(&mut c, &chat, "cat /etc/os-release; echo made > inside.txt").await?;
    assert!(text.contains(PRETTY_NAME), "the CLI's command ran in the image: {text}");
    assert_eq!(std::fs::read_to_string(worktree.join("inside.txt"))?, "made\n");
    let (_, changes) = branch_changes(&mut c, &session).await?;
    let files: Vec<String> = changes.files.iter().map(|f| serde_json::to_string(f).unwrap_or_default()).collect();
    assert!(files.iter().any(|f| f.contains("inside.txt")), "the Changes view shows it: {files:?}");
    c.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_pi_container_session_runs_pi_and_its_commands_in_the_container() -> anyhow::Result<()> {
    let Some(podman) = tests::skip::or_skip(podman()) else { return Ok(()) };
    let image = image(&podman)?;
    let engine = Engine::start(&podman).await?;
    let mock = tests::mocks::openai::MockOpenAi::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-pi-home-").tempdir()?;
    // pi's own folder where it keeps it by default (`~/.pi/agent`): the agent's state, mounted
    // writable into the container by default.
    let agent_dir = home.path().join(".pi").join("agent");
    std::fs::create_dir_all(&agent_dir)?;
    let mut config = config(&engine.url, image);
    config["agents"] = json!({ "pi": tests::installed::pi_entry(&mock, &agent_dir)? });
    // The image has neither pi nor node nor bash: they are mounted read-only, with the libraries
    // they load, as `containerMounts` lets a person do.
    let pi = tests::installed::pi_bin();
    let install = pi.ancestors().find(|p| p.ends_with("node_modules")).and_then(Path::parent).unwrap_or(&pi);
    let node = tests::installed::on_path("node").context("node is on the PATH")?;
    config["containerMounts"] = json!([install, node, "/usr/bin/env", "/usr/bin/bash", "/lib/x86_64-linux-gnu"]);
    let daemon = Daemon::start_in(home.path(), DaemonOptions::with_config(config)).await?;
    let _leftovers = engine.leaves_nothing_of(&podman, &daemon.home);
    let (_project_dir, project) = repo();
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = c
        .open_session(json!({
            "provider": "pi",
            "workingDirectories": [format!("file://{}", project.display())],
            "config": { "isolation": "container" },
        }))
        .await
        .with_context(|| daemon.log())?;
    let worktree = c.folder_of(&session)?;

    // pi's bash tool runs in the image, nobody asked; what it writes lands in the worktree.
    let turn = c.turn(&chat, "[[bash cat /etc/os-release; echo made > inside.txt]]").await?;
    assert_eq!(turn.state, ahp_types::state::TurnState::Complete, "{turn:#?}");
    let shown = serde_json::to_string(&turn)?;
    assert!(shown.contains(PRETTY_NAME), "pi's command ran in the image: {shown}");
    assert_eq!(std::fs::read_to_string(worktree.join("inside.txt"))?, "made\n");
    let (_, changes) = branch_changes(&mut c, &session).await?;
    let files: Vec<String> = changes.files.iter().map(|f| serde_json::to_string(f).unwrap_or_default()).collect();
    assert!(files.iter().any(|f| f.contains("inside.txt")), "the Changes view shows it: {files:?}");
    // The host's tools reach it (ahpd's bridge extension, loaded from pi's own folder).
    let turn = c.turn(&chat, "[[call list_sessions {}]]").await?;
    assert_eq!(turn.state, ahp_types::state::TurnState::Complete, "{turn:#?}");
    let session_id = session.trim_start_matches("ahp-session:/");
    assert!(serde_json::to_string(&turn)?.contains(session_id), "list_sessions answered in the container: {turn:#?}");
    c.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_container_session_runs_on_a_remote_engine_reached_over_ssh() -> anyhow::Result<()> {
    let Some(podman) = tests::skip::or_skip(podman()) else { return Ok(()) };
    let image = image(&podman)?;
    let engine = Engine::start(&podman).await?;
    // The engine's machine: an sshd whose key reaches the engine's API and nothing else.
    let socket = engine.url.trim_start_matches("unix://");
    let dial = format!("exec {} --url unix://{socket} system dial-stdio", podman.display());
    let Ok(sshd) = tests::sshd::Sshd::start_forcing(dial).await? else { return Ok(()) };
    let path = format!("{}:{}", sshd.ssh_on_path()?.display(), std::env::var("PATH").unwrap_or_default());
    let home = tempfile::Builder::new().prefix("ahpd-test-").tempdir()?;
    let options = || {
        let mut options = DaemonOptions::with_config(config(&sshd.url(), image));
        options.env.push(("PATH".into(), path.clone()));
        options
    };
    let mut daemon = Daemon::start_in(home.path(), options()).await?;
    let _leftovers = engine.leaves_nothing_of(&podman, &daemon.home);
    let (_project_dir, project) = repo();
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = container_session(&mut c, &project).await.with_context(|| daemon.log())?;
    let shown = bang(&mut c, &chat, "cat /etc/os-release").await?;
    assert!(shown.contains(PRETTY_NAME), "{shown}\n{}", sshd.said());
    let status = daemon.status().await?;
    assert_eq!(status["boxes"][0]["engine"], sshd.url().as_str(), "{status}");

    // A kill -9 leaves its container; the next start sweeps it over SSH.
    drop(c);
    daemon.kill9().await?;
    assert_eq!(of_session(&engine, &podman, &session).len(), 1, "the kill left its container");
    let daemon = Daemon::start_in(home.path(), options()).await?;
    assert!(of_session(&engine, &podman, &session).is_empty(), "swept at start");

    // Nothing of SSH is left running on this machine (no control master): each connection's
    // `ssh` went with its connection, or with the daemon killed above.
    drop(daemon);
    let key = sshd.ssh_argv()[4].clone();
    let _ = until("no ssh of the engine's", || processes_naming(&key).is_empty()).await;
    assert_eq!(processes_naming(&key), Vec::<String>::new(), "no ssh of the engine's is left");
    Ok(())
}

/// The command lines of the live processes (not zombies) that name `word`.
fn processes_naming(word: &str) -> Vec<String> {
    live_command_lines()
        .into_iter()
        .map(|line| String::from_utf8_lossy(&line).replace('\0', " "))
        .filter(|line| line.contains(word))
        .collect()
}

/// The command lines (NUL after each argument) of this machine's live processes, zombies left out.
fn live_command_lines() -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.parse::<u32>().is_ok()))
        .filter(|e| std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| !s.contains(") Z ")))
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .collect()
}
