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
