//! What the tests read of a turn and how they answer it: the calls in a turn, its reasoning, the
//! text streaming in the running turn, a stop, a turn whose every question is allowed, and what the
//! host's tools a turn called answered (the sessions they made).

use ahp_types::actions::{ChatTurnCancelledAction, StateAction};
use std::path::Path;

use ahp_types::state::{ConfirmationOptionKind, ResponsePart, ToolCallState, Turn, TurnState};

use crate::client::waiting_calls;
use crate::{Mirror, TestClient};

/// The tool calls among a turn's parts, in order.
pub fn tool_calls(parts: &[ResponsePart]) -> Vec<&ToolCallState> {
    parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(tc) => Some(&tc.tool_call),
            _ => None,
        })
        .collect()
}

/// The reasoning a turn showed, joined.
pub fn reasoning(turn: &Turn) -> String {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Reasoning(r) => Some(r.content.as_str()),
            _ => None,
        })
        .collect()
}

/// A client's stop of the running turn `turn_id`.
pub fn stop(turn_id: &str) -> StateAction {
    StateAction::ChatTurnCancelled(ChatTurnCancelledAction { turn_id: turn_id.to_owned(), duration: 0, meta: None })
}

/// The markdown the chat's running turn has streamed so far.
pub fn active_text(m: &Mirror, chat: &str) -> String {
    m.chat(chat)
        .and_then(|c| c.active_turn.as_ref())
        .map(|t| {
            t.response_parts
                .iter()
                .filter_map(|p| match p {
                    ResponsePart::Markdown(md) => Some(md.content.as_str()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A host tool that declares itself destructive waits for a person whatever the backend: `text`
/// has the chat's model call `delete_session` (as its runtime names the tool) on another session,
/// `victim`. The call waits for a confirmation (the only call waiting, and it names
/// `delete_session`), the person denies it, and the turn goes on and completes with the call
/// cancelled; `victim` is still there to subscribe to. Answers the turn.
pub async fn deny_a_destructive_call(
    client: &mut TestClient,
    chat: &str,
    text: &str,
    victim: &str,
) -> anyhow::Result<Turn> {
    let turn_id = client.send(chat, text).await?;
    let waiting = client.until_waiting_calls(chat, 1).await?;
    let asked = client.mirror.chat(chat).and_then(|c| c.active_turn.clone()).map(|t| t.response_parts);
    let names: Vec<String> = tool_calls(&asked.unwrap_or_default())
        .into_iter()
        .filter_map(|call| match call {
            ToolCallState::PendingConfirmation(p) => Some(p.tool_name.clone()),
            _ => None,
        })
        .collect();
    anyhow::ensure!(names.iter().any(|n| n.contains("delete_session")), "the destructive call waits: {names:?}");
    client.confirm(chat, &waiting[0].0, &waiting[0].1, false).await?;
    let turn = client.finished(chat, &turn_id).await?;
    anyhow::ensure!(turn.state == TurnState::Complete, "a denial lets the turn go on: {turn:?}");
    let calls = tool_calls(&turn.response_parts);
    anyhow::ensure!(matches!(calls[..], [ToolCallState::Cancelled(_)]), "the denied call is cancelled: {calls:?}");
    client.subscribe(victim).await?;
    Ok(turn)
}

/// Sends `text` and allows every call the turn asks about, until it ends.
pub async fn turn_allowing(client: &mut TestClient, chat: &str, text: &str) -> anyhow::Result<Turn> {
    let turn_id = client.send(chat, text).await?;
    loop {
        let (c, t) = (chat.to_owned(), turn_id.clone());
        client
            .until("the turn to ask or end", move |m| {
                m.chat(&c).is_some_and(|s| s.turns.iter().any(|x| x.id == t) || !waiting_calls(s).is_empty())
            })
            .await?;
        let waiting = client.mirror.chat(chat).map(waiting_calls).unwrap_or_default();
        if waiting.is_empty() {
            return client.finished(chat, &turn_id).await;
        }
        for (turn, call) in waiting {
            client.confirm(chat, &turn, &call, true).await?;
        }
        let (c, t) = (chat.to_owned(), turn_id.clone());
        client
            .until("the confirmation to be taken", move |m| {
                m.chat(&c).is_some_and(|s| s.turns.iter().any(|x| x.id == t) || waiting_calls(s).is_empty())
            })
            .await?;
    }
}

/// The options the chat's running turn offers for its one call waiting to be allowed, as (label,
/// kind).
pub fn asked_options(m: &Mirror, chat: &str) -> Vec<(String, ahp_types::state::ConfirmationOptionKind)> {
    let Some(turn) = m.chat(chat).and_then(|c| c.active_turn.as_ref()) else { return Vec::new() };
    let waiting = tool_calls(&turn.response_parts).into_iter().find_map(|call| match call {
        ToolCallState::PendingConfirmation(p) => Some(p.options.clone().unwrap_or_default()),
        _ => None,
    });
    waiting.unwrap_or_default().into_iter().map(|o| (o.label, o.kind)).collect()
}

/// A command the agent asks the client about, allowed once and denied once: exactly one call
/// waits, with the agent's own options, approvals first, and nothing of the turn ran before the
/// person answered (the command's own call may show as running, or still streaming its input,
/// beside the one that asks, as pi's does while an extension asks: which of the two it shows
/// depends on whether pi-acp's `in_progress` update came before the extension's question); the allowed command runs in `folder` and every call of its turn
/// succeeds, the denied one does not run, a call of its turn shows as denied and none succeeded.
/// `ask(file)` is the words that make the model ask to create `file`.
pub async fn one_allowed_one_denied(
    client: &mut TestClient,
    session: &str,
    chat: &str,
    folder: &Path,
    ask: impl Fn(&str) -> String,
) -> anyhow::Result<()> {
    let allowed = client.send(chat, &ask("allowed.txt")).await?;
    let waiting = client.until_waiting_calls(chat, 1).await?;
    let asked = client.mirror.chat(chat).and_then(|c| c.active_turn.clone()).expect("a running turn");
    let calls = tool_calls(&asked.response_parts);
    let pending: Vec<_> = calls
        .iter()
        .filter_map(|c| match c {
            ToolCallState::PendingConfirmation(p) => Some(p),
            _ => None,
        })
        .collect();
    let [p] = pending[..] else { panic!("one call waits for the person: {calls:?}") };
    let options = p.options.clone().unwrap_or_default();
    assert!(options.len() >= 2, "the agent's own options: {p:?}");
    assert_eq!(options[0].kind, ConfirmationOptionKind::Approve, "approvals first: {p:?}");
    assert!(
        calls.iter().all(|c| matches!(
            c,
            ToolCallState::PendingConfirmation(_) | ToolCallState::Running(_) | ToolCallState::Streaming(_)
        )),
        "nothing ran before the person answered: {calls:?}"
    );
    assert!(!folder.join("allowed.txt").exists(), "not before it was allowed");
    client.check_against_snapshot(session).await?;
    client.confirm(chat, &waiting[0].0, &waiting[0].1, true).await?;
    let turn = client.finished(chat, &allowed).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let calls = tool_calls(&turn.response_parts);
    let succeeded = |c: &ToolCallState| matches!(c, ToolCallState::Completed(c) if c.success);
    assert!(!calls.is_empty() && calls.iter().copied().all(succeeded), "{calls:?}");
    assert!(folder.join("allowed.txt").exists(), "the allowed command ran");

    let denied = client.send(chat, &ask("denied.txt")).await?;
    let waiting = client.until_waiting_calls(chat, 1).await?;
    client.confirm(chat, &waiting[0].0, &waiting[0].1, false).await?;
    let turn = client.finished(chat, &denied).await?;
    let calls = tool_calls(&turn.response_parts);
    assert!(calls.iter().any(|c| matches!(c, ToolCallState::Cancelled(_))), "a call shows as refused: {calls:?}");
    assert!(!calls.iter().copied().any(succeeded), "nothing of the refused turn succeeded: {calls:?}");
    assert!(!folder.join("denied.txt").exists(), "the denied command did not run");
    Ok(())
}

/// Each host tool call of a turn, in order: (tool, succeeded, what it answered).
pub fn tool_results(turn: &Turn) -> Vec<(String, bool, String)> {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(tc) => serde_json::to_value(&tc.tool_call).ok(),
            _ => None,
        })
        .map(|v| {
            let text = v.pointer("/content/0/text").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned();
            let name = v["toolName"].as_str().unwrap_or_default().to_owned();
            (name, v["success"].as_bool().unwrap_or(false), text)
        })
        .collect()
}

/// What the turn's tool calls that failed answered, in order.
pub fn refusals(turn: &Turn) -> Vec<String> {
    tool_results(turn).into_iter().filter(|(_, ok, _)| !ok).map(|(_, _, text)| text).collect()
}

/// What the turn's tool calls that succeeded answered, in order.
pub fn successes(turn: &Turn) -> Vec<String> {
    tool_results(turn).into_iter().filter(|(_, ok, _)| *ok).map(|(_, _, text)| text).collect()
}

/// The open link inside an answer such as `New session created (<link>).`.
pub fn link_in(text: &str) -> anyhow::Result<String> {
    let start = text.find("agent-host-session://").ok_or_else(|| anyhow::anyhow!("no link in {text:?}"))?;
    Ok(text[start..].trim_end_matches(").").trim_end_matches(')').to_owned())
}

/// The session a link names.
pub fn session_of(link: &str) -> String {
    let id = link.split('/').nth(3).unwrap_or_default().split('?').next().unwrap_or_default();
    format!("ahp-session:/{id}")
}

/// Subscribes to a session (one a tool or a relayed command made), waits for it to be ready, and
/// subscribes to its default chat; answers that chat.
pub async fn watch_session(client: &mut TestClient, session: &str) -> anyhow::Result<String> {
    client.subscribe(session).await?;
    let s = session.to_owned();
    client
        .until("the session to be ready", move |m| {
            m.session(&s).is_some_and(|st| {
                st.lifecycle == ahp_types::state::SessionLifecycle::Ready && st.default_chat.is_some()
            })
        })
        .await?;
    let chat = client.mirror.session(session).and_then(|s| s.default_chat.clone());
    let chat = chat.ok_or_else(|| anyhow::anyhow!("{session} has no default chat"))?;
    client.subscribe(&chat).await?;
    Ok(chat)
}

/// Waits until `chat` has `n` turns and none running.
pub async fn until_turns(client: &mut TestClient, chat: &str, n: usize) -> anyhow::Result<()> {
    let c = chat.to_owned();
    client
        .until(&format!("{n} turns in {chat}"), move |m| {
            m.chat(&c).is_some_and(|st| st.turns.len() >= n && st.active_turn.is_none())
        })
        .await
}
