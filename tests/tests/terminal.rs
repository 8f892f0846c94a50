//! The terminal client in the `ahpd` binary, run as a person runs it against a real daemon and
//! checked with the official client: `ahpd send` prints the reply and exits 0, a failing turn exits
//! 1, confirmations follow --yes/--no (and are denied with no terminal to ask on); `ahpd sessions
//! --json` lists what listSessions lists; `ahpd connect` prints the settings VS Code reads; `ahpd
//! watch` follows what happens across sessions and in one.

use std::path::Path;
use std::process::Stdio;

use anyhow::Context;
use serde_json::{json, Value};
use tests::daemon::{ahpd_bin, run_ahpd, VerbRun};
use tests::{strip_nulls, turn_text, Daemon, DaemonOptions, TestClient};
use tokio::io::{AsyncBufReadExt, BufReader};

fn echo_and_notes(notes: &std::path::Path) -> Value {
    json!({ "agents": { "echo": tests::agents::echo(), "notes": tests::agents::notes_in(notes) } })
}

async fn ahpd(daemon: &Daemon, args: &[&str], code: i32) -> anyhow::Result<VerbRun> {
    let run = run_ahpd(&daemon.home, args).await?;
    anyhow::ensure!(
        run.code == code,
        "ahpd {} exited {} (expected {code});\nstdout:\n{}\nstderr:\n{}",
        args.join(" "),
        run.code,
        run.stdout,
        run.stderr
    );
    Ok(run)
}

/// The session a `send` started, from what it said on stderr.
fn started_session(run: &VerbRun) -> anyhow::Result<String> {
    run.stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("New session on ").and_then(|rest| rest.split_once(": ")).map(|(_, s)| s.trim().to_owned())
        })
        .with_context(|| format!("no session named in {}", run.stderr))
}

#[tokio::test]
async fn send_prints_the_reply_and_exits_0_and_a_failing_turn_exits_1() -> anyhow::Result<()> {
    let notes = tempfile::tempdir()?;
    let daemon = Daemon::start_with(DaemonOptions::with_config(echo_and_notes(notes.path()))).await?;
    let run = ahpd(&daemon, &["send", "--agent", "echo", "hi"], 0).await?;
    assert_eq!(run.stdout, "hi\n");
    let session = started_session(&run)?;

    // The same session again; the official client sees both turns.
    let run = ahpd(&daemon, &["send", "--session", &session, "and", "again"], 0).await?;
    assert_eq!(run.stdout, "and again\n");
    let mut client = TestClient::connect(&daemon.url, "checker").await?;
    let chat = session.replace("ahp-session:", "ahp-chat:");
    client.subscribe(&chat).await?;
    let turns = &client.mirror.chat(&chat).context("no chat")?.turns;
    assert_eq!(turns.iter().map(turn_text).collect::<Vec<_>>(), ["hi", "and again"]);

    // `--url` naming this very daemon finds its token as the plain command does.
    let by_url = ahpd(&daemon, &["send", "--url", &daemon.url, "--agent", "echo", "by url"], 0).await?;
    assert_eq!(by_url.stdout, "by url\n", "{}", by_url.stderr);

    let failed = ahpd(&daemon, &["send", "--agent", "notes", "error"], 1).await?;
    assert!(failed.stderr.contains("The turn failed: "), "{}", failed.stderr);
    let none = run_ahpd(&daemon.home, &["send", "--agent", "nobody", "hi"]).await?;
    assert_eq!(none.code, 1, "an agent that does not exist is refused: {}", none.stderr);
    Ok(())
}

#[tokio::test]
async fn a_confirmation_follows_yes_or_no_and_is_denied_with_no_terminal_to_ask_on() -> anyhow::Result<()> {
    let notes = tempfile::tempdir()?;
    let daemon = Daemon::start_with(DaemonOptions::with_config(echo_and_notes(notes.path()))).await?;
    let yes = ahpd(&daemon, &["send", "--agent", "notes", "--yes", "write yes.txt allowed"], 0).await?;
    assert!(yes.stderr.contains("allowed (--yes)"), "{}", yes.stderr);
    assert_eq!(std::fs::read_to_string(notes.path().join("yes.txt"))?, "allowed");

    let no = ahpd(&daemon, &["send", "--agent", "notes", "--no", "write no.txt denied"], 0).await?;
    assert!(no.stderr.contains("denied (--no)"), "{}", no.stderr);
    let quiet = ahpd(&daemon, &["send", "--agent", "notes", "write quiet.txt denied"], 0).await?;
    assert!(quiet.stderr.contains("denied: no terminal to ask on"), "{}", quiet.stderr);
    assert!(!notes.path().join("no.txt").exists() && !notes.path().join("quiet.txt").exists());

    let question = ahpd(&daemon, &["send", "--agent", "notes", "ask your name?"], 0).await?;
    assert!(question.stderr.contains("declined: no terminal to answer on"), "{}", question.stderr);
    Ok(())
}

#[tokio::test]
async fn sessions_json_lists_what_list_sessions_lists() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(DaemonOptions::with_config(tests::agents::echo_only())).await?;
    let empty = ahpd(&daemon, &["sessions"], 0).await?;
    assert_eq!(empty.stdout.trim(), "No sessions.");
    let mut client = TestClient::connect(&daemon.url, "checker").await?;
    for text in ["first", "second", "third"] {
        let (_, chat) = client.create_session("echo", None).await?;
        client.turn(&chat, text).await?;
    }
    let listed = client.request("listSessions", json!({ "channel": "ahp-root://" })).await?;
    let run = ahpd(&daemon, &["sessions", "--json"], 0).await?;
    let printed: Value = serde_json::from_str(&run.stdout)?;
    assert_eq!(strip_nulls(printed), strip_nulls(listed["items"].clone()));

    let human = ahpd(&daemon, &["sessions"], 0).await?;
    let lines: Vec<&str> = human.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", human.stdout);
    for (line, item) in lines.iter().zip(listed["items"].as_array().context("items")?) {
        assert!(line.starts_with("idle        echo     "), "{line}");
        assert!(line.contains(item["resource"].as_str().unwrap_or("?")), "{line}");
    }
    Ok(())
}

#[tokio::test]
async fn connect_prints_the_settings_vs_code_reads_with_the_token() -> anyhow::Result<()> {
    let token = "vs-code-token";
    let options = DaemonOptions { args: vec!["--connection-token".into(), token.into()], ..DaemonOptions::default() };
    let daemon = Daemon::start_with(options).await?;
    let run = ahpd(&daemon, &["connect"], 0).await?;
    let settings: Value = serde_json::from_str(&run.stdout).context("connect prints JSON")?;
    let address = daemon.url.trim_start_matches("ws://");
    assert_eq!(
        settings,
        json!({ "chat.remoteAgentHostsEnabled": true,
                "chat.remoteAgentHosts": [{ "address": address, "name": "ahpd", "connectionToken": token }] })
    );
    let http = daemon.url.replace("ws://", "http://");
    assert!(run.stderr.contains(&format!("{http}/?tkn={token}")), "the page's address: {}", run.stderr);
    assert!(run.stderr.contains(&format!("{}/?tkn={token}", daemon.url)), "VS Code's URL: {}", run.stderr);

    // The client verbs found the token the daemon was started with; a wrong one is refused.
    ahpd(&daemon, &["sessions"], 0).await?;
    let refused = ahpd(&daemon, &["sessions", "--token", "wrong"], 1).await?;
    assert!(refused.stderr.contains("refused the token"), "{}", refused.stderr);
    Ok(())
}

#[tokio::test]
async fn connect_without_a_token_leaves_it_out_and_none_running_says_so() -> anyhow::Result<()> {
    let options = DaemonOptions { args: vec!["--without-connection-token".into()], ..DaemonOptions::default() };
    let mut daemon = Daemon::start_with(options).await?;
    let run = ahpd(&daemon, &["connect"], 0).await?;
    let settings: Value = serde_json::from_str(&run.stdout)?;
    assert_eq!(settings["chat.remoteAgentHosts"][0].get("connectionToken"), None, "{settings}");
    daemon.terminate().await?;
    let none = ahpd(&daemon, &["connect"], 1).await?;
    assert!(none.stderr.starts_with("None running."), "{}", none.stderr);
    Ok(())
}

/// `ahpd watch …` running in the background, its stdout read line by line.
struct Watching {
    _child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    said: Vec<String>,
}

impl Watching {
    async fn start(daemon: &Daemon, args: &[&str]) -> anyhow::Result<Self> {
        Self::start_in(&daemon.home, args).await
    }

    async fn start_in(home: &Path, args: &[&str]) -> anyhow::Result<Self> {
        let mut child = tokio::process::Command::new(ahpd_bin())
            .arg("watch")
            .args(args)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env("HOME", home)
            .env_remove("AHPD_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut stderr = BufReader::new(child.stderr.take().context("stderr")?).lines();
        // It says on stderr when it is watching.
        let first = tokio::time::timeout(tests::PATIENCE, stderr.next_line()).await??;
        anyhow::ensure!(first.as_deref().is_some_and(|l| l.starts_with("Watching ")), "watch said {first:?}");
        tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
        Ok(Self { _child: child, lines: BufReader::new(stdout).lines(), said: Vec::new() })
    }

    /// Reads until a line contains `needle`.
    async fn until(&mut self, needle: &str) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + tests::PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let line = tokio::time::timeout(left, self.lines.next_line())
                .await
                .with_context(|| format!("watch never said {needle:?}; it said {:?}", self.said))??
                .with_context(|| format!("watch ended; it said {:?}", self.said))?;
            self.said.push(line.clone());
            if line.contains(needle) {
                return Ok(line);
            }
        }
    }
}

#[tokio::test]
async fn watch_follows_activity_across_sessions_and_in_one() -> anyhow::Result<()> {
    let notes = tempfile::tempdir()?;
    let daemon = Daemon::start_with(DaemonOptions::with_config(echo_and_notes(notes.path()))).await?;
    let mut all = Watching::start(&daemon, &[]).await?;
    let mut client = TestClient::connect(&daemon.url, "driver").await?;
    let (session, chat) = client.create_session("echo", None).await?;
    all.until(&format!("+ New session (echo, {session})")).await?;
    client.turn(&chat, "hello watch").await?;
    all.until("▸ hello watch").await?;
    all.until("◂ hello watch").await?;
    let (_, notes_chat) = client.create_session("notes", None).await?;
    client.send(&notes_chat, "write w.txt x").await?;
    all.until("? needs you: Write note w.txt?").await?;

    let mut one = Watching::start(&daemon, &[&session]).await?;
    client.turn(&chat, "just this one").await?;
    one.until("▸ just this one").await?;
    one.until("just this one").await?;
    Ok(())
}

/// The URL (with its token) of the daemon `ahpd start` left running in `home`.
fn started_url(home: &tests::Home) -> anyhow::Result<String> {
    let record = home.record().context("no daemon record")?;
    let url = record["url"].as_str().context("no url in the record")?.to_owned();
    let token = tests::daemon::kept_token(home.path()).context("no token kept")?;
    Ok(format!("{url}/?tkn={token}"))
}

#[tokio::test]
async fn watch_waits_out_a_restart_and_goes_on_watching() -> anyhow::Result<()> {
    let home = tests::Home::new()?;
    home.write_config(&tests::agents::echo_only())?;
    home.expect(0, &["start", "--port", "0"]).await?;
    let mut all = Watching::start_in(home.path(), &[]).await?;
    let mut client = TestClient::connect(&started_url(&home)?, "driver").await?;
    let (session, chat) = client.create_session("echo", None).await?;
    client.turn(&chat, "before the restart").await?;
    all.until("◂ before the restart").await?;
    let mut one = Watching::start_in(home.path(), &[&session]).await?;
    drop(client);

    // `ahpd restart` starts it again on a port of its own (`--port 0`): the watchers find it
    // through its record.
    home.expect(0, &["restart"]).await?;
    let mut client = TestClient::connect(&started_url(&home)?, "driver").await?;
    client.subscribe(&session).await?;
    client.subscribe(&chat).await?;
    client.turn(&chat, "after the restart").await?;
    // The turn may be over before a watcher is back (echo answers at once); caught up, a watcher
    // shows its reply either way.
    all.until("◂ after the restart").await?;
    one.until("▸ after the restart").await?;
    one.until("after the restart").await?;
    home.expect(0, &["stop"]).await.map(|_| ())
}

#[tokio::test]
async fn start_prints_the_page_with_its_token_and_the_daemons_log_does_not_hold_it() -> anyhow::Result<()> {
    let home = tests::Home::new()?;
    home.write_config(&tests::agents::echo_only())?;
    let started = home.expect(0, &["start", "--port", "0", "--connection-token", "in-the-terminal"]).await?;
    let url = started.stdout.lines().next().and_then(|l| l.strip_prefix("ahpd on ")).and_then(|l| l.split(' ').next());
    let http = url.context("no url")?.replace("ws://", "http://");
    assert!(started.stdout.lines().any(|l| l == format!("web: {http}/?tkn=in-the-terminal")), "{}", started.stdout);
    assert!(home.log().contains(&format!("web: {http}/")), "{}", home.log());
    assert!(!home.log().contains("in-the-terminal"), "the log never holds the token: {}", home.log());
    home.expect(0, &["stop"]).await.map(|_| ())
}
