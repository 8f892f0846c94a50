//! The rest of seed 004's contract with a backend, end to end through the real `ahpd`, the
//! official client and the real Claude Code CLI against the scripted Anthropic mock: the account
//! Claude bills to reaches the root config of a connection that holds `account:read` and no other,
//! and the operator's policy set in the daemon's config (`managedSettings`,
//! `autoApprovePolicyRestricted`) reaches the worker's schema, every start, and the CLI itself.

use ahp_types::actions::StateAction;
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::{json, Value};
use tests::daemon::Home;
use tests::installed::claude_entry;
use tests::mocks::anthropic::{MockAnthropic, HELLO};
use tests::raw::RawSocket;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

const ROOT_TOKEN: &str = "root-secret-token";

fn url_with(daemon: &Daemon, token: &str) -> String {
    format!("{}/?tkn={token}", daemon.url.trim_end_matches('/'))
}

/// The account a client's root config shows, null when it shows none.
fn account_shown(client: &TestClient) -> Value {
    client
        .mirror
        .root()
        .and_then(|root| root.config.as_ref())
        .and_then(|config| config.values.get("account").cloned())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_account_claude_bills_to_reaches_a_person_holding_account_read_and_nobody_else() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = Home::new()?;
    let added = home.expect(0, &["user", "add", "ana", "--role", "member", "--users", "users.json"]).await?;
    let ana_token = added.stdout.trim().to_owned();
    let options = DaemonOptions {
        args: vec!["--users".into(), "users.json".into(), "--connection-token".into(), ROOT_TOKEN.into()],
        config: Some(json!({ "agents": { "claude": claude_entry(&mock) } })),
        ..DaemonOptions::default()
    };
    let daemon = Daemon::start_in(home.path(), options).await?;
    // Both watch the root from before the probe answers, so each is either told the change or
    // handed it in its snapshot.
    let mut root = TestClient::connect(&url_with(&daemon, ROOT_TOKEN), "root-window").await?;
    let mut ana = TestClient::connect(&url_with(&daemon, &ana_token), "ana-window").await?;

    root.until("Claude's account on the root config", |m| {
        m.root().and_then(|r| r.config.as_ref()).is_some_and(|c| c.values.get("account").is_some())
    })
    .await?;
    // What the real CLI's `initialize` says with a key in its environment.
    assert_eq!(
        account_shown(&root)["claude"],
        json!({ "type": "apiKey", "apiKeySource": "ANTHROPIC_API_KEY", "apiProvider": "firstParty", "tokenSource": "none" }),
        "{}",
        account_shown(&root)
    );
    let schema = root.mirror.root().and_then(|r| r.config.as_ref()).map(|c| c.schema.properties.clone());
    assert_eq!(schema.and_then(|p| p.get("account").and_then(|a| a.read_only)), Some(true));
    root.check_against_snapshot(ROOT_RESOURCE_URI).await?;

    // A member does not hold account:read: told nothing of it live, nor in a snapshot. The fresh
    // subscribe is answered after the change was said, so anything said to ana came before it.
    ana.check_against_snapshot(ROOT_RESOURCE_URI).await?;
    let told = ana
        .envelopes
        .iter()
        .any(|e| matches!(&e.action, StateAction::RootConfigChanged(a) if a.config.contains_key("account")));
    assert!(!told, "a member was told the account");
    assert_eq!(account_shown(&ana), Value::Null, "a member's root snapshot leaves it out");
    let later = TestClient::connect(&url_with(&daemon, &ana_token), "ana-second-window").await?;
    assert_eq!(account_shown(&later), Value::Null);
    assert!(later
        .mirror
        .root()
        .and_then(|r| r.config.as_ref())
        .is_some_and(|c| !c.schema.properties.contains_key("account")));
    // A connection that may read it and connects later finds it in its snapshot.
    let again = TestClient::connect(&url_with(&daemon, ROOT_TOKEN), "root-second-window").await?;
    assert_eq!(account_shown(&again)["claude"]["type"], "apiKey");

    // A reconnect from before the change is answered with a snapshot cut for its person, never
    // with a replay that would carry the account to somebody who may not read it.
    for (token, client_id, shows) in [(ana_token.as_str(), "ana-window", false), (ROOT_TOKEN, "root-window", true)] {
        let mut ws = RawSocket::connect(&url_with(&daemon, token)).await?;
        let params = json!({ "channel": ROOT_RESOURCE_URI, "clientId": client_id, "lastSeenServerSeq": 0,
                             "subscriptions": [ROOT_RESOURCE_URI] });
        let answer = ws.call(1, "reconnect", params).await?;
        assert_eq!(answer["result"]["type"], "snapshot", "{answer}");
        let values = &answer["result"]["snapshots"][0]["state"]["config"]["values"];
        assert_eq!(values.get("account").is_some(), shows, "{client_id}: {values}");
    }
    Ok(())
}

#[tokio::test]
async fn the_operators_policy_reaches_claudes_schema_its_sessions_and_the_cli() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon = Daemon::start_with(DaemonOptions::with_config(json!({
        "agents": { "claude": claude_entry(&mock) },
        "autoApprovePolicyRestricted": true,
        "managedSettings": { "permissions": { "deny": ["Bash"] } },
    })))
    .await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;

    // The client is shown the policy in force.
    let values = a.mirror.root().and_then(|r| r.config.as_ref()).map(|c| c.values.clone()).unwrap_or_default();
    assert_eq!(values.get("autoApprovePolicyRestricted"), Some(&json!(true)));
    assert_eq!(values.get("managedSettings"), Some(&json!({ "permissions": { "deny": ["Bash"] } })));

    // The worker's schema was asked under it: the new-session form offers no mode that approves
    // everything, and a session cannot be made in one.
    let resolved =
        a.request("resolveSessionConfig", json!({ "channel": ROOT_RESOURCE_URI, "provider": "claude" })).await?;
    let modes = resolved["schema"]["properties"]["permissionMode"]["enum"].clone();
    assert_eq!(modes, json!(["default", "acceptEdits", "plan"]), "{resolved}");
    let refused = a
        .request(
            "createSession",
            json!({ "channel": "ahp-session:/bypass", "provider": "claude", "config": { "permissionMode": "bypassPermissions" } }),
        )
        .await;
    assert!(
        matches!(&refused, Err(ahp::ClientError::Rpc(e)) if e.message == "Session configuration 'permissionMode' does not offer 'bypassPermissions'."),
        "{refused:?}"
    );

    // The start handed the managed settings to the CLI, which enforces them: the model is not
    // offered the tool they deny, and is offered the rest.
    let (_session, chat) = a.create_session("claude", None).await?;
    let turn = a.turn(&chat, "say hello there").await?;
    assert_eq!(turn_text(&turn), format!("{HELLO}say hello there"));
    let request = mock.turn_requests().last().cloned().expect("the model was asked");
    let tools = request.tool_names();
    assert!(tools.iter().any(|t| t == "Read"), "{tools:?}");
    assert!(!tools.iter().any(|t| t == "Bash"), "the managed settings deny Bash: {tools:?}");
    Ok(())
}

#[tokio::test]
async fn claudes_output_styles_are_answered_as_completions_and_the_one_chosen_reaches_the_cli() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon =
        Daemon::start_with(DaemonOptions::with_config(json!({ "agents": { "claude": claude_entry(&mock) } }))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    // The styles are the CLI's own, learned at the probe: wait until it has answered.
    a.until("Claude's models from its probe", |m| {
        m.root().is_some_and(|r| r.agents.iter().any(|agent| agent.provider == "claude" && !agent.models.is_empty()))
    })
    .await?;

    let resolved =
        a.request("resolveSessionConfig", json!({ "channel": ROOT_RESOURCE_URI, "provider": "claude" })).await?;
    assert_eq!(resolved["schema"]["properties"]["outputStyle"]["enumDynamic"], true, "{resolved}");
    let asked =
        json!({ "channel": ROOT_RESOURCE_URI, "provider": "claude", "property": "outputStyle", "query": "expl" });
    let answered = a.request("sessionConfigCompletions", asked).await?;
    let values: Vec<Value> = answered["items"]
        .as_array()
        .map(|items| items.iter().map(|i| i["value"].clone()).collect())
        .unwrap_or_default();
    assert_eq!(values, vec![json!("Explanatory")], "{answered}");

    // Without a style the model is told of none; with one, the CLI tells it.
    let (_plain, chat) = a.create_session("claude", None).await?;
    a.turn(&chat, "say hello there").await?;
    let request = mock.turn_requests().last().cloned().expect("the model was asked");
    let said = format!("{}\n{}", request.system_text(), request.transcript_text());
    assert!(!said.contains("Explanatory"), "{said}");
    let (_session, chat) = a.create_session("claude", Some(json!({ "outputStyle": "Explanatory" }))).await?;
    let turn = a.turn(&chat, "say hello there").await?;
    assert_eq!(turn_text(&turn), format!("{HELLO}say hello there"));
    let request = mock.turn_requests().last().cloned().expect("the model was asked");
    let said = format!("{}\n{}", request.system_text(), request.transcript_text());
    assert!(said.contains("Explanatory"), "the chosen style reaches the model: {said}");
    Ok(())
}
