//! The session tools' own refusals and what a session is offered (seed 000 "The host's own tools",
//! "Which sessions are offered the session tools"), and a session's settings (seed 004 "Config
//! keys"): each refusal is the host's sentence, said to the model as the call's error, and a tool
//! left out is never offered rather than refused at call time.

use serde_json::{json, Value};

use crate::world::{results_of, session_in, text_of, Client, Session, World};

async fn notes_with(change: impl FnOnce(&mut ahpd::host::HostConfig)) -> (World, Client, Session) {
    let mut world = World::builder().agent("notes").agent("echo").config(change).start().await;
    let alice = world.connect("alice").await;
    let session =
        world.create_session_with(&alice, "notes", json!({ "config": { "ask": "never" } })).await.expect("made");
    (world, alice, session)
}

async fn notes() -> (World, Client, Session) {
    notes_with(|_| {}).await
}

/// Calls `tool` with `input` in a turn of `who`'s chat, allowing it if it waits for a person (a
/// destructive tool does in every mode); answers (success, text).
async fn call(world: &mut World, who: &Client, tool: &str, input: Value) -> (bool, String) {
    world.turn(who, &format!("call {tool} {input}")).await;
    world.allow_waiting(who).await;
    results_of(world.last_turn(who)).pop().expect("the call's result")
}

fn refused(sentence: &str) -> (bool, String) {
    (false, sentence.to_owned())
}

/// The names of the tools the session's model was handed.
async fn offered(world: &mut World, who: &Client) -> Vec<String> {
    world.turn(who, "tools").await;
    let said = text_of(world.last_turn(who));
    let list = said.split("tools: ").nth(1).unwrap_or_default();
    list.split(", ").map(str::to_owned).filter(|n| !n.is_empty()).collect()
}

fn link(session: &Session, provider: &str) -> String {
    format!("agent-host-session://{provider}/{}", session.uri.trim_start_matches("ahp-session:/"))
}

#[tokio::test(start_paused = true)]
async fn delete_session_refuses_the_session_it_is_called_from() {
    let (mut world, alice, session) = notes().await;
    let said = call(&mut world, &alice, "delete_session", json!({ "session": session.uri })).await;
    assert_eq!(said, refused("Invalid delete_session input: refusing to delete the current session."));
}

#[tokio::test(start_paused = true)]
async fn archive_chat_refuses_the_main_chat_of_its_own_session() {
    let (mut world, alice, session) = notes().await;
    let said = call(&mut world, &alice, "archive_chat", json!({ "chat": link(&session, "notes") })).await;
    assert_eq!(said, refused("Invalid archive_chat input: refusing to archive the main chat of the current session."));
}

#[tokio::test(start_paused = true)]
async fn archive_chat_refuses_the_chat_it_runs_in() {
    let (mut world, alice, session) = notes().await;
    let (ok, made) = call(&mut world, &alice, "create_chat", json!({ "prompt": "hi", "title": "beside" })).await;
    assert!(ok, "{made}");
    let nested = made.split('(').nth(1).and_then(|r| r.strip_suffix(").")).expect("the chat's link").to_owned();
    let chat = format!("ahp-chat:/{}", nested.rsplit("chat=").next().unwrap_or_default());
    world.subscribe(&alice, &chat).await.expect("the nested chat");
    world.until_idle().await;
    let said = call(&mut world, &alice, "archive_chat", json!({ "chat": nested })).await;
    assert_eq!(said, refused("Invalid archive_chat input: refusing to archive the current chat."));
    world.focus(&alice, &session.chat);
}

#[tokio::test(start_paused = true)]
async fn archive_chat_of_another_sessions_main_chat_archives_that_session() {
    let (mut world, alice, session) = notes().await;
    let other = world.create_session(&alice, "echo").await;
    world.focus(&alice, &session.chat);
    let said = call(&mut world, &alice, "archive_chat", json!({ "chat": link(&other, "echo") })).await;
    assert_eq!(said, (true, format!("Archived session ({}).", link(&other, "echo"))));
    assert_ne!(world.session(&alice, &other.uri).status & 64, 0, "the session is archived for every client");
}

#[tokio::test(start_paused = true)]
async fn create_session_refuses_an_agent_the_host_does_not_offer_naming_the_ones_it_does() {
    let (mut world, alice, _session) = notes().await;
    let spawn = json!({ "relationship": "independent", "agent": "nobody", "prompt": "hi", "title": "t" });
    let said = call(&mut world, &alice, "create_session", spawn).await;
    assert_eq!(
        said,
        refused("Invalid create_session input: agent must be one of the agents this host offers (notes, echo).")
    );
}

#[tokio::test(start_paused = true)]
async fn create_session_refuses_a_setting_the_agents_schema_rules_out_before_anything_starts() {
    let (mut world, alice, _session) = notes().await;
    let spawn = json!({ "relationship": "independent", "agent": "echo", "prompt": "hi", "title": "t", "config": { "voice": "loud" } });
    let said = call(&mut world, &alice, "create_session", spawn).await;
    assert_eq!(said, refused("Invalid create_session input: Session configuration 'voice' does not offer 'loud'."));
    let listed = world.ok(&alice, "listSessions", json!({ "channel": crate::world::ROOT })).await;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1), "nothing was made: {listed}");
}

#[tokio::test(start_paused = true)]
async fn a_session_made_by_a_tool_takes_the_calling_chats_inherited_settings() {
    let (mut world, alice, _session) = notes().await;
    let spawn = json!({ "relationship": "independent", "prompt": "list", "title": "child" });
    let (ok, made) = call(&mut world, &alice, "create_session", spawn).await;
    assert!(ok, "{made}");
    let child = world.watch_session(&alice, &session_in(&made)).await;
    let config = world.session(&alice, &child.uri).config.clone().expect("the child's settings");
    assert_eq!(config.values["ask"], json!("never"), "notes inherits ask from the chat that made it");
}

#[tokio::test(start_paused = true)]
async fn send_message_refuses_the_chat_it_is_called_from() {
    let (mut world, alice, session) = notes().await;
    let said = call(&mut world, &alice, "send_message", json!({ "session": session.uri, "message": "me" })).await;
    assert_eq!(said, refused("Invalid send_message input: refusing to send a message to the current chat."));
}

#[tokio::test(start_paused = true)]
async fn send_message_sends_to_a_free_chat_and_queues_behind_a_busy_one() {
    let (mut world, alice, session) = notes().await;
    let other = world.create_session(&alice, "notes").await;
    world.turn(&alice, "ask hold").await;
    world.focus(&alice, &session.chat);
    let (_, queued) =
        call(&mut world, &alice, "send_message", json!({ "session": other.uri, "message": "list" })).await;
    assert!(queued.starts_with("Message queued ("), "{queued}");
    let spare = world.create_session(&alice, "echo").await;
    world.focus(&alice, &session.chat);
    let (_, sent) = call(&mut world, &alice, "send_message", json!({ "session": spare.uri, "message": "hi" })).await;
    assert!(sent.starts_with("Message sent ("), "{sent}");
    world.focus(&alice, &spare.chat);
    assert_eq!(world.last_turn(&alice).message.text, "hi");
}

#[tokio::test(start_paused = true)]
async fn rename_chat_refuses_a_title_over_two_hundred_characters_or_only_spaces() {
    let (mut world, alice, _session) = notes().await;
    let long = call(&mut world, &alice, "rename_chat", json!({ "title": "x".repeat(201) })).await;
    assert_eq!(long, refused("Invalid rename_chat input: title must not exceed 200 characters."));
    let blank = call(&mut world, &alice, "rename_chat", json!({ "title": "   " })).await;
    assert_eq!(blank, refused("Invalid rename_chat input: title must be a non-empty string."));
}

#[tokio::test(start_paused = true)]
async fn get_session_context_refuses_a_detail_it_does_not_know() {
    let (mut world, alice, session) = notes().await;
    let said =
        call(&mut world, &alice, "get_session_context", json!({ "session": session.uri, "detail": "all" })).await;
    assert_eq!(said, refused("Invalid get_session_context input: detail must be one of summary, digest, full."));
}

#[tokio::test(start_paused = true)]
async fn a_tool_the_session_is_not_offered_is_refused_by_name() {
    let (mut world, alice, _session) = notes().await;
    let said = call(&mut world, &alice, "make_coffee", json!({})).await;
    assert_eq!(said, refused("No tool named make_coffee is offered in this session."));
}

#[tokio::test(start_paused = true)]
async fn with_session_tools_off_the_eleven_are_not_offered_and_the_hosts_own_still_are() {
    let (mut world, alice, _session) = notes_with(|c| c.settings.session_tools = false).await;
    let names = offered(&mut world, &alice).await;
    for tool in ["list_sessions", "create_session", "send_message", "delete_session"] {
        assert!(!names.contains(&tool.to_owned()), "{tool} is offered: {names:?}");
    }
    for tool in ["schedule_wakeup", "ahp_terminals", "addComment", "add_artifact_or_reference"] {
        assert!(names.contains(&tool.to_owned()), "{tool} is not offered: {names:?}");
    }
    let said = call(&mut world, &alice, "list_sessions", json!({})).await;
    assert_eq!(said, refused("No tool named list_sessions is offered in this session."));
}

#[tokio::test(start_paused = true)]
async fn session_tools_providers_narrows_the_offer_to_those_providers_sessions() {
    let (mut world, alice, _session) = notes_with(|c| c.settings.session_tools_providers = vec!["echo".into()]).await;
    let names = offered(&mut world, &alice).await;
    assert!(!names.contains(&"list_sessions".to_owned()), "a notes session is not offered them: {names:?}");
    assert!(names.contains(&"schedule_wakeup".to_owned()), "{names:?}");
}

#[tokio::test(start_paused = true)]
async fn a_session_is_offered_the_session_tools_by_default() {
    let (mut world, alice, _session) = notes().await;
    let names = offered(&mut world, &alice).await;
    for tool in ["list_sessions", "list_agents", "create_session", "send_message", "get_session_context"] {
        assert!(names.contains(&tool.to_owned()), "{tool} is not offered: {names:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_setting_the_agent_does_not_let_a_session_change_is_refused_in_vscodes_words() {
    let (mut world, alice, session) = notes().await;
    let seq =
        world.dispatch(&alice, &session.uri, json!({ "type": "session/configChanged", "config": { "colour": "red" } }));
    assert_eq!(world.refusal(&alice, seq).await, "Session configuration 'colour' is not writable.");
}

#[tokio::test(start_paused = true)]
async fn a_value_the_agent_does_not_offer_is_refused_in_vscodes_words() {
    let (mut world, alice, session) = notes().await;
    let seq = world.dispatch(
        &alice,
        &session.uri,
        json!({ "type": "session/configChanged", "config": { "ask": "sometimes" } }),
    );
    assert_eq!(world.refusal(&alice, seq).await, "Session configuration 'ask' does not offer 'sometimes'.");
}

#[tokio::test(start_paused = true)]
async fn a_setting_changed_by_a_client_reaches_the_agent_from_the_next_call_on() {
    let (mut world, alice, session) = notes().await;
    let seq =
        world.dispatch(&alice, &session.uri, json!({ "type": "session/configChanged", "config": { "ask": "always" } }));
    assert_eq!(world.echo_of(&alice, seq).await, crate::world::Echo::Accepted);
    world.until_idle().await;
    world.turn(&alice, "read plan").await;
    assert_eq!(crate::world::waiting_calls(world.chat(&alice)).len(), 1, "even a read asks now");
}
