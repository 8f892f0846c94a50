//! An ACP agent's subagents as chats of their own (seed 004 `subagents`), as Claude's Task is on
//! the `claude` backend. ACP 1 has no word for a delegated task, so this reads the one convention
//! an agent speaks today: the Claude ACP adapter (`claude-agent-acp`) stamps every update a
//! subagent makes (its streamed text and thinking, its tool calls and their updates) with
//! `_meta.claudeCode.parentToolUseId`, the id of the Agent/Task tool call of the turn that
//! started it, and sends it on the parent session. The first such update opens the subagent's
//! chat through `subagent/started` (titled from that call's input), the updates are mapped there
//! as any turn's, and the call's own end (or the turn's) ends it. An update naming no call of the
//! turn stays in the turn.

use agent_client_protocol_schema::v1 as acp;
use agent_client_protocol_schema::v1::SessionUpdate;
use agent_runner::SessionHost;
use protocol::SubagentStartedParams;
use serde_json::Value;

/// The tool call whose subagent made `update`, when the agent says so.
pub fn parent_call(update: &SessionUpdate) -> Option<String> {
    let meta = match update {
        SessionUpdate::AgentMessageChunk(chunk)
        | SessionUpdate::AgentThoughtChunk(chunk)
        | SessionUpdate::UserMessageChunk(chunk) => chunk.meta.as_ref(),
        SessionUpdate::ToolCall(call) => call.meta.as_ref(),
        SessionUpdate::ToolCallUpdate(update) => update.meta.as_ref(),
        SessionUpdate::Plan(plan) => plan.meta.as_ref(),
        _ => None,
    };
    parent_in(meta)
}

/// The parent call a tool call's `_meta` names (a permission request's call carries it too).
pub fn parent_of_call(call: &acp::ToolCallUpdate) -> Option<String> {
    parent_in(call.meta.as_ref())
}

fn parent_in(meta: Option<&acp::Meta>) -> Option<String> {
    meta?.get("claudeCode")?.get("parentToolUseId")?.as_str().filter(|id| !id.is_empty()).map(str::to_owned)
}

/// Opens the chat of the subagent the call `call` started: its title, kind and prompt from the
/// call's input (`description`, `subagent_type`, `prompt`: the Agent/Task tool's), else the call's
/// title. Answers the handle to emit its turn on, and that turn's id.
pub fn open(host: &SessionHost, call: &str, title: &str, input: Option<&str>) -> (SessionHost, String) {
    let input: Value = input.and_then(|i| serde_json::from_str(i).ok()).unwrap_or(Value::Null);
    let text = |key: &str| input.get(key).and_then(Value::as_str).filter(|t| !t.is_empty()).map(str::to_owned);
    let description = text("description");
    let turn_id = uuid::Uuid::new_v4().to_string();
    let params = SubagentStartedParams {
        chat: String::new(),
        subagent: format!("ahp-chat:/{}", uuid::Uuid::new_v4()),
        turn_id: turn_id.clone(),
        tool_call_id: call.to_owned(),
        title: description.clone().unwrap_or_else(|| {
            if title.is_empty() {
                "Subagent".to_owned()
            } else {
                title.to_owned()
            }
        }),
        agent_name: text("subagent_type"),
        description,
        prompt: text("prompt").unwrap_or_default(),
    };
    (host.subagent_started(params), turn_id)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::client::{Folders, Terminals};
    use crate::mapping::TurnMap;
    use agent_runner::rpc::{Incoming, Peer};
    use agent_runner::{TurnEnd, TurnWriter};
    use protocol::EmitParams;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;
    use tokio_util::task::TaskTracker;

    /// What the parent was told: `(chat, action kind)` for each emit, `(subagent chat, "started")`.
    type Told = Arc<Mutex<Vec<(String, String)>>>;

    fn capture() -> (SessionHost, Peer, Told) {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let (our_read, our_write) = tokio::io::split(ours);
        let (their_read, their_write) = tokio::io::split(theirs);
        let sender = Peer::start(our_read, our_write);
        let receiver = Peer::start(their_read, their_write);
        let told: Told = Arc::default();
        let into = told.clone();
        let mut incoming = receiver.incoming;
        tokio::spawn(async move {
            let _keep = receiver.peer;
            while let Some(message) = incoming.recv().await {
                let entry = match message {
                    Incoming::Notification { method, params } if method == protocol::methods::worker::EMIT => {
                        serde_json::from_value::<EmitParams>(params).ok().map(|e| {
                            let kind = serde_json::to_value(&e.action)
                                .ok()
                                .and_then(|a| a["type"].as_str().map(str::to_owned));
                            (e.chat, kind.unwrap_or_default())
                        })
                    }
                    Incoming::Notification { method, params }
                        if method == protocol::methods::worker::SUBAGENT_STARTED =>
                    {
                        serde_json::from_value::<SubagentStartedParams>(params)
                            .ok()
                            .map(|p| (p.subagent, "started".to_owned()))
                    }
                    Incoming::Notification { .. } => None,
                    Incoming::Request(request) => {
                        request.responder.ok(Value::Null);
                        None
                    }
                };
                if let (Some(entry), Ok(mut told)) = (entry, into.lock()) {
                    told.push(entry);
                }
            }
        });
        let host = SessionHost::new(sender.peer.clone(), "ahp-session:/s".into(), "ahp-chat:/c".into());
        (host, sender.peer, told)
    }

    fn update(value: Value) -> SessionUpdate {
        serde_json::from_value(value).expect("an update")
    }

    #[tokio::test]
    async fn a_subagents_updates_make_a_turn_of_its_own_that_its_call_ends() {
        let (host, peer, told) = capture();
        let terminals =
            Terminals::new(Arc::new(Folders::new(Vec::new())), TaskTracker::new(), CancellationToken::new());
        let mut turn = TurnMap::new("p", TurnWriter::new(host, "t1"));
        let agent = "toolu_agent";
        let stamp = json!({"claudeCode": {"parentToolUseId": agent}});
        turn.update(&update(json!({"sessionUpdate": "tool_call", "toolCallId": agent, "title": "Task", "kind": "think",
            "status": "in_progress", "rawInput": {"description": "Look", "prompt": "look around", "subagent_type": "general-purpose"}})), &terminals);
        turn.update(
            &update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "mine"},
            "_meta": stamp})),
            &terminals,
        );
        turn.update(
            &update(
                json!({"sessionUpdate": "tool_call", "toolCallId": "toolu_read", "title": "Read", "status": "completed",
            "_meta": {"claudeCode": {"toolName": "Read", "parentToolUseId": agent}}}),
            ),
            &terminals,
        );
        turn.update(
            &update(json!({"sessionUpdate": "tool_call_update", "toolCallId": agent, "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "found"}}]})),
            &terminals,
        );
        // Said after its call ended: dropped, not reopened and not the parent's.
        turn.update(
            &update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "late"},
            "_meta": stamp})),
            &terminals,
        );
        // Naming a call the turn never made: the turn's own.
        turn.update(
            &update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "own"},
            "_meta": {"claudeCode": {"parentToolUseId": "toolu_unknown"}}})),
            &terminals,
        );
        turn.finish(TurnEnd::Complete, None, None);
        let _ = peer.request_value("flush", ()).await;
        let told = told.lock().map(|t| t.clone()).unwrap_or_default();
        let started: Vec<&String> = told.iter().filter(|(_, k)| k == "started").map(|(c, _)| c).collect();
        let [sub] = started[..] else { panic!("one subagent opened: {told:?}") };
        let its: Vec<&str> = told.iter().filter(|(c, k)| c == sub && k != "started").map(|(_, k)| k.as_str()).collect();
        assert_eq!(its.first(), Some(&"chat/responsePart"), "{told:?}");
        assert_eq!(its.last(), Some(&"chat/turnComplete"), "its call's end ended it: {told:?}");
        assert_eq!(its.iter().filter(|k| k.contains("turnComplete")).count(), 1, "{told:?}");
        let parents = told.iter().filter(|(c, _)| c == "ahp-chat:/c").count();
        assert!(
            parents > 0
                && told.iter().rposition(|(c, _)| c == sub) < told.iter().rposition(|(c, _)| c == "ahp-chat:/c")
        );
    }

    #[test]
    fn the_parent_call_is_read_from_the_claude_adapters_meta() {
        let stamped: SessionUpdate = serde_json::from_value(json!({
            "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"},
            "_meta": {"claudeCode": {"parentToolUseId": "toolu_1"}}
        }))
        .expect("update");
        assert_eq!(parent_call(&stamped).as_deref(), Some("toolu_1"));
        let call: SessionUpdate = serde_json::from_value(json!({
            "sessionUpdate": "tool_call", "toolCallId": "toolu_2", "title": "Read",
            "_meta": {"claudeCode": {"toolName": "Read", "parentToolUseId": "toolu_1"}}
        }))
        .expect("update");
        assert_eq!(parent_call(&call).as_deref(), Some("toolu_1"));
        let own: SessionUpdate = serde_json::from_value(json!({
            "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"},
            "_meta": {"claudeCode": {"toolName": "Agent"}}
        }))
        .expect("update");
        assert_eq!(parent_call(&own), None);
    }
}
