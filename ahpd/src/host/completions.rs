//! What a person can type into a chat: the commands behind a slash that a backend reports (its
//! probe's `commands`: Claude's slash commands and skills, pi's, an ACP agent's
//! `available_commands_update`), kept on each session's state as `_meta.commands`, and the
//! `completions` a client asks for while a message is composed: `/` answers those commands, `@`
//! the files in the session's folder.
//!
//! A command is run by sending it as the message (`/compact`); its completion's attachment only
//! marks it, so nothing of it reaches the model beside the text. A file's completion is a
//! `resource` attachment naming the file, read when the message is sent (`attachments.rs`).

use std::path::{Path, PathBuf};

use ahp_types::actions::{SessionMetaChangedAction, StateAction};
use ahp_types::commands::CompletionItem;
use ahp_types::common::JsonObject;
use ahp_types::state::{MessageAttachment, MessageResourceAttachment, SimpleMessageAttachment};
use protocol::SlashCommand;
use serde_json::{json, Value};

use super::Core;

/// The key of the commands on a session's `_meta`.
pub const COMMANDS_KEY: &str = "commands";
/// The key on a command completion's attachment `_meta` that names the command.
pub const COMMAND_META: &str = "ahpd.command";
/// The characters that ask for completions.
pub const TRIGGERS: [&str; 2] = ["/", "@"];

/// The most items one `completions` answers.
const MAX_ITEMS: usize = 50;
/// How much of a folder an `@` walks at most, and how deep: a folder of a million files must not
/// make a keystroke cost a disk scan.
const MAX_WALKED: usize = 5000;
const MAX_DEPTH: usize = 8;
/// Folders an `@` does not look into: version control and dependency caches.
const SKIPPED: [&str; 5] = ["node_modules", "target", "__pycache__", "dist", "build"];

/// What is being completed: the trigger, what follows it up to the cursor, and where the trigger
/// is (UTF-16 units, as AHP counts).
#[derive(Debug, Clone, PartialEq)]
pub struct Typed {
    /// `/` or `@`.
    pub trigger: char,
    /// What follows it.
    pub query: String,
    /// The trigger's offset.
    pub start: i64,
    /// The cursor's offset.
    pub end: i64,
}

/// The word being typed at `offset` (UTF-16 units) when it opens with a trigger: `/` only as the
/// message's first word (a command is a whole message), `@` anywhere.
pub fn typed_at(text: &str, offset: i64) -> Option<Typed> {
    let mut units = 0i64;
    let mut cut = text.len();
    for (at, c) in text.char_indices() {
        if units >= offset {
            cut = at;
            break;
        }
        units += i64::try_from(c.len_utf16()).unwrap_or(1);
    }
    if units < offset {
        return None;
    }
    let before = &text[..cut];
    let word_start =
        before.rfind(char::is_whitespace).map_or(0, |i| i + before[i..].chars().next().map_or(1, char::len_utf8));
    let word = &before[word_start..];
    let trigger = word.chars().next()?;
    if !TRIGGERS.iter().any(|t| t.starts_with(trigger)) {
        return None;
    }
    if trigger == '/' && !before[..word_start].trim().is_empty() {
        return None;
    }
    let start = before[..word_start].encode_utf16().count();
    Some(Typed {
        trigger,
        query: word[trigger.len_utf8()..].to_owned(),
        start: i64::try_from(start).unwrap_or(0),
        end: offset,
    })
}

/// The commands that begin with what was typed (then those that hold it), as completions.
pub fn command_items(commands: &[SlashCommand], typed: &Typed) -> Vec<CompletionItem> {
    let query = typed.query.to_lowercase();
    let mut picked: Vec<&SlashCommand> =
        commands.iter().filter(|c| c.name.to_lowercase().starts_with(&query)).collect();
    picked.extend(
        commands
            .iter()
            .filter(|c| !c.name.to_lowercase().starts_with(&query) && c.name.to_lowercase().contains(&query)),
    );
    picked
        .into_iter()
        .take(MAX_ITEMS)
        .map(|command| {
            let mut meta = JsonObject::new();
            meta.insert(COMMAND_META.into(), Value::String(command.name.clone()));
            if let Some(description) = &command.description {
                meta.insert("description".into(), Value::String(description.clone()));
            }
            CompletionItem {
                insert_text: format!("/{} ", command.name),
                range_start: Some(typed.start),
                range_end: Some(typed.end),
                attachment: MessageAttachment::Simple(SimpleMessageAttachment {
                    label: format!("/{}", command.name),
                    range: None,
                    display_kind: Some("command".into()),
                    meta: Some(meta),
                    model_representation: None,
                }),
            }
        })
        .collect()
}

/// True for a completion's command marker: it reaches the model as the message's text alone.
pub fn is_command_marker(attachment: &SimpleMessageAttachment) -> bool {
    attachment.model_representation.is_none() && attachment.meta.as_ref().is_some_and(|m| m.contains_key(COMMAND_META))
}

/// The files and folders under `root` whose path holds what was typed, as completions: those
/// whose name begins with it first. Blocking: run it off the runtime.
pub fn file_items(root: &Path, typed: &Typed) -> Vec<CompletionItem> {
    let query = typed.query.to_lowercase();
    let mut first = Vec::new();
    let mut rest = Vec::new();
    for (path, is_dir) in walk(root) {
        let Ok(relative) = path.strip_prefix(root) else { continue };
        let shown = relative.display().to_string();
        let lower = shown.to_lowercase();
        let name = relative.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
        let item = || file_item(&path, &shown, is_dir, typed);
        if name.starts_with(&query) {
            first.push(item());
        } else if lower.contains(&query) {
            rest.push(item());
        }
        if first.len() >= MAX_ITEMS {
            break;
        }
    }
    first.extend(rest);
    first.truncate(MAX_ITEMS);
    first
}

fn file_item(path: &Path, shown: &str, is_dir: bool, typed: &Typed) -> CompletionItem {
    let label = if is_dir { format!("{shown}/") } else { shown.to_owned() };
    let size =
        (!is_dir).then(|| std::fs::metadata(path).ok()).flatten().map(|m| i64::try_from(m.len()).unwrap_or(i64::MAX));
    CompletionItem {
        insert_text: format!("@{label} "),
        range_start: Some(typed.start),
        range_end: Some(typed.end),
        attachment: MessageAttachment::Resource(MessageResourceAttachment {
            label,
            range: None,
            display_kind: Some(if is_dir { "directory" } else { "document" }.into()),
            meta: None,
            uri: crate::fileuri::file_uri(path),
            size_hint: size,
            content_type: (!is_dir).then(|| crate::fileuri::type_of_path(path).to_owned()),
            nonce: None,
            selection: None,
        }),
    }
}

/// The entries under `root`, breadth first, hidden and dependency folders left out, bounded.
fn walk(root: &Path) -> Vec<(PathBuf, bool)> {
    let mut found = Vec::new();
    let mut folders = std::collections::VecDeque::from([(root.to_path_buf(), 0usize)]);
    while let Some((folder, depth)) = folders.pop_front() {
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        let mut entries: Vec<(PathBuf, bool)> = entries
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| (e.path(), e.file_type().is_ok_and(|t| t.is_dir())))
            .collect();
        entries.sort();
        for (path, is_dir) in entries {
            if found.len() >= MAX_WALKED {
                return found;
            }
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if is_dir && depth + 1 < MAX_DEPTH && !SKIPPED.contains(&name.as_str()) {
                folders.push_back((path.clone(), depth + 1));
            }
            found.push((path, is_dir));
        }
    }
    found
}

impl Core {
    /// The commands `provider`'s backend reported, as a session's `_meta` shows them.
    pub(super) fn commands_value(&self, provider: &str) -> Value {
        let commands = self.agent(provider).map(|a| a.commands.clone()).unwrap_or_default();
        Value::Array(
            commands
                .iter()
                .map(|c| match &c.description {
                    Some(d) => json!({"name": c.name, "description": d}),
                    None => json!({"name": c.name}),
                })
                .collect(),
        )
    }

    /// A session's `_meta` with its backend's commands in it (for a session being opened or
    /// loaded).
    pub(super) fn with_commands(&self, provider: &str, meta: Option<JsonObject>) -> Option<JsonObject> {
        let commands = self.commands_value(provider);
        if commands.as_array().is_some_and(Vec::is_empty) && meta.as_ref().is_none_or(|m| !m.contains_key(COMMANDS_KEY))
        {
            return meta;
        }
        let mut meta = meta.unwrap_or_default();
        meta.insert(COMMANDS_KEY.to_owned(), commands);
        Some(meta)
    }

    /// Says `provider`'s commands on every loaded session of it whose state shows others.
    pub(super) fn publish_commands(&mut self, provider: &str) {
        let sessions: Vec<String> =
            self.sessions.iter().filter(|(_, m)| m.provider == provider).map(|(uri, _)| uri.clone()).collect();
        for session in sessions {
            let held = self.ch.sessions.get(&session).and_then(|s| s.meta.clone());
            let meta = self.with_commands(provider, held.clone());
            if meta != held {
                let action = StateAction::SessionMetaChanged(SessionMetaChangedAction { meta });
                self.apply(&session, action, None, None);
            }
        }
    }

    /// The commands of the backend `chat` runs.
    pub fn chat_commands(&self, chat: &str) -> Vec<SlashCommand> {
        let Some(meta) = self.chats.get(chat) else { return Vec::new() };
        let provider = match &meta.harness {
            Some(harness) => harness.provider.clone(),
            None => self.sessions.get(&meta.session).map(|s| s.provider.clone()).unwrap_or_default(),
        };
        self.agent(&provider).map(|a| a.commands.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slash_opens_the_message_and_an_at_may_come_anywhere() {
        let typed = typed_at("/comp", 5).expect("a command");
        assert_eq!((typed.trigger, typed.query.as_str(), typed.start, typed.end), ('/', "comp", 0, 5));
        assert!(typed_at("say /comp", 9).is_none(), "a slash inside a message is text");
        let typed = typed_at("look at @src/ma please", 15).expect("a file");
        assert_eq!((typed.trigger, typed.query.as_str(), typed.start), ('@', "src/ma", 8));
        assert!(typed_at("plain words", 5).is_none());
        // UTF-16 units: the emoji counts two.
        let typed = typed_at("😀 @a", 5).expect("after an emoji");
        assert_eq!((typed.start, typed.query.as_str()), (3, "a"));
        assert!(typed_at("short", 99).is_none(), "an offset past the text");
    }

    #[test]
    fn commands_are_matched_by_prefix_first() {
        let commands = vec![
            SlashCommand { name: "review".into(), description: None },
            SlashCommand { name: "compact".into(), description: Some("Compact".into()) },
            SlashCommand { name: "context".into(), description: None },
        ];
        let typed = typed_at("/co", 3).expect("typed");
        let items = command_items(&commands, &typed);
        let names: Vec<&str> = items.iter().map(|i| i.insert_text.as_str()).collect();
        assert_eq!(names, vec!["/compact ", "/context "]);
        let MessageAttachment::Simple(marker) = &items[0].attachment else { panic!("a simple attachment") };
        assert!(is_command_marker(marker));
    }

    #[test]
    fn files_under_the_folder_match_by_name_then_by_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("src/notes")).expect("dirs");
        std::fs::create_dir_all(dir.path().join(".git")).expect("dirs");
        std::fs::write(dir.path().join("src/main.rs"), "fn main() {}").expect("file");
        std::fs::write(dir.path().join("src/notes/mainly.txt"), "x").expect("file");
        std::fs::write(dir.path().join(".git/main"), "x").expect("file");
        let typed = typed_at("@main", 5).expect("typed");
        let items = file_items(dir.path(), &typed);
        let labels: Vec<String> = items
            .iter()
            .map(|i| match &i.attachment {
                MessageAttachment::Resource(r) => r.label.clone(),
                _ => String::new(),
            })
            .collect();
        assert_eq!(labels, vec!["src/main.rs", "src/notes/mainly.txt"], "hidden folders are not looked in");
    }
}
