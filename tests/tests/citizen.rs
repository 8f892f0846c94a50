//! A good citizen on a developer's laptop, through the real binary: a connection token by default
//! (made once, kept 0600, kept across a restart), secrets kept out of the record, `status`,
//! `config` and the log, private files, a limit on connections, SIGHUP, logs that rotate while the
//! daemon runs, the service unit, the agents it finds, completions, and progress while a verb waits.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ahp_types::state::TurnState;
use tests::daemon::{kept_token, run_ahpd};
use tests::raw::upgrade_as_given;
use tests::{Daemon, DaemonOptions, TestClient};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).map(|m| m.permissions().mode() & 0o777).unwrap_or(0)
}

#[tokio::test]
async fn with_no_token_choice_a_token_is_made_kept_private_and_kept_across_a_restart() -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("ahpd-citizen-").tempdir()?;
    let mut daemon = Daemon::start_in(home.path(), DaemonOptions::default()).await?;
    let token = daemon.token.clone().expect("the daemon made a token");
    let file = home.path().join("data/ahpd/connection-token");
    assert_eq!(std::fs::read_to_string(&file)?.trim(), token);
    assert_eq!(mode(&file), 0o600, "the token file is the owner's alone");

    assert_eq!(upgrade_as_given(&daemon.url, &[]).await.err(), Some(401), "no token, no connection");
    assert_eq!(upgrade_as_given(&format!("{}/?tkn=wrong", daemon.url), &[]).await.err(), Some(401));
    let mut client = TestClient::connect(&format!("{}/?tkn={token}", daemon.url), "a").await?;
    let (_session, chat) = client.create_session("echo", None).await?;
    assert_eq!(client.turn(&chat, "hello").await?.state, TurnState::Complete);
    assert!(daemon.stdout.lock().map(|l| l.iter().any(|l| l.starts_with("token: made and kept in"))).unwrap_or(false));
    assert!(!daemon.log().contains(&token), "the token is never logged");
    drop(client);
    daemon.terminate().await?;

    let again = Daemon::start_in(home.path(), DaemonOptions::default()).await?;
    assert_eq!(again.token.as_deref(), Some(token.as_str()), "a restart keeps the same token");
    assert_eq!(kept_token(home.path()).as_deref(), Some(token.as_str()));
    assert_eq!(upgrade_as_given(&again.url, &[]).await.err(), Some(401));
    assert!(upgrade_as_given(&again.url, &[("authorization", &format!("Bearer {token}"))]).await.is_ok());
    let said = again.stdout.lock().map(|l| l.join("\n")).unwrap_or_default();
    assert!(said.contains(&format!("token: kept in {}", file.display())), "{said}");
    Ok(())
}

#[tokio::test]
async fn without_a_token_the_daemon_says_the_risk() -> anyhow::Result<()> {
    let options = DaemonOptions { args: vec!["--without-connection-token".into()], ..Default::default() };
    let daemon = Daemon::start_with(options).await?;
    assert!(upgrade_as_given(&daemon.url, &[]).await.is_ok(), "no token asked");
    let warning = daemon.wait_for_log("no connection token", tests::PATIENCE).await?;
    assert!(warning.contains("every account on this machine"), "{warning}");
    assert!(!daemon.home.join("data/ahpd/connection-token").exists(), "none was made");
    let run = run_ahpd(&daemon.home, &["status", "--json"]).await?;
    assert_eq!(run.code, 0, "{run:?}");
    Ok(())
}

#[tokio::test]
async fn a_token_on_the_command_line_is_in_no_record_status_config_or_log() -> anyhow::Result<()> {
    const SECRET: &str = "s3cret-on-the-line";
    let home = tests::Home::new()?;
    home.write_config(&serde_json::json!({ "agents": { "echo": { "kind": "echo" } } }))?;
    let started = home.expect(0, &["start", "--port", "0", "--connection-token", SECRET]).await?;
    assert!(started.stderr.contains("--connection-token-file"), "a warning suggests a file: {}", started.stderr);
    let url = started.stdout.lines().next().and_then(|l| l.split_whitespace().nth(2)).unwrap_or_default().to_owned();
    let mut client = TestClient::connect(&format!("{url}/?tkn={SECRET}"), "a").await?;
    let (_session, chat) = client.create_session("echo", None).await?;
    client.turn(&chat, "hello").await?;

    let record = std::fs::read_to_string(home.data_dir().join("daemon.json"))?;
    assert!(!record.contains(SECRET), "{record}");
    assert!(record.contains("<set>"), "the record says a token was given: {record}");
    let status = home.expect(0, &["status", "--json"]).await?.stdout;
    assert!(!status.contains(SECRET), "{status}");
    let text = home.expect(0, &["status"]).await?.stdout;
    assert!(!text.contains(SECRET), "{text}");
    let config = home.expect(0, &["config", "--connection-token", SECRET]).await?;
    assert!(!config.stdout.contains(SECRET) && !config.stderr.contains(SECRET), "{config:?}");
    let config = home.expect(0, &["config", "--json", "--connection-token", SECRET]).await?;
    assert!(!config.stdout.contains(SECRET), "{}", config.stdout);
    let log = home.log();
    assert!(log.contains("--connection-token-file"), "the daemon warns in its log too:\n{log}");
    assert!(!log.contains(SECRET), "{log}");
    drop(client);
    home.expect(0, &["stop"]).await?;
    assert!(!home.log().contains(SECRET));
    Ok(())
}

#[tokio::test]
async fn a_fresh_start_keeps_every_file_private() -> anyhow::Result<()> {
    let home = tests::Home::new()?;
    home.write_config(&serde_json::json!({ "agents": { "echo": { "kind": "echo" } } }))?;
    let started = home.expect(0, &["start", "--port", "0"]).await?;
    let url = started.stdout.lines().next().and_then(|l| l.split_whitespace().nth(2)).unwrap_or_default().to_owned();
    let mut client = TestClient::connect(&url, "a").await?;
    let (_session, chat) = client.create_session("echo", None).await?;
    client.turn(&chat, "something to keep").await?;

    let data = home.data_dir();
    assert_eq!(mode(&data), 0o700, "the data folder");
    for name in [
        "sessions.db",
        "sessions.db-wal",
        "sessions.db-shm",
        "daemon.json",
        "ahpd.sock",
        "daemon.log",
        "connection-token",
    ] {
        assert!(data.join(name).exists(), "{name} exists");
        assert_eq!(mode(&data.join(name)), 0o600, "{name}");
    }
    drop(client);
    home.expect(0, &["stop"]).await?;
    Ok(())
}

#[tokio::test]
async fn a_looser_data_folder_is_tightened_at_start_and_says_so() -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("ahpd-citizen-").tempdir()?;
    let data = home.path().join("data/ahpd");
    std::fs::create_dir_all(&data)?;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755))?;
    std::fs::write(data.join("sessions.db"), b"")?;
    std::fs::set_permissions(data.join("sessions.db"), std::fs::Permissions::from_mode(0o644))?;
    let daemon = Daemon::start_in(home.path(), DaemonOptions::default()).await?;
    let said = daemon.wait_for_log("tightened", tests::PATIENCE).await?;
    assert!(said.contains("from 755 to 700"), "{said}");
    daemon.wait_for_log("sessions.db", tests::PATIENCE).await?;
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("sessions.db")), 0o600);
    Ok(())
}
