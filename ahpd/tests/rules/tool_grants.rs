//! Every host tool's grant for each principal (seed 000 "Grants" and its table): a tool call acts
//! as the person who sent its turn. Each test calls one tool four ways — in a turn of an admin, of
//! a member, of a member made a guest before the turn ran, and in a turn nobody is behind (a
//! queued message whose sender has not signed in since the host started) — and holds each
//! outcome: a write the person may not do is refused in the host's words naming them
//! (`gus may not session:write here`), and one nobody is behind in the turn's
//! (`this turn may not session:write here`); the reads answer all four. A destructive tool waits
//! for a person first in every mode; the test allows it, so the grant is what answers.

use serde_json::{json, Value};

use crate::world::{open_questions, results_of, Client, Session, World};

/// One principal's place: its own notes session (where its turn calls the tool) and a spare echo
/// session it owns.
#[derive(Debug, Clone)]
struct Place {
    own: Session,
    spare: Session,
}

impl Place {
    /// The spare session's `agent-host-session://` link.
    fn spare_link(&self) -> String {
        format!("agent-host-session://echo/{}", self.spare.uri.trim_start_matches("ahp-session:/"))
    }
}

/// What one call answered for each principal: (success, text).
#[derive(Debug)]
struct Outcomes {
    admin: (bool, String),
    member: (bool, String),
    guest: (bool, String),
    nobody: (bool, String),
}

impl Outcomes {
    /// Asserts the four answered, and answers the admin's text.
    fn all_answered(&self) -> &str {
        for (who, (ok, text)) in
            [("admin", &self.admin), ("member", &self.member), ("guest", &self.guest), ("nobody", &self.nobody)]
        {
            assert!(ok, "{who} was refused: {text}");
        }
        &self.admin.1
    }

    /// Asserts the admin and the member were answered, and the guest and nobody refused `grant`.
    fn writers_alone(&self, grant: &str) {
        assert!(self.admin.0, "the admin was refused: {}", self.admin.1);
        assert!(self.member.0, "the member was refused: {}", self.member.1);
        assert_eq!(self.guest, (false, format!("gus may not {grant} here")));
        assert_eq!(self.nobody, (false, format!("this turn may not {grant} here")));
    }
}

async fn place(world: &mut World, who: &Client) -> Place {
    let spare = world.create_session(who, "echo").await;
    let own = world.create_session_with(who, "notes", json!({ "config": { "ask": "never" } })).await.expect("made");
    Place { own, spare }
}

/// Holds `who`'s chat on a question and queues `command` behind it.
async fn queue_behind_a_question(world: &mut World, who: &Client, command: &str) {
    world.turn(who, "ask hold").await;
    world.queue(who, command);
    world.until_idle().await;
}

/// The result of the one call in the last turn of `chat` (as `who` folded it) that made a call
/// (`set_workspace`'s host carries on in a turn of its own after it).
fn result_in(world: &mut World, who: &Client, chat: &str) -> (bool, String) {
    world.focus(who, chat);
    let turn = world.turns(who).iter().rev().find(|t| t.message.text.starts_with("call ")).expect("a turn that called");
    let mut results = results_of(turn);
    assert_eq!(results.len(), 1, "one call: {results:?}");
    results.remove(0)
}

/// Calls `tool` with `input(place)` as an admin (ada), a member (mo), a member made a guest (gus)
/// and nobody (nia's queued message, taken up after a restart).
async fn outcomes(tool: &str, input: impl Fn(&Place) -> Value) -> Outcomes {
    let members = [("ada", "admin"), ("mo", "member"), ("gus", "member"), ("nia", "member")];
    let mut world = World::builder().agent("notes").agent("echo").users(&members).start().await;
    let command = |place: &Place| format!("call {tool} {}", input(place));

    // Nobody: nia's message waits behind her turn when the host restarts; after it, the host
    // takes it up knowing nothing of who sent it.
    let nia = world.connect_as("nia", "nia").await;
    let nias = place(&mut world, &nia).await;
    queue_behind_a_question(&mut world, &nia, &command(&nias)).await;
    world.restart().await;

    let ada = world.connect_as("ada", "ada").await;
    let mo = world.connect_as("mo", "mo").await;
    let gus = world.connect_as("gus", "gus").await;
    let adas = place(&mut world, &ada).await;
    let mos = place(&mut world, &mo).await;
    let guss = place(&mut world, &gus).await;

    // The guest: gus's message waits behind his turn while he is made a guest.
    queue_behind_a_question(&mut world, &gus, &command(&guss)).await;
    world.set_users(&[("ada", "admin"), ("mo", "member"), ("gus", "guest"), ("nia", "member")]);
    world.open_session(&ada, &guss.own).await;
    let question = open_questions(world.chat(&ada)).pop().expect("gus's turn waits");
    world.answer(&ada, &question, Some("go on"));
    world.until_idle().await;
    world.allow_waiting(&ada).await;
    let guest = result_in(&mut world, &ada, &guss.own.chat);

    world.open_session(&ada, &nias.own).await;
    world.turn(&ada, "list").await;
    world.allow_waiting(&ada).await;
    let nobody = result_in(&mut world, &ada, &nias.own.chat);

    world.focus(&ada, &adas.own.chat);
    world.turn(&ada, &command(&adas)).await;
    world.allow_waiting(&ada).await;
    let admin = result_in(&mut world, &ada, &adas.own.chat);
    world.turn(&mo, &command(&mos)).await;
    world.allow_waiting(&mo).await;
    let member = result_in(&mut world, &mo, &mos.own.chat);
    Outcomes { admin, member, guest, nobody }
}

// ---- the session tools that write: session:write ----

#[tokio::test(start_paused = true)]
async fn create_session_asks_session_write_of_the_person_behind_the_turn() {
    let spawn = json!({ "relationship": "independent", "agent": "echo", "prompt": "hi", "title": "made" });
    outcomes("create_session", |_| spawn.clone()).await.writers_alone("session:write");
}

#[tokio::test(start_paused = true)]
async fn create_chat_asks_session_write_of_the_person_behind_the_turn() {
    outcomes("create_chat", |_| json!({ "prompt": "hi", "title": "beside" })).await.writers_alone("session:write");
}

#[tokio::test(start_paused = true)]
async fn rename_chat_asks_session_write_of_the_person_behind_the_turn() {
    outcomes("rename_chat", |_| json!({ "title": "Renamed" })).await.writers_alone("session:write");
}

#[tokio::test(start_paused = true)]
async fn send_message_asks_session_write_of_the_person_behind_the_turn() {
    let outcomes = outcomes("send_message", |p| json!({ "session": p.spare.uri, "message": "hello" })).await;
    outcomes.writers_alone("session:write");
    assert!(outcomes.member.1.starts_with("Message sent ("), "{:?}", outcomes.member);
}

#[tokio::test(start_paused = true)]
async fn delete_session_asks_session_write_of_the_person_behind_the_turn() {
    let outcomes = outcomes("delete_session", |p| json!({ "session": p.spare.uri })).await;
    outcomes.writers_alone("session:write");
    assert!(outcomes.member.1.starts_with("Deleted session "), "{:?}", outcomes.member);
}

#[tokio::test(start_paused = true)]
async fn move_session_asks_session_write_and_then_says_moves_are_off() {
    let moves_off = "Moving chats is turned off on this host (chatMoves.enabled is off), so nothing was moved.";
    let outcomes =
        outcomes("move_session", |p| json!({ "session": p.spare_link(), "relationship": "independent" })).await;
    assert_eq!(outcomes.admin, (false, moves_off.to_owned()));
    assert_eq!(outcomes.member, (false, moves_off.to_owned()));
    assert_eq!(outcomes.guest, (false, "gus may not session:write here".to_owned()));
    assert_eq!(outcomes.nobody, (false, "this turn may not session:write here".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn set_workspace_asks_session_write_of_the_person_behind_the_turn() {
    let folder = std::env::temp_dir();
    let outcomes =
        outcomes("set_workspace", |_| json!({ "workspaceFolder": folder.display().to_string(), "isolation": false }))
            .await;
    outcomes.writers_alone("session:write");
}

#[tokio::test(start_paused = true)]
async fn archive_chat_asks_session_mark_of_the_person_behind_the_turn() {
    let outcomes = outcomes("archive_chat", |p| json!({ "chat": p.spare_link() })).await;
    outcomes.writers_alone("session:mark");
    assert!(outcomes.member.1.starts_with("Archived session ("), "{:?}", outcomes.member);
}

// ---- the session tools that read: session:read, or nothing ----

#[tokio::test(start_paused = true)]
async fn list_sessions_answers_every_principal() {
    outcomes("list_sessions", |_| json!({})).await.all_answered();
}

#[tokio::test(start_paused = true)]
async fn list_agents_answers_every_principal() {
    let outcomes = outcomes("list_agents", |_| json!({})).await;
    assert!(outcomes.all_answered().contains(r#""agent":"echo""#), "{outcomes:?}");
}

#[tokio::test(start_paused = true)]
async fn list_models_answers_every_principal() {
    outcomes("list_models", |_| json!({})).await.all_answered();
}

#[tokio::test(start_paused = true)]
async fn get_current_session_answers_every_principal() {
    outcomes("get_current_session", |_| json!({})).await.all_answered();
}

#[tokio::test(start_paused = true)]
async fn get_session_context_answers_every_principal() {
    outcomes("get_session_context", |p| json!({ "session": p.spare.uri })).await.all_answered();
}

// ---- this host's own tools ----

#[tokio::test(start_paused = true)]
async fn schedule_wakeup_asks_nothing_since_it_acts_on_the_calling_chat_alone() {
    let outcomes = outcomes("schedule_wakeup", |_| json!({ "delaySeconds": 600, "prompt": "list" })).await;
    assert!(outcomes.all_answered().starts_with("Wakeup scheduled"), "{outcomes:?}");
}

#[tokio::test(start_paused = true)]
async fn the_artifact_tools_ask_nothing_since_they_write_the_calling_sessions_own_record() {
    let item = json!({ "items": [{ "type": "issue", "label": "Bug 7", "isArtifact": true, "link": "https://example.com/7" }] });
    outcomes("add_artifact_or_reference", |_| item.clone()).await.all_answered();
}

#[tokio::test(start_paused = true)]
async fn listing_artifacts_asks_nothing() {
    outcomes("list_artifacts_and_references", |_| json!({})).await.all_answered();
}

#[tokio::test(start_paused = true)]
async fn add_comment_asks_session_review_of_the_person_behind_the_turn() {
    let range = json!({ "startLineNumber": 1, "startColumn": 1, "endLineNumber": 1, "endColumn": 2 });
    let comment = json!({ "resourceUri": "file:///w/a.rs", "range": range, "text": "look" });
    outcomes("addComment", |_| comment.clone()).await.writers_alone("session:review");
}

#[tokio::test(start_paused = true)]
async fn resolving_comments_asks_session_review_of_the_person_behind_the_turn() {
    outcomes("resolveComments", |_| json!({ "commentIds": ["c-none"] })).await.writers_alone("session:review");
}

#[tokio::test(start_paused = true)]
async fn deleting_comments_asks_session_review_of_the_person_behind_the_turn() {
    outcomes("deleteComments", |_| json!({ "commentIds": ["c-none"] })).await.writers_alone("session:review");
}

#[tokio::test(start_paused = true)]
async fn list_comments_asks_nothing_since_it_answers_what_the_session_may_read() {
    outcomes("listComments", |_| json!({})).await.all_answered();
}

#[tokio::test(start_paused = true)]
async fn ahp_terminals_asks_nothing() {
    outcomes("ahp_terminals", |_| json!({})).await.all_answered();
}

// ---- the grant a tool declares is the one asked, before anything else ----

#[tokio::test(start_paused = true)]
async fn a_call_the_person_may_not_make_is_refused_before_its_arguments_are_read() {
    let outcomes = outcomes("send_message", |_| json!({})).await;
    let unread = "Invalid send_message input: session must be a non-empty string.";
    assert_eq!(outcomes.admin, (false, unread.to_owned()));
    assert_eq!(outcomes.member, (false, unread.to_owned()));
    assert_eq!(outcomes.guest, (false, "gus may not session:write here".to_owned()));
    assert_eq!(outcomes.nobody, (false, "this turn may not session:write here".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn archiving_a_session_asks_session_mark_alone_not_session_write() {
    // A person who may mark sessions done, and write nothing else, archives one with the tool.
    let mut world = World::builder()
        .agent("notes")
        .agent("echo")
        .role("marker", &["session:read", "session:mark"])
        .users(&[("ada", "admin"), ("mo", "member")])
        .start()
        .await;
    let ada = world.connect_as("ada", "ada").await;
    let mo = world.connect_as("mo", "mo").await;
    let mos = place(&mut world, &mo).await;
    let archive = json!({ "chat": mos.spare_link() });
    queue_behind_a_question(&mut world, &mo, &format!("call archive_chat {archive}")).await;
    world.set_users(&[("ada", "admin"), ("mo", "marker")]);
    world.open_session(&ada, &mos.own).await;
    let question = open_questions(world.chat(&ada)).pop().expect("mo's turn waits");
    world.answer(&ada, &question, Some("go on"));
    world.until_idle().await;
    let (ok, said) = result_in(&mut world, &ada, &mos.own.chat);
    assert!(ok && said.starts_with("Archived session ("), "{said}");
}
