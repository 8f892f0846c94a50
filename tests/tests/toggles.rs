//! Toggles reach the backend: a client's plugin toggled off on a session takes its rules out of
//! what the real `claude` CLI is told from the next turn on (the mock's logged requests show it),
//! and toggled on again brings them back; a deployment's MCP server (a real one, made with the
//! Python MCP SDK) shows on the session with the state the CLI reports, and a client's stop and
//! start take its tools out of the model's requests and back. A toggle or an MCP server request that names nothing the
//! session's state lists under `customizations` is refused in the action's `rejectionReason`, the
//! session unchanged, rather than echoed as if it had been done. Through the official client.

use ahp_types::actions::SessionMcpServerStartRequestedAction as Start;
use ahp_types::actions::{
    SessionCustomizationToggledAction, SessionMcpServerStartRequestedAction, SessionMcpServerStopRequestedAction,
    StateAction,
};
use ahp_types::state::{Customization, CustomizationEnablement, McpServerState, SessionState, TurnState};
use serde_json::json;
use tests::installed::claude_entry;
use tests::mocks::anthropic::MockAnthropic;
use tests::plugins::{publish_plugins, team_plugin, ALWAYS_RULE};
use tests::{Daemon, DaemonOptions, TestClient};

fn toggle(id: &str, enabled: bool) -> StateAction {
    StateAction::SessionCustomizationToggled(SessionCustomizationToggledAction {
        id: id.into(),
        enablement: vec![CustomizationEnablement::Session { enabled }],
    })
}

#[tokio::test]
async fn a_plugin_toggled_off_takes_its_rules_out_of_claudes_next_turn_and_back_in() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon =
        Daemon::start_with(DaemonOptions::with_config(json!({ "agents": { "claude": claude_entry(&mock) } }))).await?;
    let mut c1 = TestClient::connect(&daemon.url, "c1").await?;
    c1.client.set_resource_request_handlers(team_plugin());
    let (session, chat) = c1.create_session("claude", None).await?;
    assert_eq!(c1.turn(&chat, "hello").await?.state, TurnState::Complete);
    let plugin = json!([{ "type": "plugin", "id": "team", "uri": "virtual://c1/team", "name": "Team rules" }]);
    publish_plugins(&c1, &session, plugin).await?;
    let s = session.clone();
    c1.until("the plugin copied", move |m| {
        m.session(&s).and_then(|x| x.customizations.as_ref()).is_some_and(|list| !list.is_empty())
    })
    .await?;

    // Off: the next turn's request says nothing of the rule.
    let seq = c1.dispatch(&session, toggle("team", false)).await?;
    assert_eq!(c1.echo_of(seq).await?.rejection_reason, None);
    let asked = mock.turn_requests().len();
    assert_eq!(c1.turn(&chat, "quietly?").await?.state, TurnState::Complete);
    let request = mock.turn_requests().get(asked).cloned().expect("the model was asked");
    assert!(!request.body.to_string().contains("RULE-ALWAYS"), "the rule stays out: {}", request.body);
    assert!(request.transcript_text().contains("hello"), "the conversation went on");

    // On again: the rule is said before the next prompt.
    let seq = c1.dispatch(&session, toggle("team", true)).await?;
    assert_eq!(c1.echo_of(seq).await?.rejection_reason, None);
    let asked = mock.turn_requests().len();
    assert_eq!(c1.turn(&chat, "and now?").await?.state, TurnState::Complete);
    let request = mock.turn_requests().get(asked).cloned().expect("the model was asked");
    assert!(request.body.to_string().contains(ALWAYS_RULE), "the rule is back: {}", request.body);
    c1.check_against_snapshot(&session).await?;
    c1.check_against_snapshot(&chat).await?;
    Ok(())
}

/// Whether a request to the model offers the probe server's tool: as a tool, or in the CLI's
/// latest word on its deferred tools (a `system` message that lists them as available, or one that
/// says they are no longer; the conversation keeps the earlier ones).
fn offers_probe(request: &tests::mocks::anthropic::RecordedRequest) -> bool {
    if request.body["tools"].to_string().contains("mcp__probe__") || request.system_text().contains("mcp__probe__") {
        return true;
    }
    let latest = request
        .messages()
        .into_iter()
        .rev()
        .filter(|m| m["role"] == "system")
        .map(|m| m.to_string())
        .find(|text| text.contains("mcp__probe__shout"));
    latest.is_some_and(|text| !text.contains("no longer available"))
}

/// The state the session shows for MCP server `id`.
fn server_state(session: Option<&SessionState>, id: &str) -> Option<McpServerState> {
    session?.customizations.as_ref()?.iter().find_map(|c| match c {
        Customization::McpServer(m) if m.id == id => Some(m.state.clone()),
        _ => None,
    })
}

#[tokio::test]
async fn a_deployments_mcp_server_shows_its_state_and_a_client_stops_and_starts_it() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp/server.py");
    let probe = json!({ "type": "stdio", "command": tests::mcp::python(), "args": [script] });
    let config = json!({ "agents": { "claude": claude_entry(&mock) }, "mcpServers": { "probe": probe } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("claude", None).await?;
    assert!(
        matches!(server_state(a.mirror.session(&session), "probe"), Some(McpServerState::Starting(_))),
        "shown before the backend said anything"
    );
    let asked = mock.turn_requests().len();
    assert_eq!(a.turn(&chat, "hello").await?.state, TurnState::Complete);
    let s = session.clone();
    a.until("the CLI says the server runs", move |m| {
        matches!(server_state(m.session(&s), "probe"), Some(McpServerState::Ready(_)))
    })
    .await?;
    let request = mock.turn_requests().get(asked).cloned().expect("the model was asked");
    assert!(offers_probe(&request), "the server's tool is offered");

    // Stopped: the next turn's CLI runs without it.
    let seq = a
        .dispatch(
            &session,
            StateAction::SessionMcpServerStopRequested(SessionMcpServerStopRequestedAction { id: "probe".into() }),
        )
        .await?;
    assert_eq!(a.echo_of(seq).await?.rejection_reason, None);
    assert!(matches!(server_state(a.mirror.session(&session), "probe"), Some(McpServerState::Stopped(_))));
    let asked = mock.turn_requests().len();
    assert_eq!(a.turn(&chat, "without it?").await?.state, TurnState::Complete);
    let request = mock.turn_requests().get(asked).cloned().expect("the model was asked");
    assert!(!offers_probe(&request), "its tools are gone");
    assert!(request.transcript_text().contains("hello"), "the conversation went on");
    assert!(matches!(server_state(a.mirror.session(&session), "probe"), Some(McpServerState::Stopped(_))));

    // Started again: back at the next turn, and said to run.
    let seq = a.dispatch(&session, StateAction::SessionMcpServerStartRequested(Start { id: "probe".into() })).await?;
    assert_eq!(a.echo_of(seq).await?.rejection_reason, None);
    let asked = mock.turn_requests().len();
    assert_eq!(a.turn(&chat, "and with it?").await?.state, TurnState::Complete);
    let s = session.clone();
    a.until("the server runs again", move |m| {
        matches!(server_state(m.session(&s), "probe"), Some(McpServerState::Ready(_)))
    })
    .await?;
    let request = mock.turn_requests().get(asked).cloned().expect("the model was asked");
    assert!(offers_probe(&request), "its tool is back");
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn toggling_what_the_session_does_not_list_is_refused_naming_it() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, _chat) = a.create_session("echo", None).await?;
    let cases = [
        (toggle("plugin-x", false), "This session has no customization plugin-x"),
        (
            StateAction::SessionMcpServerStartRequested(SessionMcpServerStartRequestedAction { id: "github".into() }),
            "This session has no MCP server github",
        ),
        (
            StateAction::SessionMcpServerStopRequested(SessionMcpServerStopRequestedAction { id: "github".into() }),
            "This session has no MCP server github",
        ),
    ];
    let before = a.mirror.session(&session).cloned();
    for (action, says) in cases {
        let seq = a.dispatch(&session, action).await?;
        let echo = a.echo_of(seq).await?;
        let reason = echo.rejection_reason.unwrap_or_default();
        assert!(reason.starts_with(says), "refused with {reason:?}, expected {says:?}");
    }
    a.check_against_snapshot(&session).await?;
    assert_eq!(a.mirror.session(&session).cloned(), before, "the session is unchanged");
    Ok(())
}
