//! The host's artifact, comment and Agent Merge tools, `ahp_resource`, `ahp_terminals` and
//! `schedule_wakeup`, end to end: called by a real MCP client (the official Python SDK) through a
//! session's `/ahp-mcp` endpoint, or by the notes agent's model through the worker protocol
//! inside a turn; what they write seen by the official AHP client, folded through the official
//! reducers and compared with the host's snapshot; wakeups across `ahpd restart` and `kill -9`
//! on a clock the tests move.

use std::path::Path;

use ahp::ResourceRequestHandlers;
use ahp_types::actions::{AnnotationsSetAction, StateAction};
use ahp_types::commands::{ContentEncoding, ResourceReadResult};
use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::messages::JsonRpcError;
use ahp_types::state::{
    Annotation, AnnotationEntry, AnnotationOrigin, MessageKind, ResponsePart, SnapshotState, ToolCallState, Turn,
};
use anyhow::Context;
use serde_json::{json, Value};
use tests::mcp::call_tools;
use tests::mcp::endpoint;
use tests::{turn_text, Daemon, DaemonOptions, Mirror, TestClient};

fn notes_config() -> Value {
    tests::agents::notes_and_echo()
}

/// A daemon on a clock the test moves, `offset_ms` ahead of wall time when it starts.
fn manual_clock(config: Value, offset_ms: u64) -> DaemonOptions {
    let mut options = DaemonOptions::with_config(config);
    options.env.push(("AHPD_TEST_CLOCK".into(), "manual".into()));
    if offset_ms > 0 {
        options.env.push(("AHPD_TEST_CLOCK_OFFSET_MS".into(), offset_ms.to_string()));
    }
    options
}

/// Creates a session of `provider` working in `folder`; subscribes to it and its default chat.
async fn session_in(client: &mut TestClient, provider: &str, folder: &Path) -> anyhow::Result<(String, String)> {
    client.create_session_in(provider, folder).await
}

/// What a tool call in a finished turn answered: whether it succeeded, and its text.
fn tool_said(turn: &Turn, name: &str) -> (bool, String) {
    let success = turn.response_parts.iter().find_map(|p| match p {
        ResponsePart::ToolCall(tc) => match &tc.tool_call {
            ToolCallState::Completed(c) => Some(c.success),
            _ => None,
        },
        _ => None,
    });
    let text = turn_text(turn);
    let text = text.split_once(&format!("{name} said: ")).map(|(_, t)| t.to_owned()).unwrap_or(text);
    (success.unwrap_or(false), text)
}

/// Has the notes agent's model call `name` in a turn of `chat` (the worker protocol's
/// `tool/run`); answers (success, text).
async fn call_in_turn(client: &mut TestClient, chat: &str, name: &str, args: Value) -> anyhow::Result<(bool, String)> {
    let turn = client.turn(chat, &format!("call {name} {args}")).await?;
    Ok(tool_said(&turn, name))
}

fn ok(result: &Value) -> String {
    assert_eq!(result["isError"], false, "expected success: {result}");
    result["text"].as_str().unwrap_or("").to_owned()
}

fn refused(result: &Value) -> String {
    assert_eq!(result["isError"], true, "expected a refusal: {result}");
    result["text"].as_str().unwrap_or("").to_owned()
}

fn annotations(mirror: &Mirror, channel: &str) -> Vec<Annotation> {
    match mirror.states.get(channel) {
        Some(SnapshotState::Annotations(a)) => a.annotations.clone(),
        _ => Vec::new(),
    }
}

fn slot(annotation: &Annotation) -> Value {
    annotation.meta.as_ref().and_then(|m| m.get("vscode.agentFeedback")).cloned().unwrap_or(Value::Null)
}

/// An annotation a client writes: a comment when `feedback` is given, else somebody else's.
fn client_annotation(session: &str, id: &str, text: &str, feedback: Option<Value>) -> Annotation {
    let meta = feedback.map(|f| {
        let mut m = JsonObject::new();
        m.insert("vscode.agentFeedback".into(), f);
        m
    });
    Annotation {
        id: id.into(),
        origin: AnnotationOrigin { session: session.into(), chat: None, turn_id: None },
        resource: "file:///w/app.ts".into(),
        range: None,
        resolved: false,
        entries: vec![AnnotationEntry {
            id: format!("{id}:0"),
            text: StringOrMarkdown::Plain(text.into()),
            meta: None,
        }],
        meta,
    }
}

#[tokio::test]
async fn artifacts_live_on_the_sessions_meta_and_survive_a_restart() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    let folder = tempfile::tempdir()?;
    let mut daemon = Daemon::start_in(home.path(), DaemonOptions::with_config(notes_config())).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = session_in(&mut a, "notes", folder.path()).await?;
    let offered: Vec<String> = a
        .mirror
        .session(&session)
        .and_then(|s| s.server_tools.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.name)
        .collect();
    let ours = [
        "add_artifact_or_reference",
        "remove_artifact_or_reference",
        "list_artifacts_and_references",
        "addComment",
        "listComments",
        "replyToComment",
        "deleteComments",
        "resolveComments",
        "viewUnreviewedComments",
        "setAgentMergeEnabled",
        "readAgentMergeCI",
        "replyToAgentMergeReviewThread",
        "rerunAgentMergeWorkflow",
        "ahp_resource",
        "ahp_terminals",
        "schedule_wakeup",
    ];
    let reported: Vec<&str> = offered.iter().map(String::as_str).filter(|n| ours.contains(n)).collect();
    assert_eq!(reported, ours, "reported on serverTools, in seed 000's order");
    let (url, token) = endpoint(&mut a, &chat).await?;

    let issue = "https://github.com/octo/repo/issues/7";
    let first = call_tools(
        &url,
        &token,
        &[
            (
                "add_artifact_or_reference",
                json!({ "items": [
                    { "type": "issue", "label": "The bug", "isArtifact": false, "link": issue },
                    { "type": "file", "label": "Report", "isArtifact": true, "uri": "file:///tmp/report.md" },
                ] }),
            ),
            ("list_artifacts_and_references", json!({})),
        ],
    )
    .await?;
    let added = ok(&first[0]);
    let ids: Vec<String> = added.lines().map(|l| l.rsplit(": ").next().unwrap_or("").to_owned()).collect();
    assert_eq!(added, format!("Added reference: {}\nAdded artifact: {}", ids[0], ids[1]));
    assert_eq!(
        ok(&first[1]),
        format!(
            "{} (issue, reference) The bug \u{2014} {issue}\n{} (file, artifact) Report \u{2014} file:///tmp/report.md",
            ids[0], ids[1]
        )
    );

    let second = call_tools(
        &url,
        &token,
        &[
            ("add_artifact_or_reference", json!({ "items": [{ "type": "issue", "label": "The fix", "isArtifact": true, "link": issue }] })),
            ("add_artifact_or_reference", json!({ "type": "issue", "label": "Again", "isArtifact": false, "link": issue })),
            ("remove_artifact_or_reference", json!({ "id": ids[1] })),
            ("remove_artifact_or_reference", json!({ "id": "nope" })),
            ("add_artifact_or_reference", json!({ "items": [] })),
            ("add_artifact_or_reference", json!({ "items": [{ "type": "blog", "label": "x", "isArtifact": true }] })),
            ("add_artifact_or_reference", json!({ "items": [{ "type": "issue", "label": "x", "link": issue }] })),
            ("add_artifact_or_reference", json!({ "items": [{ "type": "issue", "label": " ", "isArtifact": true, "link": issue }] })),
            ("add_artifact_or_reference", json!({ "items": [{ "type": "website", "label": "x", "isArtifact": true, "link": "example.com" }] })),
            ("add_artifact_or_reference", json!({ "items": [{ "type": "website", "label": "x", "isArtifact": true, "link": "file:///etc/passwd" }] })),
            ("add_artifact_or_reference", json!({ "items": [{ "type": "file", "label": "x", "isArtifact": true, "uri": "/tmp/report.md" }] })),
            ("add_artifact_or_reference", json!({ "items": [{ "type": "commit", "label": "x", "isArtifact": true, "link": "https://github.com/o/r/commit/1" }] })),
            ("add_artifact_or_reference", json!({ "items": [{ "type": "resource", "label": "x", "isArtifact": false, "uri": "agent-host-session://notes/s" }] })),
            ("remove_artifact_or_reference", json!({})),
        ],
    )
    .await?;
    assert_eq!(
        ok(&second[0]),
        format!("Promoted artifact: {}", ids[0]),
        "a reference that became an artifact keeps its id"
    );
    assert_eq!(ok(&second[1]), format!("Already recorded: {}", ids[0]));
    assert_eq!(ok(&second[2]), format!("Removed artifact: {}", ids[1]));
    assert_eq!(ok(&second[3]), "No artifact or reference with id nope.");
    let input = "Invalid add_artifact_or_reference input:";
    assert_eq!(refused(&second[4]), format!("{input} items must be a non-empty array."));
    assert_eq!(
        refused(&second[5]),
        format!("{input} items[0].type must be one of pullRequest, issue, commit, website, file, resource.")
    );
    assert_eq!(
        refused(&second[6]),
        format!("{input} items[0].isArtifact must be a boolean \u{2014} true for an artifact, false for a reference.")
    );
    assert_eq!(refused(&second[7]), format!("{input} items[0].label must be a non-empty string."));
    assert_eq!(refused(&second[8]), format!("{input} items[0].link must be an absolute http(s) URL."));
    assert_eq!(refused(&second[9]), format!("{input} items[0].link must be an http(s) URL, but was 'file:'."));
    assert_eq!(
        refused(&second[10]),
        format!("{input} items[0].uri must be an absolute URI including its scheme, such as 'file:///path/to/file' \u{2014} not a plain file system path.")
    );
    assert_eq!(refused(&second[11]), format!("{input} items[0].commitHash must be a non-empty string."));
    assert_eq!(
        refused(&second[12]),
        format!("{input} sessions and chats created with session-management tools must not be recorded as artifacts or references.")
    );
    assert_eq!(refused(&second[13]), "Invalid remove_artifact_or_reference input: id must be a non-empty string.");

    // Every client of the session sees the list on its `_meta`, folded from session/metaChanged.
    let expected = json!([{ "id": ids[0], "type": "issue", "label": "The fix", "isArtifact": true, "link": issue, "isGitHub": true }]);
    let (s, want) = (session.clone(), expected.clone());
    a.until("the artifacts on the session's _meta", move |m| {
        m.session(&s).and_then(|st| st.meta.as_ref()).and_then(|meta| meta.get("agentHost/sessionArtifacts"))
            == Some(&want)
    })
    .await?;
    a.check_against_snapshot(&session).await?;

    // Kept with the session's record: a clean stop and start over the same folders keeps it.
    daemon.terminate().await?;
    let daemon = Daemon::start_in(home.path(), DaemonOptions::with_config(notes_config())).await?;
    let mut b = TestClient::connect(&daemon.url, "b").await?;
    b.subscribe(&session).await?;
    let meta = b.mirror.session(&session).and_then(|st| st.meta.clone()).unwrap_or_default();
    assert_eq!(meta.get("agentHost/sessionArtifacts"), Some(&expected));
    b.subscribe(&chat).await?;
    let (success, listed) = call_in_turn(&mut b, &chat, "list_artifacts_and_references", json!({})).await?;
    assert!(success);
    assert_eq!(listed, format!("{} (issue, artifact) The fix \u{2014} {issue}", ids[0]));
    Ok(())
}

#[tokio::test]
async fn comments_are_annotations_every_client_sees_and_only_feedback_ones_are_touched() -> anyhow::Result<()> {
    let folder = tempfile::tempdir()?;
    let daemon = Daemon::start_with(DaemonOptions::with_config(notes_config())).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = session_in(&mut a, "notes", folder.path()).await?;
    let channel = format!("{session}/annotations");
    a.subscribe(&channel).await?;
    let (url, token) = endpoint(&mut a, &chat).await?;

    // Somebody else's annotation, a person's comment, and a pull request review comment waiting
    // for the person.
    let feedback = |kind: &str, state: &str| json!({ "kind": kind, "state": state, "sessionResource": session });
    for annotation in [
        client_annotation(&session, "foreign", "not feedback", None),
        client_annotation(&session, "mine", "please rename", Some(feedback("user", "accepted"))),
        client_annotation(&session, "pr", "from the reviewer", Some(feedback("prReview", "created"))),
    ] {
        a.dispatch(&channel, StateAction::AnnotationsSet(AnnotationsSetAction { annotation })).await?;
    }
    let c = channel.clone();
    a.until("the client's annotations", move |m| annotations(m, &c).len() == 3).await?;

    let first = call_tools(
        &url,
        &token,
        &[
            (
                "addComment",
                json!({ "resourceUri": "file:///w/app.ts", "range": { "startLineNumber": 3, "startColumn": 2, "endLineNumber": 3, "endColumn": 10 }, "text": "extract this" }),
            ),
            ("listComments", json!({})),
            ("addComment", json!({ "resourceUri": "file:///w/app.ts", "text": "x" })),
            ("addComment", json!({ "resourceUri": "file:///w/app.ts", "range": { "startLineNumber": 0, "startColumn": 1, "endLineNumber": 1, "endColumn": 1 }, "text": "x" })),
            ("addComment", json!({ "resourceUri": "", "range": {}, "text": "x" })),
            ("addComment", json!({ "resourceUri": "file:///w/app.ts", "range": {} })),
            ("replyToComment", json!({ "commentId": "foreign", "text": "mine now" })),
            ("replyToComment", json!({ "commentId": "mine", "text": "" })),
            ("replyToComment", json!({ "text": "x" })),
            ("deleteComments", json!({ "commentIds": [] })),
            ("deleteComments", json!({ "commentIds": ["mine", 3] })),
            ("resolveComments", json!({ "commentIds": ["mine"], "resolved": "yes" })),
            ("listComments", json!({ "includeResolved": "true" })),
        ],
    )
    .await?;
    assert_eq!(ok(&first[0]), "Comment added.");
    let listed: Value = serde_json::from_str(&ok(&first[1]))?;
    assert_eq!(
        listed,
        json!({
            "comments": [{ "id": "mine", "resourceUri": "file:///w/app.ts", "range": { "startLineNumber": 1, "startColumn": 1, "endLineNumber": 1, "endColumn": 1 }, "text": "please rename", "kind": "user", "author": "user", "resolved": false }],
            "note": "There are 1 pull request comment and 1 code review comment which the user has not reviewed yet. If the user wants you to tackle them, call the `viewUnreviewedComments` tool to view them.",
        }),
        "a proposal is not listed until accepted, somebody else's annotation never is"
    );
    assert_eq!(refused(&first[2]), "Invalid addComment input: range must be an object.");
    assert_eq!(refused(&first[3]), "Invalid addComment input: range.startLineNumber must be a positive integer.");
    assert_eq!(refused(&first[4]), "Invalid addComment input: resourceUri must be a non-empty string.");
    assert_eq!(refused(&first[5]), "Invalid addComment input: text must be a non-empty string.");
    assert_eq!(refused(&first[6]), "Comment not found: foreign");
    assert_eq!(refused(&first[7]), "Invalid replyToComment input: text must be a non-empty string.");
    assert_eq!(refused(&first[8]), "Invalid replyToComment input: commentId must be a non-empty string.");
    assert_eq!(refused(&first[9]), "Invalid deleteComments input: commentIds must be a non-empty string array.");
    assert_eq!(refused(&first[10]), "Invalid deleteComments input: commentIds[] must be a non-empty string.");
    assert_eq!(refused(&first[11]), "Invalid resolveComments input: resolved must be a boolean.");
    assert_eq!(refused(&first[12]), "Invalid listComments input: includeResolved must be a boolean.");

    // The tool's comment is one state to every client: a codeReview proposal, zero-based.
    let c = channel.clone();
    a.until("the agent's comment", move |m| annotations(m, &c).len() == 4).await?;
    let added =
        annotations(&a.mirror, &channel).into_iter().find(|x| x.id != "foreign" && x.id != "mine" && x.id != "pr");
    let added = added.context("the added comment")?;
    assert_eq!(slot(&added), json!({ "kind": "codeReview", "state": "created", "sessionResource": session }));
    let range = added.range.clone().context("a range")?;
    assert_eq!((range.start.line, range.start.character, range.end.line, range.end.character), (2, 1, 2, 9));
    a.check_against_snapshot(&channel).await?;

    // The person accepts it; now the agent sees it, replies, resolves, reopens and deletes.
    let mut accepted = added.clone();
    if let Some(Value::Object(s)) = accepted.meta.as_mut().and_then(|m| m.get_mut("vscode.agentFeedback")) {
        s.insert("state".into(), json!("accepted"));
    }
    a.dispatch(&channel, StateAction::AnnotationsSet(AnnotationsSetAction { annotation: accepted })).await?;
    let (c, id) = (channel.clone(), added.id.clone());
    a.until("the comment accepted", move |m| {
        annotations(m, &c).iter().any(|x| x.id == id && slot(x)["state"] == "accepted")
    })
    .await?;
    let id = added.id.clone();
    let second = call_tools(
        &url,
        &token,
        &[
            ("replyToComment", json!({ "commentId": id, "text": "done" })),
            ("resolveComments", json!({ "commentIds": [id, "foreign", "missing"] })),
            ("listComments", json!({})),
            ("listComments", json!({ "includeResolved": true })),
            ("resolveComments", json!({ "commentIds": [id], "resolved": false })),
            ("deleteComments", json!({ "commentIds": [id, "foreign", "missing", id] })),
        ],
    )
    .await?;
    let replied: Value = serde_json::from_str(&ok(&second[0]))?;
    assert_eq!(replied["comment"]["author"], "agent");
    assert_eq!(replied["comment"]["replies"], json!([{ "author": "agent", "text": "done" }]));
    let resolved: Value = serde_json::from_str(&ok(&second[1]))?;
    assert_eq!(resolved["updatedCommentIds"], json!([id]));
    assert_eq!(resolved["notFoundCommentIds"], json!(["foreign", "missing"]));
    let open: Value = serde_json::from_str(&ok(&second[2]))?;
    let open_ids: Vec<&str> =
        open["comments"].as_array().into_iter().flatten().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(open_ids, vec!["mine"], "resolved comments are left out unless asked for");
    let all: Value = serde_json::from_str(&ok(&second[3]))?;
    assert_eq!(all["comments"].as_array().map(Vec::len), Some(2));
    let reopened: Value = serde_json::from_str(&ok(&second[4]))?;
    assert_eq!(reopened["resolved"], false);
    let deleted: Value = serde_json::from_str(&ok(&second[5]))?;
    assert_eq!(deleted["deletedCommentIds"], json!([id]));
    assert_eq!(deleted["notFoundCommentIds"], json!(["foreign", "missing"]));

    let c = channel.clone();
    a.until("the comment deleted", move |m| annotations(m, &c).len() == 3).await?;
    let foreign = annotations(&a.mirror, &channel).into_iter().find(|x| x.id == "foreign").context("foreign kept")?;
    assert_eq!(foreign.entries.len(), 1, "somebody else's annotation is never touched");
    a.check_against_snapshot(&channel).await?;

    // viewUnreviewedComments asks first, in the calling turn; yes reveals every waiting comment.
    let turn_id = a.send(&chat, "call viewUnreviewedComments {}").await?;
    let questions = a.until_questions(&chat, 1).await?;
    // The session's channel says it in its own envelope, which may come after the chat's.
    let s = session.clone();
    a.until("the question on the session's inputNeeded list", move |m| {
        m.session(&s).and_then(|x| x.input_needed.as_ref()).is_some_and(|list| !list.is_empty())
    })
    .await?;
    let asked = a.mirror.session(&session).and_then(|s| s.input_needed.clone()).unwrap_or_default();
    assert_eq!(asked.len(), 1, "the question is on the session's inputNeeded list");
    a.answer(&chat, &questions[0], Some("yes")).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    let (success, text) = tool_said(&turn, "viewUnreviewedComments");
    assert!(success, "{text}");
    let shown: Value = serde_json::from_str(&text)?;
    assert_eq!(shown["comments"][0]["id"], "pr");
    assert_eq!(shown["comments"][0]["author"], "prReviewer");
    let c = channel.clone();
    a.until("the review comment submitted", move |m| {
        annotations(m, &c).iter().any(|x| x.id == "pr" && slot(x)["state"] == "submitted")
    })
    .await?;
    let (_, listed) = call_in_turn(&mut a, &chat, "listComments", json!({})).await?;
    let listed: Value = serde_json::from_str(&listed)?;
    assert!(listed.get("note").is_none(), "nothing waits any more: {listed}");
    assert_eq!(listed["comments"].as_array().map(Vec::len), Some(2));

    // Declined: nothing is shown. Nothing waiting: nothing is asked.
    let (success, _) = call_in_turn(
        &mut a,
        &chat,
        "addComment",
        json!({ "resourceUri": "file:///w/app.ts", "range": { "startLineNumber": 1, "startColumn": 1, "endLineNumber": 1, "endColumn": 2 }, "text": "another" }),
    )
    .await?;
    assert!(success);
    let turn_id = a.send(&chat, "call viewUnreviewedComments {}").await?;
    let questions = a.until_questions(&chat, 1).await?;
    a.answer(&chat, &questions[0], None).await?;
    let (success, text) = tool_said(&a.finished(&chat, &turn_id).await?, "viewUnreviewedComments");
    assert!(!success);
    assert_eq!(text, "The user chose not to show the comments they have not reviewed yet.");
    let waiting = annotations(&a.mirror, &channel).into_iter().filter(|x| slot(x)["state"] == "created").count();
    assert_eq!(waiting, 1, "a declined comment still waits");
    let (_, deleted) = call_in_turn(&mut a, &chat, "listComments", json!({})).await?;
    assert!(deleted.contains("There is 1 code review comment which the user has not reviewed yet."), "{deleted}");
    a.check_against_snapshot(&channel).await?;
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn comments_are_kept_and_nothing_is_asked_when_nothing_waits() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    let folder = tempfile::tempdir()?;
    let mut daemon = Daemon::start_in(home.path(), DaemonOptions::with_config(notes_config())).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = session_in(&mut a, "notes", folder.path()).await?;
    let (success, text) = call_in_turn(&mut a, &chat, "viewUnreviewedComments", json!({})).await?;
    assert!(success);
    assert_eq!(serde_json::from_str::<Value>(&text)?, json!({ "comments": [] }));
    let range = json!({ "startLineNumber": 1, "startColumn": 1, "endLineNumber": 2, "endColumn": 1 });
    let (success, _) = call_in_turn(
        &mut a,
        &chat,
        "addComment",
        json!({ "resourceUri": "file:///w/a.rs", "range": range, "text": "kept" }),
    )
    .await?;
    assert!(success);

    // Kept like any other mark: after a restart the channel still holds it.
    daemon.terminate().await?;
    let daemon = Daemon::start_in(home.path(), DaemonOptions::with_config(notes_config())).await?;
    let mut b = TestClient::connect(&daemon.url, "b").await?;
    let channel = format!("{session}/annotations");
    b.subscribe(&channel).await?;
    let kept = annotations(&b.mirror, &channel);
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].entries[0].text, StringOrMarkdown::Plain("kept".into()));
    assert_eq!(slot(&kept[0])["state"], "created");
    Ok(())
}

#[tokio::test]
async fn ahp_resource_reads_the_sessions_files_and_what_a_client_publishes() -> anyhow::Result<()> {
    let folder = tempfile::tempdir()?;
    std::fs::write(folder.path().join("notes.txt"), "the session's own words")?;
    std::fs::create_dir_all(folder.path().join("sub"))?;
    let outside = tempfile::tempdir()?;
    std::fs::write(outside.path().join("secret.txt"), "not yours")?;
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), folder.path().join("link.txt"))?;
    let daemon = Daemon::start_with(DaemonOptions::with_config(notes_config())).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = session_in(&mut a, "notes", folder.path()).await?;
    let (url, token) = endpoint(&mut a, &chat).await?;

    // Another client publishes an unsaved buffer, and answers resourceRead for it.
    let editor = TestClient::connect(&daemon.url, "editor").await?;
    // Kept connected until the end: it answers for what it publishes.
    editor.client.set_resource_request_handlers(ResourceRequestHandlers::new().on_resource_read(|params| async move {
        if params.uri == "virtual://editor/buffer.ts" {
            Ok(ResourceReadResult {
                data: "let unsaved = 1;".into(),
                encoding: ContentEncoding::Utf8,
                content_type: None,
            })
        } else {
            Err(JsonRpcError { code: -32008, message: format!("There is no buffer at {}", params.uri), data: None })
        }
    }));

    let dir = folder.path().display().to_string();
    let results = call_tools(
        &url,
        &token,
        &[
            ("ahp_resource", json!({ "uri": format!("file://{dir}/notes.txt") })),
            ("ahp_resource", json!({ "uri": format!("file://{dir}") })),
            ("ahp_resource", json!({ "uri": format!("file://{}/secret.txt", outside.path().display()) })),
            ("ahp_resource", json!({ "uri": format!("file://{dir}/link.txt") })),
            ("ahp_resource", json!({ "uri": format!("file://{dir}/../secret.txt") })),
            ("ahp_resource", json!({ "uri": format!("file://{dir}/missing.txt") })),
            ("ahp_resource", json!({ "uri": "notes.txt" })),
            ("ahp_resource", json!({})),
            ("ahp_resource", json!({ "uri": "virtual://editor/buffer.ts" })),
            ("ahp_resource", json!({ "uri": "virtual://editor/gone.ts" })),
            ("ahp_resource", json!({ "uri": "virtual://nobody/x.ts" })),
            ("ahp_resource", json!({ "uri": "ahp-session://x/annotations" })),
            ("ahp_terminals", json!({})),
        ],
    )
    .await?;
    assert_eq!(ok(&results[0]), "the session's own words");
    assert_eq!(ok(&results[1]), "sub/\nlink.txt\nnotes.txt");
    let outside_of =
        |uri: String| format!("{uri} is outside this session's folders; ahp_resource reads files under {dir} only.");
    assert_eq!(refused(&results[2]), outside_of(format!("file://{}/secret.txt", outside.path().display())));
    assert_eq!(
        refused(&results[3]),
        outside_of(format!("file://{dir}/link.txt")),
        "a link out of the folder is outside it"
    );
    assert_eq!(refused(&results[4]), outside_of(format!("file://{dir}/../secret.txt")));
    assert_eq!(refused(&results[5]), format!("There is no file at file://{dir}/missing.txt."));
    assert_eq!(
        refused(&results[6]),
        "Invalid ahp_resource input: uri must be an absolute URI including its scheme, such as 'file:///path/to/file'."
    );
    assert_eq!(refused(&results[7]), "Invalid ahp_resource input: uri must be a non-empty string.");
    assert_eq!(ok(&results[8]), "let unsaved = 1;", "read through resourceRead sent to the client that publishes it");
    assert_eq!(
        refused(&results[9]),
        "editor could not read virtual://editor/gone.ts: There is no buffer at virtual://editor/gone.ts"
    );
    assert_eq!(
        refused(&results[10]),
        "No connected client publishes virtual://nobody/x.ts: no client nobody is connected to this host."
    );
    assert_eq!(
        refused(&results[11]),
        "ahp_resource reads files under this session's folders and resources a connected client publishes at <scheme>://<client>/<path>; ahp-session://x/annotations is neither."
    );
    assert_eq!(ok(&results[12]), "This host has no terminal open.");

    // A daemon on wall time does not know the test-only clock request.
    let refused = tests::clock::advance(&a, 1000).await;
    assert!(refused.is_err(), "{refused:?}");
    Ok(())
}

/// The turns of `chat` a wakeup began.
fn wakeup_turns(mirror: &Mirror, chat: &str) -> Vec<Turn> {
    mirror
        .chat(chat)
        .map(|c| {
            c.turns
                .iter()
                .filter(|t| t.message.meta.as_ref().is_some_and(|m| m.contains_key("ahpd.wakeup")))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn schedule_wakeup_begins_a_turn_when_due_or_queues_behind_a_running_one() -> anyhow::Result<()> {
    let folder = tempfile::tempdir()?;
    let daemon = Daemon::start_with(manual_clock(notes_config(), 0)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = session_in(&mut a, "notes", folder.path()).await?;
    let (url, token) = endpoint(&mut a, &chat).await?;
    let results = call_tools(
        &url,
        &token,
        &[
            ("schedule_wakeup", json!({ "delaySeconds": 59, "prompt": "list" })),
            ("schedule_wakeup", json!({ "delaySeconds": 2_592_001, "prompt": "list" })),
            ("schedule_wakeup", json!({ "delaySeconds": 60 })),
            ("schedule_wakeup", json!({ "stop": "yes" })),
            ("schedule_wakeup", json!({ "delaySeconds": 600, "prompt": "list" })),
            ("schedule_wakeup", json!({ "delaySeconds": 120, "prompt": "list" })),
            ("schedule_wakeup", json!({ "stop": true })),
            ("schedule_wakeup", json!({ "stop": true })),
            ("schedule_wakeup", json!({ "delaySeconds": 60, "prompt": "list" })),
        ],
    )
    .await?;
    let bounds = "Invalid schedule_wakeup input: delaySeconds must be a number from 60 to 2592000 (30 days).";
    assert_eq!(refused(&results[0]), bounds);
    assert_eq!(refused(&results[1]), bounds);
    assert_eq!(refused(&results[2]), "Invalid schedule_wakeup input: prompt must be a non-empty string.");
    assert_eq!(refused(&results[3]), "Invalid schedule_wakeup input: stop must be a boolean.");
    let first = ok(&results[4]);
    assert!(first.starts_with("Wakeup scheduled: this chat begins a new turn at "), "{first}");
    assert!(first.ends_with("(600 seconds from now) with your prompt."), "{first}");
    let due = first.split(" at ").nth(1).and_then(|r| r.split(' ').next()).unwrap_or_default().to_owned();
    assert!(
        ok(&results[5]).ends_with(&format!("It replaces the wakeup that was due at {due}.")),
        "a chat holds one wakeup"
    );
    assert!(ok(&results[6]).starts_with("Wakeup cancelled; it was due at "));
    assert_eq!(ok(&results[7]), "This chat has no wakeup to cancel.");
    assert!(ok(&results[8]).contains("(60 seconds from now)"));

    // A turn is running when it falls due: the prompt is queued behind it.
    let asking = a.send(&chat, "ask Keep going?").await?;
    let questions = a.until_questions(&chat, 1).await?;
    tests::clock::advance(&a, 60_000).await?;
    let c = chat.clone();
    a.until("the wakeup's prompt queued", move |m| {
        m.chat(&c).and_then(|s| s.queued_messages.clone()).is_some_and(|q| q.iter().any(|p| p.message.text == "list"))
    })
    .await?;
    a.answer(&chat, &questions[0], Some("yes")).await?;
    a.finished(&chat, &asking).await?;
    let c = chat.clone();
    a.until("the queued wakeup's turn", move |m| {
        m.chat(&c).is_some_and(|s| s.turns.iter().any(|t| t.message.text == "list"))
    })
    .await?;

    // The chat is free when the next one falls due: its turn begins, marked as the agent's.
    let (_, said) =
        call_in_turn(&mut a, &chat, "schedule_wakeup", json!({ "delaySeconds": 90, "prompt": "list" })).await?;
    assert!(said.contains("(90 seconds from now)"), "{said}");
    tests::clock::advance(&a, 89_000).await?;
    tests::clock::advance(&a, 1_000).await?;
    let c = chat.clone();
    a.until("the wakeup's turn", move |m| wakeup_turns(m, &c).len() == 2).await?;
    for turn in wakeup_turns(&a.mirror, &chat) {
        assert_eq!(turn.message.text, "list");
        assert_eq!(turn.message.origin.kind, MessageKind::Agent);
    }
    let (_, none) = call_in_turn(&mut a, &chat, "schedule_wakeup", json!({ "stop": true })).await?;
    assert_eq!(none, "This chat has no wakeup to cancel.", "a wakeup fires once and is gone");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_wakeup_survives_a_restart_and_a_kill_9_and_fires_exactly_once() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    let folder = tempfile::tempdir()?;
    let mut daemon = Daemon::start_in(home.path(), manual_clock(notes_config(), 0)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = session_in(&mut a, "notes", folder.path()).await?;
    let (_, said) =
        call_in_turn(&mut a, &chat, "schedule_wakeup", json!({ "delaySeconds": 600, "prompt": "list" })).await?;
    assert!(said.starts_with("Wakeup scheduled"), "{said}");

    // `ahpd restart`: a clean stop and a start over the same folders. The session is not in
    // memory until the wakeup loads it.
    daemon.terminate().await?;
    let mut daemon = Daemon::start_in(home.path(), manual_clock(notes_config(), 0)).await?;
    let b = TestClient::connect(&daemon.url, "b").await?;
    tests::clock::advance(&b, 601_000).await?;
    let mut b = b;
    b.subscribe(&chat).await?;
    let c = chat.clone();
    b.until("the wakeup's turn after a restart", move |m| wakeup_turns(m, &c).len() == 1).await?;
    let (_, said) =
        call_in_turn(&mut b, &chat, "schedule_wakeup", json!({ "delaySeconds": 600, "prompt": "list" })).await?;
    assert!(said.starts_with("Wakeup scheduled"), "{said}");

    // kill -9 while it is pending; it falls due while the daemon is down (the next one starts
    // more than 20 minutes ahead), and fires once, when the daemon starts.
    daemon.kill9().await?;
    let mut daemon = Daemon::start_in(home.path(), manual_clock(notes_config(), 1_300_000)).await?;
    let mut c = TestClient::connect(&daemon.url, "c").await?;
    c.subscribe(&chat).await?;
    let ch = chat.clone();
    c.until("the wakeup's turn after a kill -9", move |m| wakeup_turns(m, &ch).len() == 2).await?;
    let (_, none) = call_in_turn(&mut c, &chat, "schedule_wakeup", json!({ "stop": true })).await?;
    assert_eq!(none, "This chat has no wakeup to cancel.");

    // Once: neither start again, nor a later clock, begins it a second time.
    daemon.kill9().await?;
    let daemon = Daemon::start_in(home.path(), manual_clock(notes_config(), 5_000_000)).await?;
    let mut d = TestClient::connect(&daemon.url, "d").await?;
    d.subscribe(&chat).await?;
    let (_, none) = call_in_turn(&mut d, &chat, "schedule_wakeup", json!({ "stop": true })).await?;
    assert_eq!(none, "This chat has no wakeup to cancel.");
    assert_eq!(wakeup_turns(&d.mirror, &chat).len(), 2, "each wakeup began exactly one turn");
    d.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_wakeup_whose_agent_is_not_running_stays_stored_for_the_next_start() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    let folder = tempfile::tempdir()?;
    let mut daemon = Daemon::start_in(home.path(), manual_clock(notes_config(), 0)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = session_in(&mut a, "notes", folder.path()).await?;
    call_in_turn(&mut a, &chat, "schedule_wakeup", json!({ "delaySeconds": 60, "prompt": "list" })).await?;
    daemon.terminate().await?;

    // Due at start, but the notes agent is not configured: its turn cannot begin, and it stays.
    let echo_only = json!({ "agents": { "echo": tests::agents::echo_paced(0) } });
    let mut daemon = Daemon::start_in(home.path(), manual_clock(echo_only, 120_000)).await?;
    daemon.wait_for_log("it stays stored", tests::PATIENCE).await?;
    daemon.terminate().await?;

    let daemon = Daemon::start_in(home.path(), manual_clock(notes_config(), 120_000)).await?;
    let mut b = TestClient::connect(&daemon.url, "b").await?;
    b.subscribe(&chat).await?;
    let c = chat.clone();
    b.until("the wakeup's turn once its agent runs", move |m| wakeup_turns(m, &c).len() == 1).await?;
    Ok(())
}

#[tokio::test]
async fn comment_writes_ask_session_review_and_a_call_nobody_is_behind_reads_alone() -> anyhow::Result<()> {
    let home = tests::daemon::Home::new()?;
    let added = home.expect(0, &["user", "add", "ana", "--role", "member", "--users", "users.json"]).await?;
    let token = added.stdout.trim().to_owned();
    let folder = tempfile::tempdir()?;
    let options = DaemonOptions {
        args: vec!["--users".into(), "users.json".into(), "--connection-token".into(), "root-secret".into()],
        config: Some(notes_config()),
        ..DaemonOptions::default()
    };
    let daemon = Daemon::start_in(home.path(), options).await?;
    let url = format!("{}/?tkn={token}", daemon.url.trim_end_matches('/'));
    let mut ana = TestClient::connect(&url, "ana").await?;
    let (_session, chat) = session_in(&mut ana, "notes", folder.path()).await?;
    let range = json!({ "startLineNumber": 1, "startColumn": 1, "endLineNumber": 1, "endColumn": 2 });

    // Ana's turn carries her grants: a member holds session:review.
    let (success, text) = call_in_turn(
        &mut ana,
        &chat,
        "addComment",
        json!({ "resourceUri": "file:///w/a.rs", "range": range, "text": "hers" }),
    )
    .await?;
    assert!(success, "{text}");

    // A call with no turn running has nobody behind it: it reads, and every review write is refused.
    let (endpoint_url, endpoint_token) = endpoint(&mut ana, &chat).await?;
    let results = call_tools(
        &endpoint_url,
        &endpoint_token,
        &[
            ("addComment", json!({ "resourceUri": "file:///w/a.rs", "range": range, "text": "nobody's" })),
            ("deleteComments", json!({ "commentIds": ["x"] })),
            ("listComments", json!({})),
        ],
    )
    .await?;
    assert_eq!(refused(&results[0]), "this turn may not session:review here");
    assert_eq!(refused(&results[1]), "this turn may not session:review here");
    assert!(ok(&results[2]).contains("There is 1 code review comment"), "listComments asks no grant");
    Ok(())
}
