//! `ahpd watch [SESSION]`: follows live activity until interrupted. Across sessions, one line per
//! thing that happened (a session added or removed, a message, a reply, a failure, something that
//! waits for a person); for one session, its replies stream as they are written. When the daemon
//! goes away (`ahpd restart`, a crash) it says so, waits for one to be back and watches again.

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::time::Duration;

use ahp::SubscriptionEvent;
use ahp_types::state::ResponsePart;
use serde_json::Value;

use super::follow::{fields, session_uri, text, End, Folded, Printer};
use super::remote::{self as client, Connection, Target};
use super::say;
use crate::cli::WatchArgs;

/// The longest wait between two looks for a daemon that went away.
const LOOK_AT_MOST_EVERY: Duration = Duration::from_secs(2);

/// The connection closed: the daemon went away.
struct Gone;

/// Runs `ahpd watch`. The first connection must succeed; after that a daemon that goes away is
/// waited for.
pub async fn run(args: &WatchArgs) -> ExitCode {
    client::run(&args.client, |first| async move {
        let mut target = first;
        let mut conn = client::connect(&target).await?;
        loop {
            let Gone = match &args.session {
                Some(session) => one(conn, &session_uri(session)).await?,
                None => all(conn, &target).await?,
            };
            eprintln!("The daemon at {} went away; watching again once it is back (Ctrl-C stops).", target.url);
            (target, conn) = back(args).await;
        }
    })
    .await
}

/// Waits until a daemon answers again (where the record says it now listens, or at `--url`),
/// looking more rarely as the wait goes on.
async fn back(args: &WatchArgs) -> (Target, Connection) {
    let mut pause = Duration::from_millis(100);
    loop {
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LOOK_AT_MOST_EVERY);
        let Ok(paths) = crate::paths::Paths::platform() else { continue };
        let Ok(target) = client::target(&args.client, &paths).await else { continue };
        if let Ok(conn) = client::connect(&target).await {
            return (target, conn);
        }
    }
}

/// One session: each message and its reply as it streams.
async fn one(mut conn: Connection, session: &str) -> Result<Gone, String> {
    let mut folded = Folded::default();
    let chat = conn.default_chat(&mut folded, session).await?;
    conn.watch(&mut folded, &chat).await?;
    eprintln!("Watching {session} (Ctrl-C stops).");
    let mut printer = Printer::default();
    loop {
        let Ok((channel, event)) = conn.next().await else { return Ok(Gone) };
        let SubscriptionEvent::Action(env) = event else { continue };
        if !folded.fold(&env) || channel != chat {
            continue;
        }
        let a = fields(&env.action);
        match a["type"].as_str().unwrap_or_default() {
            "chat/turnStarted" => say(&format!("▸ {}", a["message"]["text"].as_str().unwrap_or_default())),
            "chat/toolCallReady" if a.get("confirmed").is_none() => {
                printer.note(&format!("? needs you: {}", text(&a["confirmationTitle"])));
            }
            "chat/inputRequested" => printer.note(&format!("? needs you: {}", text(&a["request"]["message"]))),
            _ => match printer.take(&a) {
                Some(End::Failed(why)) => say(&format!("✗ failed: {why}")),
                Some(End::Cancelled) => say("✗ cancelled"),
                _ => {}
            },
        }
    }
}

/// Every session: one line per event.
async fn all(mut conn: Connection, target: &Target) -> Result<Gone, String> {
    let mut titles: HashMap<String, String> = HashMap::new();
    let mut chat_of: HashMap<String, String> = HashMap::new();
    let mut folded = Folded::default();
    let mut followed: HashSet<String> = HashSet::new();
    for item in conn.sessions().await? {
        let uri = item["resource"].as_str().unwrap_or_default().to_owned();
        titles.insert(uri.clone(), title(&item));
        if let Some(chat) = item["defaultChat"].as_str() {
            chat_of.insert(chat.to_owned(), uri.clone());
            if busy(&item) {
                follow(&conn, &mut folded, &mut followed, chat).await;
            }
        }
    }
    eprintln!("Watching {} ({} sessions; Ctrl-C stops).", target.url, titles.len());
    loop {
        let Ok((channel, event)) = conn.next().await else { return Ok(Gone) };
        match event {
            SubscriptionEvent::SessionAdded(added) => {
                let summary = serde_json::to_value(&added.summary).unwrap_or(Value::Null);
                let uri = added.summary.resource.clone();
                titles.insert(uri.clone(), title(&summary));
                if let Some(chat) = summary["defaultChat"].as_str() {
                    chat_of.insert(chat.to_owned(), uri.clone());
                    follow(&conn, &mut folded, &mut followed, chat).await;
                }
                line(&format!("+ {} ({}, {uri})", title(&summary), added.summary.provider));
            }
            SubscriptionEvent::SessionRemoved(removed) => {
                let name = titles.remove(&removed.session).unwrap_or_else(|| removed.session.clone());
                line(&format!("- {name} removed"));
            }
            SubscriptionEvent::SessionSummaryChanged(changed) => {
                let changes = serde_json::to_value(&changed.changes).unwrap_or(Value::Null);
                if let Some(new) = changes["title"].as_str() {
                    titles.insert(changed.session.clone(), new.to_owned());
                }
                let chat = chat_of.iter().find(|(_, s)| **s == changed.session).map(|(c, _)| c.clone());
                if let (true, Some(chat)) = (busy(&changes), chat) {
                    if follow(&conn, &mut folded, &mut followed, &chat).await {
                        // Followed late: the message that started the turn is in the snapshot.
                        if let Some(turn) = folded.chats.get(&chat).and_then(|c| c.active_turn.as_ref()) {
                            let name = titles.get(&changed.session).cloned().unwrap_or_default();
                            line(&format!("{name}  ▸ {}", first_line(&turn.message.text)));
                        }
                    }
                }
            }
            SubscriptionEvent::Action(env) => {
                if !folded.fold(&env) || !followed.contains(&channel) {
                    continue;
                }
                let name =
                    chat_of.get(&channel).and_then(|s| titles.get(s)).cloned().unwrap_or_else(|| channel.clone());
                if let Some(said) = describe(&fields(&env.action), &folded, &channel) {
                    line(&format!("{name}  {said}"));
                }
            }
            _ => {}
        }
    }
}

/// Starts folding a chat (once); answers whether it started now.
async fn follow(conn: &Connection, folded: &mut Folded, followed: &mut HashSet<String>, chat: &str) -> bool {
    if !followed.insert(chat.to_owned()) {
        return false;
    }
    match conn.watch(folded, chat).await {
        Ok(()) => true,
        Err(why) => {
            eprintln!("{why}");
            false
        }
    }
}

/// What a person wants to hear about an action, if anything.
fn describe(a: &Value, folded: &Folded, chat: &str) -> Option<String> {
    match a["type"].as_str()? {
        "chat/turnStarted" => Some(format!("▸ {}", first_line(a["message"]["text"].as_str().unwrap_or_default()))),
        "chat/turnComplete" => {
            let reply = folded
                .chats
                .get(chat)
                .and_then(|c| c.turns.last())
                .map(|t| {
                    t.response_parts
                        .iter()
                        .filter_map(|p| match p {
                            ResponsePart::Markdown(m) => Some(m.content.as_str()),
                            _ => None,
                        })
                        .collect::<String>()
                })
                .unwrap_or_default();
            Some(format!("◂ {}", first_line(&reply)))
        }
        "chat/turnCancelled" => Some("✗ cancelled".into()),
        "chat/error" => Some(format!("✗ failed: {}", a["part"]["error"]["message"].as_str().unwrap_or("?"))),
        "chat/toolCallReady" if a.get("confirmed").is_none() => {
            Some(format!("? needs you: {}", text(&a["confirmationTitle"])))
        }
        "chat/inputRequested" => Some(format!("? needs you: {}", text(&a["request"]["message"]))),
        _ => None,
    }
}

fn busy(summary: &Value) -> bool {
    summary["status"].as_u64().is_some_and(|s| s & 8 != 0)
}

fn title(summary: &Value) -> String {
    summary["title"].as_str().filter(|t| !t.is_empty()).unwrap_or("New session").to_owned()
}

/// The first line, at most 120 characters.
fn first_line(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or_default();
    let mut short: String = line.chars().take(120).collect();
    if short.len() < line.len() || text.trim().lines().nth(1).is_some() {
        short.push('…');
    }
    short
}

/// A line with the time of day.
fn line(what: &str) {
    let now = jiff::Zoned::now().strftime("%H:%M:%S").to_string();
    say(&format!("{now}  {what}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_shown_by_its_first_line() {
        assert_eq!(first_line("hello"), "hello");
        assert_eq!(first_line("hello\nworld"), "hello…");
        assert_eq!(first_line(&"x".repeat(200)).chars().count(), 121);
    }
}
