//! The daemon's core through the official AHP client: handshake, sessions, turns folded through the
//! official reducers and compared with the host's snapshots, echoes, reconnects.

use ahp_types::state::TurnState;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

#[tokio::test]
async fn echo_turns_fold_to_the_hosts_snapshot() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut a = TestClient::connect(&daemon.url, "client-a").await?;
    let (session, chat) = a
        .create_session("echo", Some(serde_json::json!({ "voice": "shouty" })))
        .await?;
    for text in ["hello there", "second turn with more words"] {
        let turn = a.turn(&chat, text).await?;
        assert_eq!(turn.state, TurnState::Complete);
        assert_eq!(turn_text(&turn), text.to_uppercase());
        a.check_against_snapshot(&chat).await?;
        a.check_against_snapshot(&session).await?;
        a.check_against_snapshot(ahp_types::ROOT_RESOURCE_URI)
            .await?;
    }
    let _ = DaemonOptions::default();
    Ok(())
}
