//! Grants per role under a users directory (seed 000 "Grants"): admin holds everything, member
//! reads and writes sessions (and so every chat operation), guest reads; nobody signed in holds
//! nothing and is asked to sign in. A refusal is the host's own sentence naming the person:
//! `gus may not session:write here`.

use serde_json::json;

use crate::world::{open_questions, waiting_calls, Client, Echo, Session, World, ROOT};

/// A host with echo and notes and a users directory: ada (admin), mo and max (members), gus
/// (guest); ada has made a notes session, which everyone watches.
struct Room {
    world: World,
    ada: Client,
    mo: Client,
    gus: Client,
    session: Session,
}

async fn room() -> Room {
    let mut world = World::builder()
        .agent("echo")
        .agent("notes")
        .users(&[("ada", "admin"), ("mo", "member"), ("max", "member"), ("gus", "guest")])
        .start()
        .await;
    let ada = world.connect_as("ada", "ada").await;
    let mo = world.connect_as("mo", "mo").await;
    let gus = world.connect_as("gus", "gus").await;
    let session = world.create_session(&ada, "notes").await;
    world.open_session(&mo, &session).await;
    world.open_session(&gus, &session).await;
    Room { world, ada, mo, gus, session }
}

/// The sentence a person is refused a grant in.
fn may_not(person: &str, grant: &str) -> String {
    format!("{person} may not {grant} here")
}

#[tokio::test(start_paused = true)]
async fn a_guest_is_refused_creating_a_session_in_the_hosts_words() {
    let Room { mut world, gus, .. } = room().await;
    let refused = world.create_session_with(&gus, "echo", json!({})).await.expect_err("refused");
    assert_eq!(refused.message, may_not("gus", "session:write"));
    assert_eq!(refused.code, ahp_types::errors::ahp_error_codes::PERMISSION_DENIED as i64);
}

#[tokio::test(start_paused = true)]
async fn a_guest_watches_a_session_and_its_chat_and_folds_what_happens_there() {
    let Room { mut world, ada, gus, .. } = room().await;
    world.send(&ada, "list");
    world.until_idle().await;
    assert_eq!(world.turns(&gus).len(), 1, "the guest reads the turn");
}

#[tokio::test(start_paused = true)]
async fn a_guest_may_not_send_a_turn() {
    let Room { mut world, gus, .. } = room().await;
    let chat = world.current(&gus);
    let turn = world.next_turn();
    let seq = world.dispatch(&gus, &chat, crate::world::turn_started(&turn, "let me in"));
    assert_eq!(world.refusal(&gus, seq).await, may_not("gus", "session:write"));
    world.until_idle().await;
    assert!(world.turns(&gus).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_guest_may_not_queue_or_steer_a_message() {
    let Room { mut world, gus, .. } = room().await;
    for kind in ["queued", "steering"] {
        let (_id, seq) = world.pending(&gus, kind, "me too");
        assert_eq!(world.refusal(&gus, seq).await, may_not("gus", "session:write"), "{kind}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_guest_may_not_stop_a_turn() {
    let Room { mut world, ada, gus, .. } = room().await;
    world.turn(&ada, "ask hold").await;
    let seq = world.stop(&gus);
    assert_eq!(world.refusal(&gus, seq).await, may_not("gus", "session:write"));
    world.until_idle().await;
    assert!(world.running(&ada).is_some(), "the turn runs on");
}

#[tokio::test(start_paused = true)]
async fn a_guest_may_not_answer_a_question() {
    let Room { mut world, ada, gus, .. } = room().await;
    world.turn(&ada, "ask colour").await;
    let question = open_questions(world.chat(&gus)).pop().expect("the guest sees the question");
    let seq = world.answer(&gus, &question, Some("red"));
    assert_eq!(world.refusal(&gus, seq).await, may_not("gus", "chat:answer"));
    assert_eq!(open_questions(world.chat(&ada)), vec![question]);
}

#[tokio::test(start_paused = true)]
async fn a_guest_may_not_allow_a_tool_call() {
    let Room { mut world, ada, gus, .. } = room().await;
    world.turn(&ada, "write plan x").await;
    let call = waiting_calls(world.chat(&gus)).pop().expect("the guest sees the waiting call");
    let seq = world.confirm(&gus, &call, true);
    assert_eq!(world.refusal(&gus, seq).await, may_not("gus", "chat:answer"));
    assert_eq!(waiting_calls(world.chat(&ada)), vec![call], "it still waits");
}

#[tokio::test(start_paused = true)]
async fn a_guest_may_not_rename_a_session() {
    let Room { mut world, gus, session, .. } = room().await;
    let seq = world.dispatch(&gus, &session.uri, json!({ "type": "session/titleChanged", "title": "Mine now" }));
    assert_eq!(world.refusal(&gus, seq).await, may_not("gus", "session:write"));
}

#[tokio::test(start_paused = true)]
async fn a_guest_may_not_archive_or_mark_a_session_read() {
    let Room { mut world, gus, session, .. } = room().await;
    let archive =
        world.dispatch(&gus, &session.uri, json!({ "type": "session/isArchivedChanged", "isArchived": true }));
    assert_eq!(world.refusal(&gus, archive).await, may_not("gus", "session:mark"));
    let read = world.dispatch(&gus, &session.uri, json!({ "type": "session/isReadChanged", "isRead": true }));
    assert_eq!(world.refusal(&gus, read).await, may_not("gus", "session:mark"));
}

#[tokio::test(start_paused = true)]
async fn a_guest_may_not_change_a_sessions_settings() {
    let Room { mut world, gus, session, .. } = room().await;
    let seq =
        world.dispatch(&gus, &session.uri, json!({ "type": "session/configChanged", "config": { "ask": "never" } }));
    assert_eq!(world.refusal(&gus, seq).await, may_not("gus", "session:write"));
}

#[tokio::test(start_paused = true)]
async fn a_guest_may_not_delete_a_session() {
    let Room { mut world, gus, session, .. } = room().await;
    let refused = world.refused(&gus, "disposeSession", json!({ "channel": session.uri })).await;
    assert_eq!(refused.message, may_not("gus", "session:write"));
}

#[tokio::test(start_paused = true)]
async fn a_guest_and_a_member_may_not_change_the_hosts_settings() {
    let Room { mut world, mo, gus, .. } = room().await;
    for (who, name) in [(&gus, "gus"), (&mo, "mo")] {
        let seq =
            world.dispatch(who, ROOT, json!({ "type": "root/configChanged", "config": { "advancedTools": true } }));
        assert_eq!(world.refusal(who, seq).await, may_not(name, "config:write"));
    }
}

#[tokio::test(start_paused = true)]
async fn a_guest_may_not_move_the_clock() {
    let Room { mut world, gus, .. } = room().await;
    let refused = world.refused(&gus, "ahpd/test/advanceClock", json!({ "channel": ROOT, "ms": 1 })).await;
    assert_eq!(refused.message, may_not("gus", "config:write"));
}

#[tokio::test(start_paused = true)]
async fn a_guest_lists_every_session() {
    let Room { mut world, gus, session, .. } = room().await;
    let listed = world.ok(&gus, "listSessions", json!({ "channel": ROOT })).await;
    let uris: Vec<&str> =
        listed["items"].as_array().into_iter().flatten().filter_map(|i| i["resource"].as_str()).collect();
    assert_eq!(uris, [session.uri.as_str()]);
}

#[tokio::test(start_paused = true)]
async fn a_member_creates_sessions_and_sends_turns() {
    let Room { mut world, mo, .. } = room().await;
    world.create_session(&mo, "echo").await;
    world.turn(&mo, "mine").await;
    assert_eq!(crate::world::text_of(world.last_turn(&mo)), "mine");
}

#[tokio::test(start_paused = true)]
async fn a_member_answers_questions_with_no_chat_grant_of_their_own() {
    let Room { mut world, ada, mo, .. } = room().await;
    world.turn(&ada, "ask colour").await;
    let question = open_questions(world.chat(&mo)).pop().expect("a question");
    let seq = world.answer(&mo, &question, Some("green"));
    assert_eq!(world.echo_of(&mo, seq).await, Echo::Accepted, "session:write covers chat:answer");
    world.until_idle().await;
    assert!(crate::world::text_of(world.last_turn(&ada)).contains("You answered: green"));
}

#[tokio::test(start_paused = true)]
async fn a_member_may_archive_and_mark_a_session() {
    let Room { mut world, mo, session, .. } = room().await;
    let seq = world.dispatch(&mo, &session.uri, json!({ "type": "session/isArchivedChanged", "isArchived": true }));
    assert_eq!(world.echo_of(&mo, seq).await, Echo::Accepted);
    world.until_idle().await;
    assert_ne!(world.session(&mo, &session.uri).status & 64, 0, "the session is archived");
}

#[tokio::test(start_paused = true)]
async fn a_member_may_not_delete_another_persons_session() {
    let Room { mut world, mo, session, .. } = room().await;
    let refused = world.refused(&mo, "disposeSession", json!({ "channel": session.uri })).await;
    assert_eq!(refused.message, "Only the session's owner can delete it.");
}

#[tokio::test(start_paused = true)]
async fn a_member_deletes_a_session_of_their_own() {
    let Room { mut world, mo, .. } = room().await;
    let mine = world.create_session(&mo, "echo").await;
    world.ok(&mo, "disposeSession", json!({ "channel": mine.uri })).await;
    world.until_idle().await;
    let listed = world.ok(&mo, "listSessions", json!({ "channel": ROOT })).await;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1), "only ada's is left: {listed}");
}

#[tokio::test(start_paused = true)]
async fn an_admin_deletes_anyones_session() {
    let Room { mut world, ada, mo, .. } = room().await;
    let theirs = world.create_session(&mo, "echo").await;
    world.ok(&ada, "disposeSession", json!({ "channel": theirs.uri })).await;
}

#[tokio::test(start_paused = true)]
async fn nobody_signed_in_is_asked_to_sign_in_before_watching_a_session() {
    let Room { mut world, session, .. } = room().await;
    let nobody = world.connect_nobody("anon").await.expect("the handshake needs no grant");
    let refused = world.subscribe(&nobody, &session.uri).await.expect_err("refused");
    assert_eq!(refused.code, ahp_types::errors::ahp_error_codes::AUTH_REQUIRED as i64, "{refused:?}");
}

#[tokio::test(start_paused = true)]
async fn nobody_signed_in_is_asked_to_sign_in_before_listing_sessions() {
    let Room { mut world, .. } = room().await;
    let nobody = world.connect_nobody("anon").await.expect("the handshake needs no grant");
    let refused = world.refused(&nobody, "listSessions", json!({ "channel": ROOT })).await;
    assert_eq!(refused.code, ahp_types::errors::ahp_error_codes::AUTH_REQUIRED as i64, "{refused:?}");
    assert_eq!(refused.message, "Sign in first: this host has a users directory, and this connection is nobody's");
}

#[tokio::test(start_paused = true)]
async fn a_person_who_may_not_read_sessions_is_answered_an_empty_listing() {
    let mut world = World::builder()
        .agent("echo")
        .role("watcher", &["terminal:read"])
        .users(&[("ada", "admin"), ("wes", "watcher")])
        .start()
        .await;
    let ada = world.connect_as("ada", "ada").await;
    world.create_session(&ada, "echo").await;
    let wes = world.connect_as("wes", "wes").await;
    let listed = world.ok(&wes, "listSessions", json!({ "channel": ROOT })).await;
    assert_eq!(listed["items"], json!([]), "the listing is cut to what wes may read");
}

#[tokio::test(start_paused = true)]
async fn nobody_signed_in_learns_of_no_session_from_the_root() {
    let Room { mut world, ada, gus, .. } = room().await;
    let nobody = world.connect_nobody("anon").await.expect("the handshake needs no grant");
    world.clear_frames(&gus);
    world.create_session(&ada, "echo").await;
    world.until_idle().await;
    assert!(world.notifications(&nobody, "root/sessionAdded").is_empty(), "nobody is told");
    assert_eq!(world.notifications(&gus, "root/sessionAdded").len(), 1, "a guest, who may read, is");
}

#[tokio::test(start_paused = true)]
async fn a_client_id_is_its_persons_and_another_person_is_refused_it() {
    let Room { mut world, .. } = room().await;
    let taken = world
        .connect_as_principal("mo", ahpd::users::Principal::Person("max".into()))
        .await
        .expect_err("max may not take mo's client id");
    assert_eq!(taken.message, "Client id mo belongs to mo; connect under a client id of your own");
}

#[tokio::test(start_paused = true)]
async fn a_person_whose_access_is_withdrawn_is_cut_off_at_once() {
    let Room { mut world, ada, gus, .. } = room().await;
    world.set_users(&[("ada", "admin"), ("mo", "member"), ("max", "member")]);
    // The next thing the host checks reads the directory again.
    world.send(&ada, "list");
    world.until_idle().await;
    assert!(!world.is_open(&gus), "gus, no longer in the directory, is disconnected");
}

#[tokio::test(start_paused = true)]
async fn a_member_demoted_to_guest_is_refused_the_next_write() {
    let Room { mut world, mo, .. } = room().await;
    world.set_users(&[("ada", "admin"), ("mo", "guest"), ("gus", "guest")]);
    let seq = world.send(&mo, "list");
    let _ = seq;
    let refused = world.create_session_with(&mo, "echo", json!({})).await.expect_err("refused");
    assert_eq!(refused.message, may_not("mo", "session:write"));
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_in_a_members_turn_makes_what_it_makes_as_that_member() {
    let Room { mut world, ada, mo, .. } = room().await;
    let mine = world.create_session_with(&mo, "notes", json!({ "config": { "ask": "never" } })).await.expect("made");
    let spawn = json!({ "relationship": "independent", "agent": "echo", "prompt": "hi", "title": "Made by mo's turn" });
    world.turn(&mo, &format!("call create_session {spawn}")).await;
    let made = crate::world::results_of(world.last_turn(&mo));
    assert!(made[0].0, "{made:?}");
    let listed = world.ok(&ada, "listSessions", json!({ "channel": ROOT })).await;
    let child = listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["title"] == "Made by mo's turn")
        .and_then(|i| i["resource"].as_str().map(str::to_owned))
        .expect("the tool's session is listed");
    assert_ne!(child, mine.uri);
    // Its owner is mo: max, another member, may not delete it; mo may.
    let max = world.connect_as("max", "max").await;
    let refused = world.refused(&max, "disposeSession", json!({ "channel": child })).await;
    assert_eq!(refused.message, "Only the session's owner can delete it.");
    world.ok(&mo, "disposeSession", json!({ "channel": child })).await;
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_in_a_turn_whose_sender_became_a_guest_cannot_write() {
    let Room { mut world, ada, mo, .. } = room().await;
    world.create_session_with(&mo, "notes", json!({ "config": { "ask": "never" } })).await.expect("made");
    world.turn(&mo, "ask hold").await;
    let question = open_questions(world.chat(&mo)).pop().expect("a question");
    let spawn = json!({ "relationship": "independent", "agent": "echo", "prompt": "hi", "title": "Never made" });
    world.queue(&mo, &format!("call create_session {spawn}"));
    world.until_idle().await;
    world.set_users(&[("ada", "admin"), ("mo", "guest"), ("gus", "guest")]);
    let mo_chat = world.current(&mo);
    let mo_session = mo_chat.replace("ahp-chat:", "ahp-session:");
    world.open_session(&ada, &Session { uri: mo_session, chat: mo_chat }).await;
    world.answer(&ada, &question, Some("go on"));
    world.until_idle().await;
    let refusals = crate::world::results_of(world.last_turn(&mo));
    assert_eq!(refusals, [(false, may_not("mo", "session:write"))]);
}
