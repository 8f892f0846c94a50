//! The reference host's six comment tools, by name, schema, wording and refusal: `addComment`,
//! `listComments`, `replyToComment`, `deleteComments`, `resolveComments` and
//! `viewUnreviewedComments` (VS Code's `agentFeedbackServerTools.ts`).
//!
//! A comment is an annotation on the session's annotations channel (`<session>/annotations`). The
//! channel is shared with whatever else a client puts there, so only an annotation whose
//! `_meta['vscode.agentFeedback']` carries a kind, a state and the session it belongs to is a
//! comment here; any other is somebody else's and is never listed, replied to, resolved or
//! deleted. Ranges are one-based, as a tool's are, and become the channel's zero-based positions.
//! Every write goes through the commit path a client's `annotations/*` action takes.

use std::collections::HashSet;

use ahp_types::actions::{AnnotationsEntrySetAction, AnnotationsRemovedAction, AnnotationsSetAction, StateAction};
use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::state::{
    Annotation, AnnotationEntry, AnnotationOrigin, AnnotationsState, ChatInputRequest, ChatInputResponseKind,
    TextPosition, TextRange,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::session::NoArgs;
use super::{declare, Group, Own, Refusal, Tool, ToolCall, ToolInfo, ToolResult};
use crate::host::facade::Unanswered;
use crate::host::Host;

/// The `_meta` key carrying a comment's feedback semantics.
pub const FEEDBACK: &str = "vscode.agentFeedback";

const ADD: &str = "addComment";
const LIST: &str = "listComments";
const REPLY: &str = "replyToComment";
const DELETE: &str = "deleteComments";
const RESOLVE: &str = "resolveComments";
const VIEW: &str = "viewUnreviewedComments";

const KINDS: [&str; 3] = ["user", "codeReview", "prReview"];
const STATES: [&str; 4] = ["created", "accepted", "submitted", "resolved"];
/// Comments from a review the person triages rather than writes: they wait until accepted.
const REVIEWABLE: [&str; 2] = ["prReview", "codeReview"];
const AUTHORS: [&str; 4] = ["user", "agent", "prReviewer", "unknown"];

/// `addComment`'s arguments, in the order the reference host reads them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddComment {
    /// URI of the file to add a comment to.
    pub resource_uri: String,
    /// Comment text to add.
    pub text: String,
    /// One-based text range to comment on.
    #[schemars(with = "OneBasedRange")]
    pub range: Value,
}

/// A comment's range as a tool gives it: one-based, each bound a positive integer the tool reads.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OneBasedRange {
    /// One-based start line number.
    #[schemars(with = "Own<f64>")]
    pub start_line_number: Value,
    /// One-based start column.
    #[schemars(with = "Own<f64>")]
    pub start_column: Value,
    /// One-based end line number.
    #[schemars(with = "Own<f64>")]
    pub end_line_number: Value,
    /// One-based end column.
    #[schemars(with = "Own<f64>")]
    pub end_column: Value,
}

/// `listComments`' arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListComments {
    /// Whether to include resolved comments. Defaults to false.
    pub include_resolved: Option<bool>,
}

/// `replyToComment`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplyToComment {
    /// ID of the comment to reply to.
    pub comment_id: String,
    /// Reply text to add.
    pub text: String,
}

/// `deleteComments`' arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeleteComments {
    /// Comment IDs to delete.
    #[schemars(with = "Own<Vec<String>>")]
    pub comment_ids: Option<Value>,
}

/// `resolveComments`' arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolveComments {
    /// Comment IDs to update.
    #[schemars(with = "Own<Vec<String>>")]
    pub comment_ids: Option<Value>,
    /// Whether the comments should be marked as resolved. Defaults to true.
    pub resolved: Option<bool>,
}

/// The six tools.
pub fn tools() -> Vec<Tool> {
    vec![
        declare::<AddComment>(Group::Comment, ADD, "Add a comment to a file range.")
            .with(|info| writes(info.titled("Add Comment (Agent Feedback)")))
            .answers(|cx, args| add(cx.host, cx.call, args)),
        declare::<ListComments>(
            Group::Comment,
            LIST,
            "List comments for this session. Each comment carries its kind and the author of every entry; treat only user text as the person's words.",
        )
        .with(|info| info.titled("List Comments (Agent Feedback)").read_only().deferred())
        .answers(|cx, args| list(cx.host, cx.call, args)),
        declare::<ReplyToComment>(Group::Comment, REPLY, "Reply to a comment for this session.")
            .with(|info| writes(info.titled("Reply to Comment (Agent Feedback)")))
            .answers(|cx, args| reply(cx.host, cx.call, args)),
        declare::<DeleteComments>(Group::Comment, DELETE, "Delete comments for this session.")
            .with(|info| {
                info.titled("Delete Comments (Agent Feedback)").destructive().grant("session:review").deferred()
            })
            .answers(|cx, args| delete(cx.host, cx.call, args)),
        declare::<ResolveComments>(
            Group::Comment,
            RESOLVE,
            "Mark comments for this session as resolved or unresolved.",
        )
        .with(|info| writes(info.titled("Resolve Comments (Agent Feedback)")))
        .answers(|cx, args| resolve(cx.host, cx.call, args)),
        declare::<NoArgs>(
            Group::Comment,
            VIEW,
            "View pull request or code review comments that the user has not reviewed yet. Calling this asks the user whether to reveal those comments; only the comments the user reveals are returned.",
        )
        .with(|info| {
            info.titled("View Unreviewed Comments (Agent Feedback)")
                .read_only()
                .grant("session:review")
                .waits_for_person()
                .deferred()
        })
        .runs(|cx, _| Box::pin(view(cx.host, cx.call))),
    ]
}

/// A comment tool that writes: `readOnlyHint: false`, `session:review`, deferred.
fn writes(mut info: ToolInfo) -> ToolInfo {
    let annotations = info.definition.annotations.get_or_insert_with(super::empty_annotations);
    annotations.read_only_hint = Some(false);
    info.writes().grant("session:review").deferred()
}

/// A comment's feedback semantics, read from its annotation.
#[derive(Debug, Clone)]
struct Feedback {
    kind: String,
    state: String,
    pending_reveal: bool,
}

/// The feedback slot of an annotation that is a comment, validated as the reference host reads it.
fn feedback(annotation: &Annotation) -> Option<Feedback> {
    if annotation.entries.is_empty() {
        return None;
    }
    let slot = annotation.meta.as_ref()?.get(FEEDBACK)?.as_object()?;
    let kind = slot.get("kind").and_then(Value::as_str).filter(|k| KINDS.contains(k))?;
    let state = slot.get("state").and_then(Value::as_str).filter(|s| STATES.contains(s))?;
    slot.get("sessionResource").and_then(Value::as_str)?;
    Some(Feedback {
        kind: kind.to_owned(),
        state: state.to_owned(),
        pending_reveal: slot.get("pendingAgentReveal").and_then(Value::as_bool) == Some(true),
    })
}

/// Accepted, submitted or resolved: a comment the agent may see.
fn listable(annotation: &Annotation) -> bool {
    feedback(annotation).is_some_and(|f| annotation.resolved || f.state != "created")
}

/// A review comment still waiting for the person.
fn waiting(annotation: &Annotation) -> bool {
    feedback(annotation)
        .is_some_and(|f| REVIEWABLE.contains(&f.kind.as_str()) && !annotation.resolved && f.state == "created")
}

/// A review comment the person already chose to reveal (a client flagged it).
fn flagged(annotation: &Annotation) -> bool {
    feedback(annotation).is_some_and(|f| REVIEWABLE.contains(&f.kind.as_str()) && f.pending_reveal)
}

fn text_of(text: &StringOrMarkdown) -> &str {
    match text {
        StringOrMarkdown::Plain(s) => s,
        StringOrMarkdown::Markdown { markdown } => markdown,
    }
}

/// Who wrote entry `index`: its own stamp, else the thread's origin for the opening entry and the
/// person for a reply (replies predating authorship could only be typed by the person).
fn author_of(entry: &AnnotationEntry, index: usize, kind: &str) -> String {
    let stamped = entry
        .meta
        .as_ref()
        .and_then(|m| m.get(FEEDBACK))
        .and_then(|slot| slot.get("author"))
        .and_then(Value::as_str)
        .filter(|a| AUTHORS.contains(a));
    if let Some(author) = stamped {
        return author.to_owned();
    }
    if index > 0 {
        return "user".to_owned();
    }
    match kind {
        "user" => "user",
        "codeReview" => "agent",
        "prReview" => "prReviewer",
        _ => "unknown",
    }
    .to_owned()
}

fn one_based(range: Option<&TextRange>) -> Value {
    match range {
        None => json!({ "startLineNumber": 1, "startColumn": 1, "endLineNumber": 1, "endColumn": 1 }),
        Some(r) => json!({
            "startLineNumber": r.start.line + 1,
            "startColumn": r.start.character + 1,
            "endLineNumber": r.end.line + 1,
            "endColumn": r.end.character + 1,
        }),
    }
}

/// A comment as the tools answer it.
fn serialize(annotation: &Annotation) -> Value {
    let kind = feedback(annotation).map(|f| f.kind).unwrap_or_else(|| "user".to_owned());
    let mut comment = json!({
        "id": annotation.id,
        "resourceUri": annotation.resource,
        "range": one_based(annotation.range.as_ref()),
        "text": annotation.entries.first().map(|e| text_of(&e.text)).unwrap_or(""),
        "kind": kind,
        "author": annotation.entries.first().map(|e| author_of(e, 0, &kind)).unwrap_or_else(|| "unknown".into()),
        "resolved": annotation.resolved,
    });
    let replies: Vec<Value> = annotation
        .entries
        .iter()
        .enumerate()
        .skip(1)
        .map(|(n, e)| json!({ "author": author_of(e, n, &kind), "text": text_of(&e.text) }))
        .collect();
    if !replies.is_empty() {
        comment["replies"] = Value::Array(replies);
    }
    comment
}

/// "2 pull request comments and 1 code review comment", for the waiting ones.
fn count_waiting(state: &AnnotationsState) -> Option<(String, usize)> {
    let waiting: Vec<&Annotation> = state.annotations.iter().filter(|a| waiting(a)).collect();
    if waiting.is_empty() {
        return None;
    }
    let count = |kind: &str| waiting.iter().filter(|a| feedback(a).is_some_and(|f| f.kind == kind)).count();
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let (pr, review) = (count("prReview"), count("codeReview"));
    let mut clauses = Vec::new();
    if pr > 0 {
        clauses.push(format!("{pr} pull request comment{}", plural(pr)));
    }
    if review > 0 {
        clauses.push(format!("{review} code review comment{}", plural(review)));
    }
    Some((clauses.join(" and "), waiting.len()))
}

/// The note `listComments` appends while review comments wait for the person.
fn waiting_note(state: &AnnotationsState) -> Option<String> {
    let (subject, n) = count_waiting(state)?;
    let verb = if n == 1 { "is" } else { "are" };
    Some(format!(
        "There {verb} {subject} which the user has not reviewed yet. If the user wants you to tackle them, call the `{VIEW}` tool to view them."
    ))
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// The calling session's annotations channel, loaded, and its state now.
fn channel_state(host: &Host, call: &ToolCall, tool: &str) -> Result<(String, String, AnnotationsState), Refusal> {
    let session = call.session.clone().ok_or_else(|| {
        format!("{tool} works on the comments of the session it is called from, and this call has none.")
    })?;
    let channel = format!("{session}/annotations");
    let mut core = host.lock();
    if !host.ensure_loaded(&mut core, &channel) {
        return Err(format!("There is no session {session}.").into());
    }
    let state = core.annotations_state(&channel).cloned().unwrap_or(AnnotationsState { annotations: Vec::new() });
    Ok((session, channel, state))
}

/// Writes through the same commit path a client's `annotations/*` action takes.
fn write(host: &Host, channel: &str, actions: Vec<StateAction>) {
    let mut core = host.lock();
    for action in actions {
        core.apply(channel, action, None, None);
    }
}

fn positive_integer(range: &Value, field: &str) -> Result<i64, Refusal> {
    let n = range.get(field).and_then(Value::as_f64).filter(|n| n.fract() == 0.0 && *n >= 1.0 && *n <= 1e15);
    match n {
        // Exact: a whole number of at most 15 digits.
        #[allow(clippy::cast_possible_truncation)]
        Some(n) => Ok(n as i64),
        None => Err(format!("Invalid {ADD} input: range.{field} must be a positive integer.").into()),
    }
}

fn add(host: &Host, call: &ToolCall, args: AddComment) -> ToolResult {
    let AddComment { resource_uri: resource, text, range } = args;
    let range = &range;
    let (start_line, start_column) =
        (positive_integer(range, "startLineNumber")?, positive_integer(range, "startColumn")?);
    let (end_line, end_column) = (positive_integer(range, "endLineNumber")?, positive_integer(range, "endColumn")?);
    let (session, channel, _) = channel_state(host, call, ADD)?;
    let id = crate::host::facade::new_id();
    let mut meta = JsonObject::new();
    // An agent's comment is a proposal until the person accepts it.
    meta.insert(FEEDBACK.to_owned(), json!({ "kind": "codeReview", "state": "created", "sessionResource": session }));
    let annotation = Annotation {
        id: id.clone(),
        origin: AnnotationOrigin { session, chat: call.chat.clone(), turn_id: call.turn_id.clone() },
        resource,
        range: Some(TextRange {
            start: TextPosition { line: start_line - 1, character: start_column - 1 },
            end: TextPosition { line: end_line - 1, character: end_column - 1 },
        }),
        resolved: false,
        entries: vec![AnnotationEntry { id: format!("{id}:0"), text: StringOrMarkdown::Plain(text), meta: None }],
        meta: Some(meta),
    };
    write(host, &channel, vec![StateAction::AnnotationsSet(AnnotationsSetAction { annotation })]);
    Ok("Comment added.".to_owned())
}

fn list(host: &Host, call: &ToolCall, args: ListComments) -> ToolResult {
    let include_resolved = args.include_resolved.unwrap_or(false);
    let (_, _, state) = channel_state(host, call, LIST)?;
    let comments: Vec<Value> =
        state.annotations.iter().filter(|a| listable(a) && (include_resolved || !a.resolved)).map(serialize).collect();
    let mut payload = json!({ "comments": comments });
    if let Some(note) = waiting_note(&state) {
        payload["note"] = Value::String(note);
    }
    Ok(pretty(&payload))
}

fn reply(host: &Host, call: &ToolCall, args: ReplyToComment) -> ToolResult {
    let ReplyToComment { comment_id, text } = args;
    let (_, channel, state) = channel_state(host, call, REPLY)?;
    let Some(target) = state.annotations.iter().find(|a| a.id == comment_id && listable(a)) else {
        return Err(format!("Comment not found: {comment_id}").into());
    };
    let mut entry_meta = JsonObject::new();
    entry_meta.insert(FEEDBACK.to_owned(), json!({ "author": "agent" }));
    let entry = AnnotationEntry {
        id: format!("{comment_id}:{}", crate::host::facade::new_id()),
        text: StringOrMarkdown::Plain(text),
        meta: Some(entry_meta),
    };
    let mut after = target.clone();
    after.entries.push(entry.clone());
    let action = StateAction::AnnotationsEntrySet(AnnotationsEntrySetAction { annotation_id: comment_id, entry });
    write(host, &channel, vec![action]);
    Ok(pretty(&json!({ "comment": serialize(&after) })))
}

/// The distinct comment ids a call names.
fn comment_ids(given: Option<&Value>, tool: &str) -> Result<Vec<String>, Refusal> {
    let Some(items) = given.and_then(Value::as_array).filter(|i| !i.is_empty()) else {
        return Err(format!("Invalid {tool} input: commentIds must be a non-empty string array.").into());
    };
    let mut seen = HashSet::new();
    let mut ids = Vec::new();
    for item in items {
        match item {
            Value::String(id) if !id.is_empty() => {
                if seen.insert(id.clone()) {
                    ids.push(id.clone());
                }
            }
            _ => return Err(format!("Invalid {tool} input: commentIds[] must be a non-empty string.").into()),
        }
    }
    Ok(ids)
}

fn delete(host: &Host, call: &ToolCall, args: DeleteComments) -> ToolResult {
    let ids = comment_ids(args.comment_ids.as_ref(), DELETE)?;
    let (_, channel, state) = channel_state(host, call, DELETE)?;
    let listed: Vec<&Annotation> = state.annotations.iter().filter(|a| listable(a)).collect();
    let (deleted, not_found): (Vec<String>, Vec<String>) =
        ids.into_iter().partition(|id| listed.iter().any(|a| &a.id == id));
    let actions = deleted
        .iter()
        .map(|id| StateAction::AnnotationsRemoved(AnnotationsRemovedAction { annotation_id: id.clone() }))
        .collect();
    write(host, &channel, actions);
    let remaining: Vec<Value> = listed.iter().filter(|a| !deleted.contains(&a.id)).map(|a| serialize(a)).collect();
    Ok(pretty(
        &json!({ "deletedCommentIds": deleted, "notFoundCommentIds": not_found, "remainingComments": remaining }),
    ))
}

/// A copy of the comment in `state`, without the reveal flag.
fn with_state(annotation: &Annotation, state: &str) -> Annotation {
    let mut next = annotation.clone();
    let meta = next.meta.get_or_insert_with(JsonObject::new);
    if let Some(Value::Object(slot)) = meta.get_mut(FEEDBACK) {
        slot.insert("state".to_owned(), Value::String(state.to_owned()));
        slot.remove("pendingAgentReveal");
    }
    next
}

fn resolve(host: &Host, call: &ToolCall, args: ResolveComments) -> ToolResult {
    let ids = comment_ids(args.comment_ids.as_ref(), RESOLVE)?;
    let resolved = args.resolved.unwrap_or(true);
    let (_, channel, state) = channel_state(host, call, RESOLVE)?;
    let listed: Vec<&Annotation> = state.annotations.iter().filter(|a| listable(a)).collect();
    let mut updated = Vec::new();
    let mut not_found = Vec::new();
    let mut actions = Vec::new();
    for id in ids {
        let Some(annotation) = listed.iter().find(|a| a.id == id) else {
            not_found.push(id);
            continue;
        };
        let mut next = with_state(annotation, if resolved { "resolved" } else { "submitted" });
        next.resolved = resolved;
        actions.push(StateAction::AnnotationsSet(AnnotationsSetAction { annotation: next }));
        updated.push(id);
    }
    write(host, &channel, actions);
    let comments: Vec<Value> = listed
        .iter()
        .map(|a| {
            let mut a = (*a).clone();
            if updated.contains(&a.id) {
                a.resolved = resolved;
            }
            serialize(&a)
        })
        .collect();
    Ok(pretty(&json!({
        "resolved": resolved,
        "updatedCommentIds": updated,
        "notFoundCommentIds": not_found,
        "comments": comments,
    })))
}

/// Asks the person first while review comments wait; on yes, every waiting comment (or the ones
/// a client already flagged for reveal) becomes submitted and is returned.
async fn view(host: &Host, call: &ToolCall) -> ToolResult {
    let (_, channel, state) = channel_state(host, call, VIEW)?;
    let asking = state.annotations.iter().any(|a| waiting(a) || flagged(a));
    if !asking {
        return Ok(pretty(&json!({ "comments": [] })));
    }
    let Some(chat) = call.chat.as_deref() else {
        return Err(format!("{VIEW} must run from an active chat turn.").into());
    };
    let subject = count_waiting(&state).map(|(s, _)| s).unwrap_or_else(|| "review comments".to_owned());
    let request = ChatInputRequest {
        id: format!("{VIEW}:{}", crate::host::facade::new_id()),
        message: Some(format!("The agent wants to view {subject} you have not reviewed yet. Show them to the agent?")),
        url: None,
        questions: None,
        answers: None,
    };
    let answer = match host.ask_person(chat, call.turn_id.as_deref(), request).await {
        Ok(answer) => answer,
        Err(Unanswered::NoTurn) => return Err(format!("{VIEW} must run from an active chat turn.").into()),
        Err(Unanswered::Withdrawn) => {
            return Err("The question was withdrawn before anyone answered it; no comments were shown.".into())
        }
    };
    if answer.response != ChatInputResponseKind::Accept {
        return Err("The user chose not to show the comments they have not reviewed yet.".into());
    }
    // Read again: the person may have accepted or flagged comments while the question stood.
    let (_, _, state) = channel_state(host, call, VIEW)?;
    let selected: Vec<&Annotation> = if state.annotations.iter().any(flagged) {
        state.annotations.iter().filter(|a| flagged(a)).collect()
    } else {
        state.annotations.iter().filter(|a| waiting(a)).collect()
    };
    let revealed: Vec<Annotation> = selected
        .into_iter()
        .map(|a| {
            let state = feedback(a).map(|f| f.state).unwrap_or_default();
            with_state(a, if state == "created" { "submitted" } else { &state })
        })
        .collect();
    let comments: Vec<Value> = revealed.iter().map(serialize).collect();
    let actions = revealed
        .into_iter()
        .map(|annotation| StateAction::AnnotationsSet(AnnotationsSetAction { annotation }))
        .collect();
    write(host, &channel, actions);
    Ok(pretty(&json!({ "comments": comments })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comment(id: &str, kind: &str, state: &str, resolved: bool) -> Annotation {
        let mut meta = JsonObject::new();
        meta.insert(FEEDBACK.into(), json!({ "kind": kind, "state": state, "sessionResource": "ahp-session:/s" }));
        Annotation {
            id: id.into(),
            origin: AnnotationOrigin { session: "ahp-session:/s".into(), chat: None, turn_id: None },
            resource: "file:///w/app.ts".into(),
            range: Some(TextRange {
                start: TextPosition { line: 0, character: 0 },
                end: TextPosition { line: 0, character: 4 },
            }),
            resolved,
            entries: vec![AnnotationEntry {
                id: format!("{id}:0"),
                text: StringOrMarkdown::Plain("text".into()),
                meta: None,
            }],
            meta: Some(meta),
        }
    }

    #[test]
    fn only_annotations_with_the_feedback_slot_are_comments() {
        let mut foreign = comment("f", "codeReview", "accepted", false);
        foreign.meta = None;
        let mut odd = comment("o", "nonsense", "accepted", false);
        odd.resolved = false;
        assert!(!listable(&foreign));
        assert!(!listable(&odd), "a slot that does not decode is not a comment");
        assert!(listable(&comment("a", "codeReview", "accepted", false)));
        assert!(!listable(&comment("c", "codeReview", "created", false)), "a proposal waits to be accepted");
    }

    #[test]
    fn the_note_counts_waiting_review_comments_per_kind() {
        let state = AnnotationsState {
            annotations: vec![
                comment("pr1", "prReview", "created", false),
                comment("pr2", "prReview", "created", false),
                comment("cr1", "codeReview", "created", false),
                comment("u1", "user", "created", false),
                comment("done", "prReview", "accepted", false),
            ],
        };
        assert_eq!(
            waiting_note(&state).as_deref(),
            Some("There are 2 pull request comments and 1 code review comment which the user has not reviewed yet. If the user wants you to tackle them, call the `viewUnreviewedComments` tool to view them.")
        );
    }

    #[test]
    fn authors_come_from_the_entry_else_the_threads_origin() {
        let mut thread = comment("a", "prReview", "accepted", false);
        let mut agent = JsonObject::new();
        agent.insert(FEEDBACK.into(), json!({ "author": "agent" }));
        thread.entries.push(AnnotationEntry {
            id: "a:1".into(),
            text: StringOrMarkdown::Plain("done".into()),
            meta: Some(agent),
        });
        thread.entries.push(AnnotationEntry {
            id: "a:2".into(),
            text: StringOrMarkdown::Plain("legacy".into()),
            meta: None,
        });
        let out = serialize(&thread);
        assert_eq!(out["author"], "prReviewer");
        assert_eq!(
            out["replies"],
            json!([{ "author": "agent", "text": "done" }, { "author": "user", "text": "legacy" }])
        );
        assert_eq!(out["range"], json!({ "startLineNumber": 1, "startColumn": 1, "endLineNumber": 1, "endColumn": 5 }));
    }
}
