//! `ahpd send [--agent A | --session S] [--yes | --no] TEXT`: sends a message and streams the reply
//! to stdout. A new session on agent A, or the session S; with neither, a new session on the
//! daemon's first agent. A confirmation is asked on the terminal, or answered by `--yes`/`--no`;
//! with no terminal and neither flag it is denied. Exit 0 when the turn completes, 1 when it
//! fails, is cancelled, or never starts.

use std::io::IsTerminal;
use std::process::ExitCode;

use ahp::SubscriptionEvent;
use ahp_types::state::SnapshotState;
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::{json, Value};

use super::follow::{action, fields, session_uri, text, End, Folded, Printer};
use super::remote::{self as client, Connection, Target};
use crate::cli::SendArgs;
use crate::host::facade::was_queued_behind;

/// Runs `ahpd send`.
pub async fn run(args: &SendArgs) -> ExitCode {
    let message = args.text.join(" ");
    if message.trim().is_empty() {
        return super::fail(super::EXIT_USAGE, "Nothing to send: give the message as the last argument.");
    }
    client::run(&args.client, |target| send(target, args, message)).await
}

async fn send(target: Target, args: &SendArgs, message: String) -> Result<ExitCode, String> {
    let mut conn = client::connect(&target).await?;
    let mut folded = Folded::default();
    let session = match (&args.session, &args.agent) {
        (Some(session), _) => session_uri(session),
        (None, agent) => {
            let provider = match agent {
                Some(agent) => agent.clone(),
                None => first_agent(&conn)?,
            };
            let session = format!("ahp-session:/{}", uuid::Uuid::new_v4());
            conn.request("createSession", json!({ "channel": session, "provider": provider })).await?;
            eprintln!("New session on {provider}: {session}");
            session
        }
    };
    let chat = conn.default_chat(&mut folded, &session).await?;
    conn.watch(&mut folded, &chat).await?;
    let answers = Answers { yes: args.yes, no: args.no, terminal: std::io::stdin().is_terminal() };
    let end = Turn::start(&conn, &folded, &chat, &message).await?.follow(&mut conn, &mut folded, &answers).await?;
    Ok(match end {
        End::Complete => ExitCode::SUCCESS,
        End::Cancelled => super::fail(super::EXIT_CONFLICT, "The turn was cancelled."),
        End::Failed(why) => super::fail(super::EXIT_CONFLICT, &format!("The turn failed: {why}")),
    })
}

fn first_agent(conn: &Connection) -> Result<String, String> {
    let root = conn.init.snapshots.iter().find(|s| s.resource == ROOT_RESOURCE_URI).map(|s| &s.state);
    match root {
        Some(SnapshotState::Root(root)) => {
            root.agents.first().map(|a| a.provider.clone()).ok_or_else(|| "The daemon runs no agent.".to_owned())
        }
        _ => Err("The daemon sent no root state.".into()),
    }
}

/// How waiting tool calls and questions are answered.
struct Answers {
    yes: bool,
    no: bool,
    terminal: bool,
}

/// Our turn: started at once, or queued behind the one running.
struct Turn {
    chat: String,
    /// Its id, once known.
    id: Option<String>,
    /// The queued message that becomes it.
    queued: Option<String>,
    /// The client sequence number of what we dispatched.
    seq: i64,
}

impl Turn {
    async fn start(conn: &Connection, folded: &Folded, chat: &str, message: &str) -> Result<Self, String> {
        let busy = folded.chats.get(chat).is_some_and(|c| c.active_turn.is_some());
        let user = json!({ "text": message, "origin": { "kind": "user" } });
        let (id, queued, a) = if busy {
            let queued = uuid::Uuid::new_v4().to_string();
            eprintln!("A turn is running in {chat}; the message waits in its queue.");
            let a = json!({ "type": "chat/pendingMessageSet", "kind": "queued", "id": queued, "message": user });
            (None, Some(queued), a)
        } else {
            let id = uuid::Uuid::new_v4().to_string();
            let now = format!("{:.3}", jiff::Timestamp::now());
            let a = json!({ "type": "chat/turnStarted", "turnId": id, "startedAt": now, "message": user });
            (Some(id), None, a)
        };
        let handle =
            conn.client.dispatch(chat.to_owned(), action(a)?).await.map_err(|e| format!("could not send: {e}"))?;
        Ok(Self { chat: chat.to_owned(), id, queued, seq: handle.client_seq })
    }

    async fn follow(mut self, conn: &mut Connection, folded: &mut Folded, answers: &Answers) -> Result<End, String> {
        let mut printer = Printer::default();
        loop {
            let (channel, event) = conn.next().await?;
            let SubscriptionEvent::Action(env) = event else { continue };
            let ours = env.origin.as_ref().is_some_and(|o| o.client_id == conn.client_id && o.client_seq == self.seq);
            if let (true, Some(why)) = (ours, &env.rejection_reason) {
                // A turn the daemon started as the last one ended: ours waits in the queue under
                // the id we gave it, and becomes the turn that queued message starts.
                if let Some(id) = self.id.take_if(|id| was_queued_behind(why, id)) {
                    eprintln!("A turn the daemon started is running in {}; the message waits in its queue.", self.chat);
                    self.queued = Some(id);
                    continue;
                }
                return Err(format!("The daemon refused the message: {why}"));
            }
            if !folded.fold(&env) || channel != self.chat {
                continue;
            }
            let a = fields(&env.action);
            if a["type"] == "chat/turnStarted"
                && self.queued.is_some()
                && a["queuedMessageId"].as_str() == self.queued.as_deref()
            {
                self.id = a["turnId"].as_str().map(str::to_owned);
            }
            let Some(id) = self.id.clone() else { continue };
            if a.get("turnId").and_then(Value::as_str).is_some_and(|t| t != id) {
                continue;
            }
            if a["type"] == "chat/inputRequested" {
                self.answer_question(conn, &id, &a["request"], answers, &mut printer).await?;
                continue;
            }
            if a["type"] == "chat/toolCallReady" && a.get("confirmed").is_none() {
                self.confirm(conn, &id, &a, answers, &mut printer).await?;
                continue;
            }
            if let Some(end) = printer.take(&a) {
                return Ok(end);
            }
        }
    }

    async fn confirm(
        &self,
        conn: &Connection,
        turn: &str,
        a: &Value,
        answers: &Answers,
        printer: &mut Printer,
    ) -> Result<(), String> {
        let title = Some(text(&a["confirmationTitle"]))
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| format!("Allow {}?", text(&a["invocationMessage"])));
        let approved = if answers.yes {
            printer.note(&format!("? {title} — allowed (--yes)"));
            true
        } else if answers.no {
            printer.note(&format!("? {title} — denied (--no)"));
            false
        } else if answers.terminal {
            printer.note(&format!("? {title}"));
            if let Some(input) = a["toolInput"].as_str() {
                eprintln!("  {input}");
            }
            matches!(ask("  Allow? [y/N] ").await.trim().to_lowercase().as_str(), "y" | "yes")
        } else {
            printer.note(&format!("? {title} — denied: no terminal to ask on (pass --yes or --no)"));
            false
        };
        let option = a["options"].as_array().and_then(|options| {
            let kind = if approved { "approve" } else { "deny" };
            options.iter().find(|o| o["kind"] == kind).and_then(|o| o["id"].as_str()).map(str::to_owned)
        });
        let mut confirmed = json!({
            "type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": a["toolCallId"], "approved": approved,
        });
        if approved {
            confirmed["confirmed"] = json!("user-action");
        }
        if let Some(option) = option {
            confirmed["selectedOptionId"] = json!(option);
        }
        conn.client
            .dispatch(self.chat.clone(), action(confirmed)?)
            .await
            .map_err(|e| format!("could not answer: {e}"))?;
        Ok(())
    }

    async fn answer_question(
        &self,
        conn: &Connection,
        _turn: &str,
        request: &Value,
        answers: &Answers,
        printer: &mut Printer,
    ) -> Result<(), String> {
        let message = text(&request["message"]);
        let questions = request["questions"].as_array().cloned().unwrap_or_default();
        let completed = if answers.terminal && !answers.no {
            printer.note(&format!("? {message}"));
            let mut given = serde_json::Map::new();
            for q in &questions {
                let label =
                    [text(&q["title"]), text(&q["message"])].into_iter().find(|t| !t.is_empty()).unwrap_or_default();
                let prompt = format!("  {label} ");
                let line = ask(&prompt).await.trim().to_owned();
                let value = match q["kind"].as_str() {
                    Some("boolean") => {
                        json!({ "kind": "boolean", "value": matches!(line.to_lowercase().as_str(), "y" | "yes" | "true") })
                    }
                    Some("number" | "integer") => {
                        json!({ "kind": "number", "value": line.parse::<f64>().unwrap_or(0.0) })
                    }
                    Some("single-select") => json!({ "kind": "selected", "value": line }),
                    Some("multi-select") => {
                        json!({ "kind": "selected-many", "value": line.split(',').map(str::trim).collect::<Vec<_>>() })
                    }
                    _ => json!({ "kind": "text", "value": line }),
                };
                if let Some(id) = q["id"].as_str() {
                    given.insert(id.to_owned(), json!({ "state": "submitted", "value": value }));
                }
            }
            json!({ "type": "chat/inputCompleted", "requestId": request["id"], "response": "accept", "answers": given })
        } else {
            printer.note(&format!("? {message} — declined: no terminal to answer on"));
            json!({ "type": "chat/inputCompleted", "requestId": request["id"], "response": "decline" })
        };
        conn.client
            .dispatch(self.chat.clone(), action(completed)?)
            .await
            .map_err(|e| format!("could not answer: {e}"))?;
        Ok(())
    }
}

/// Asks on the terminal; answers the line typed (empty at end of input).
async fn ask(prompt: &str) -> String {
    eprint!("{prompt}");
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        line
    })
    .await
    .unwrap_or_default()
}
