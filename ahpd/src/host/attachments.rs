//! A message's attachments (AHP's `Message.attachments`), from what a client sent to what the
//! chat's backend is handed (`SendMessageParams.attachments`, `docs/workers.md`).
//!
//! Two steps. When a client's message arrives (a turn, a queued or steering message), [`check`]
//! refuses, in the action's `rejectionReason`, what cannot reach the model: an attachment over the
//! limit, content of a type the backend does not take (its `attachments` support, from its
//! handshake or its probe), a file in the session's folder that is not there, a simple attachment
//! that says nothing for the model. The chat is left as it was. When the turn is handed over,
//! [`Host::read_attachments`] reads each one: inline content decoded, a `file:` resource inside
//! the session's folder from the disk, any other resource through the client (`resourceRead`), a
//! session's annotations and another chat's transcript from the host's own state; a selection is
//! cut to its lines. What fails then (a client that does not answer, a file that grew past the
//! limit) ends the turn in error with the reason, never a silent drop.
//!
//! A command completion's marker (`completions.rs`) reaches the model as the message's text alone.

use std::path::{Path, PathBuf};

use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    Message, MessageAttachment, MessageChatAttachment, MessageResourceAttachment, ResponsePart, TextRange,
};
use base64::Engine;
use protocol::{Attachment, AttachmentSupport};

use super::completions::is_command_marker;
use super::requests::{ClientRequestError, CLIENT_REQUEST_TIMEOUT};
use super::{Core, Host};
use crate::fileuri::{path_of_file_uri, place, Placed};

/// The most entries of a folder attached as a listing.
const MAX_LISTED: usize = 500;

/// What a chat's backend takes, and where its files are.
#[derive(Debug, Clone)]
pub struct Rules {
    /// The backend's provider id.
    pub provider: String,
    /// What it takes beside text.
    pub support: AttachmentSupport,
    /// The largest attachment, in bytes.
    pub limit: u64,
    /// The session's folder.
    pub folder: Option<PathBuf>,
}

impl Rules {
    /// Refuses an attachment of `size` bytes over the limit, naming the limit.
    pub fn fits(&self, label: &str, size: u64) -> Result<(), String> {
        if size <= self.limit {
            return Ok(());
        }
        let whose = if self.support.max_bytes.is_some_and(|m| m <= self.limit) {
            format!("the {} agent's own limit", self.provider)
        } else {
            "attachmentLimitBytes".to_owned()
        };
        Err(format!(
            "Attachment \"{label}\" is {size} bytes; the largest attachment the {} agent is handed is {} bytes ({whose})",
            self.provider, self.limit
        ))
    }

    /// Refuses content of a type the backend does not take (text it always takes).
    pub fn takes(&self, label: &str, content_type: &str) -> Result<(), String> {
        if is_textual(content_type) || self.support.takes(content_type) {
            return Ok(());
        }
        Err(format!(
            "The {} agent cannot take {content_type} attachments (\"{label}\"); it takes text{}",
            self.provider,
            agent_runner::attachments::taken_list(&self.support)
        ))
    }
}

impl Core {
    /// A message's attachments must be able to reach `chat`'s model: refused up front otherwise.
    pub(super) fn check_attachments(&self, chat: &str, message: &ahp_types::state::Message) -> Result<(), String> {
        if message.attachments.as_ref().is_none_or(Vec::is_empty) {
            return Ok(());
        }
        let rules = self.attachment_rules(chat).ok_or("no such chat")?;
        check(&rules, message)
    }

    /// What `chat`'s backend takes, and where its session's files are.
    pub fn attachment_rules(&self, chat: &str) -> Option<Rules> {
        let meta = self.chats.get(chat)?;
        let session = self.sessions.get(&meta.session)?;
        let provider = meta.harness.as_ref().map_or(&session.provider, |h| &h.provider).clone();
        let agent = self.agent(&provider);
        let support = agent
            .and_then(|a| a.attachments.clone())
            .or_else(|| agent.and_then(|a| a.descriptor.as_ref()).and_then(|d| d.features.attachments.clone()))
            .unwrap_or_default();
        let limit = support.max_bytes.map_or(self.attachment_limit, |own| own.min(self.attachment_limit));
        Some(Rules { provider, support, limit, folder: session.working_directory.clone() })
    }
}

/// Refuses what in `message`'s attachments cannot reach the model (see the module docs). Asks the
/// disk only for the size of a file in the session's folder.
pub fn check(rules: &Rules, message: &Message) -> Result<(), String> {
    message.attachments.iter().flatten().try_for_each(|a| check_one(rules, a))
}

fn check_one(rules: &Rules, attachment: &MessageAttachment) -> Result<(), String> {
    match attachment {
        MessageAttachment::Simple(simple) => {
            if simple.model_representation.is_some() || is_command_marker(simple) {
                Ok(())
            } else {
                Err(format!(
                    "Attachment \"{}\" says nothing for the model: a client's simple attachment needs a modelRepresentation",
                    simple.label
                ))
            }
        }
        MessageAttachment::EmbeddedResource(embedded) => {
            rules.fits(&embedded.label, decoded_len(&embedded.data))?;
            if is_generic(&embedded.content_type) {
                // Bytes of no declared kind: text when they read as text.
                let bytes = decode(&embedded.label, &embedded.data)?;
                if looks_like_text(&bytes) {
                    return Ok(());
                }
            }
            rules.takes(&embedded.label, &embedded.content_type)
        }
        MessageAttachment::Resource(resource) => check_resource(rules, resource),
        MessageAttachment::Annotations(_) | MessageAttachment::Chat(_) => Ok(()),
        MessageAttachment::Unknown(raw) => Err(match raw.get("type").and_then(|t| t.as_str()) {
            Some(kind @ ("simple" | "embeddedResource" | "resource" | "annotations" | "chat")) => {
                format!("A {kind} attachment is missing a required field, or one has the wrong type")
            }
            Some(kind) => format!("This host cannot hand an attachment of kind {kind} to an agent"),
            None => "An attachment needs a \"type\"".to_owned(),
        }),
    }
}

fn check_resource(rules: &Rules, resource: &MessageResourceAttachment) -> Result<(), String> {
    let label = &resource.label;
    if let Some(size) = resource.size_hint {
        rules.fits(label, u64::try_from(size).unwrap_or(0))?;
    }
    if let (Some(path), Some(folder)) = (path_of_file_uri(&resource.uri), &rules.folder) {
        match place(&path, std::slice::from_ref(folder)) {
            Placed::Inside(real) => {
                let meta = std::fs::metadata(&real).map_err(|e| format!("Could not read {}: {e}", resource.uri))?;
                if meta.is_dir() {
                    return Ok(());
                }
                rules.fits(label, meta.len())?;
                let kind = resource.content_type.as_deref().unwrap_or_else(|| crate::fileuri::type_of_path(&real));
                return if is_generic(kind) { Ok(()) } else { rules.takes(label, kind) };
            }
            Placed::Missing => return Err(format!("There is no file at {} (attachment \"{label}\")", resource.uri)),
            // Not this session's: the client that named it reads it.
            Placed::Outside => {}
        }
    }
    match resource.content_type.as_deref() {
        Some(kind) if !is_generic(kind) => rules.takes(label, kind),
        _ => Ok(()),
    }
}

/// True for a type whose content is text.
pub fn is_textual(content_type: &str) -> bool {
    let kind = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    kind.starts_with("text/")
        || kind.ends_with("+json")
        || kind.ends_with("+xml")
        || matches!(
            kind.as_str(),
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-sh"
                | "application/yaml"
                | "application/toml"
                | "application/x-yaml"
        )
}

/// True for a type that says nothing of what the bytes are.
fn is_generic(content_type: &str) -> bool {
    let kind = content_type.split(';').next().unwrap_or("").trim();
    kind.is_empty() || kind.eq_ignore_ascii_case("application/octet-stream")
}

/// Valid UTF-8 with no zero byte.
fn looks_like_text(bytes: &[u8]) -> bool {
    !bytes.contains(&0) && std::str::from_utf8(bytes).is_ok()
}

/// How many bytes base64 `data` decodes to.
fn decoded_len(data: &str) -> u64 {
    let data = data.trim_end();
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    u64::try_from(data.len() / 4 * 3 + (data.len() % 4).saturating_sub(1))
        .unwrap_or(u64::MAX)
        .saturating_sub(u64::try_from(padding).unwrap_or(0))
}

fn decode(label: &str, data: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| format!("Attachment \"{label}\" is not valid base64: {e}"))
}

/// Content read for an attachment: text, or bytes of a type.
enum Content {
    Text(String),
    Bytes(Vec<u8>, String),
}

/// What `bytes` declared as `declared` are: text for a textual type, and for bytes of no kind that
/// read as text.
fn classify(bytes: Vec<u8>, declared: &str) -> Content {
    if is_textual(declared) {
        return Content::Text(
            String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        );
    }
    if is_generic(declared) && looks_like_text(&bytes) {
        return Content::Text(String::from_utf8(bytes).unwrap_or_default());
    }
    let kind = if declared.trim().is_empty() { "application/octet-stream" } else { declared };
    Content::Bytes(bytes, kind.to_owned())
}

/// The part of `text` a selection covers: from its start character on its first line to its end
/// character on its last (its whole lines when that leaves nothing).
pub fn cut(text: &str, range: &TextRange) -> String {
    let at = |n: i64| usize::try_from(n.max(0)).unwrap_or(0);
    let lines: Vec<&str> = text.lines().collect();
    let first = at(range.start.line);
    if first >= lines.len() {
        return String::new();
    }
    let last = at(range.end.line).clamp(first, lines.len() - 1);
    let (from, to) = (at(range.start.character), at(range.end.character));
    let span: String = if first == last {
        lines[first].chars().skip(from).take(to.saturating_sub(from)).collect()
    } else {
        let mut parts = vec![lines[first].chars().skip(from).collect::<String>()];
        parts.extend(lines[first + 1..last].iter().map(|l| (*l).to_owned()));
        parts.push(lines[last].chars().take(to).collect());
        parts.join("\n")
    };
    if span.trim().is_empty() {
        lines[first..=last].join("\n")
    } else {
        span
    }
}

/// An attachment of `content`, with what the client said of it.
fn resolved(
    label: &str,
    uri: Option<String>,
    display_kind: Option<String>,
    selection: Option<&TextRange>,
    content: Content,
) -> Attachment {
    let (content_type, text, data) = match content {
        Content::Text(text) => {
            let text = match selection {
                Some(range) => cut(&text, range),
                None => text,
            };
            ("text/plain".to_owned(), Some(text), None)
        }
        Content::Bytes(bytes, kind) => (kind, None, Some(base64::engine::general_purpose::STANDARD.encode(bytes))),
    };
    Attachment { label: label.to_owned(), uri, selection: selection.cloned(), display_kind, content_type, text, data }
}

impl Host {
    /// Reads `message`'s attachments for `chat`'s backend (see the module docs); `client` is the
    /// one that sent it, asked for a resource no other connected client publishes.
    pub async fn read_attachments(
        &self,
        chat: &str,
        message: &Message,
        client: Option<&str>,
    ) -> Result<Vec<Attachment>, String> {
        let Some(list) = message.attachments.as_ref().filter(|l| !l.is_empty()) else { return Ok(Vec::new()) };
        let rules = self.lock().attachment_rules(chat).ok_or_else(|| format!("There is no chat {chat}"))?;
        let mut read = Vec::new();
        for attachment in list {
            if let Some(one) = self.read_one(&rules, chat, attachment, client).await? {
                read.push(one);
            }
        }
        Ok(read)
    }

    async fn read_one(
        &self,
        rules: &Rules,
        chat: &str,
        attachment: &MessageAttachment,
        client: Option<&str>,
    ) -> Result<Option<Attachment>, String> {
        Ok(Some(match attachment {
            MessageAttachment::Simple(simple) => match &simple.model_representation {
                Some(text) => {
                    resolved(&simple.label, None, simple.display_kind.clone(), None, Content::Text(text.clone()))
                }
                None if is_command_marker(simple) => return Ok(None),
                None => return Err(check_one(rules, attachment).err().unwrap_or_default()),
            },
            MessageAttachment::EmbeddedResource(embedded) => {
                let bytes = decode(&embedded.label, &embedded.data)?;
                rules.fits(&embedded.label, u64::try_from(bytes.len()).unwrap_or(u64::MAX))?;
                let content = classify(bytes, &embedded.content_type);
                if let Content::Bytes(_, kind) = &content {
                    rules.takes(&embedded.label, kind)?;
                }
                let selection = embedded.selection.as_ref().map(|s| &s.range);
                resolved(&embedded.label, None, embedded.display_kind.clone(), selection, content)
            }
            MessageAttachment::Resource(resource) => {
                let content = self.read_resource(rules, chat, resource, client).await?;
                if let Content::Bytes(_, kind) = &content {
                    rules.takes(&resource.label, kind)?;
                }
                let selection = resource.selection.as_ref().map(|s| &s.range);
                let kind = resource.display_kind.clone();
                resolved(&resource.label, Some(resource.uri.clone()), kind, selection, content)
            }
            MessageAttachment::Annotations(annotations) => {
                let text = self.annotations_text(&annotations.resource, annotations.annotation_ids.as_deref());
                let kind = annotations.display_kind.clone();
                resolved(&annotations.label, Some(annotations.resource.clone()), kind, None, Content::Text(text))
            }
            MessageAttachment::Chat(other) => {
                let text = self.transcript_text(other)?;
                let kind = other.display_kind.clone();
                resolved(&other.label, Some(other.resource.clone()), kind, None, Content::Text(text))
            }
            MessageAttachment::Unknown(_) => return Err(check_one(rules, attachment).err().unwrap_or_default()),
        }))
    }

    /// A resource's content: from the session's folder, else through a client.
    async fn read_resource(
        &self,
        rules: &Rules,
        chat: &str,
        resource: &MessageResourceAttachment,
        client: Option<&str>,
    ) -> Result<Content, String> {
        let (uri, label) = (&resource.uri, &resource.label);
        if let (Some(path), Some(folder)) = (path_of_file_uri(uri), rules.folder.clone()) {
            let placed = tokio::task::spawn_blocking(move || place(&path, &[folder])).await.unwrap_or(Placed::Outside);
            match placed {
                Placed::Inside(real) => return read_file(rules, resource, &real).await,
                Placed::Missing => return Err(format!("There is no file at {uri} (attachment \"{label}\")")),
                Placed::Outside => {}
            }
        }
        let asked = self.resource_readers(chat, uri, client);
        let Some(reader) = asked.first() else {
            return Err(format!(
                "Attachment \"{label}\" names {uri}, which is not in this session's folder, and no connected client can read it"
            ));
        };
        let read = self.read_client_resource(reader, uri).await.map_err(|e| match e {
            ClientRequestError::NotConnected => format!("{reader} is no longer connected, so {uri} could not be read"),
            ClientRequestError::Refused(why) => format!("{reader} could not read {uri}: {why}"),
            ClientRequestError::Disconnected => format!("{reader} disconnected before answering for {uri}"),
            ClientRequestError::TimedOut => {
                format!("{reader} did not answer for {uri} within {} s", CLIENT_REQUEST_TIMEOUT.as_secs())
            }
            ClientRequestError::Undecodable(why) => {
                format!("{reader} answered {uri} with base64 that does not decode: {why}")
            }
        })?;
        rules.fits(label, u64::try_from(read.len()).unwrap_or(u64::MAX))?;
        let declared = resource.content_type.clone().or(read.content_type).unwrap_or_default();
        Ok(match read.text {
            Some(text) if is_generic(&declared) || is_textual(&declared) => Content::Text(text),
            Some(text) => classify(text.into_bytes(), &declared),
            None => classify(read.bytes, &declared),
        })
    }

    /// The clients that may read `uri`, best first: the one its authority names
    /// (`<scheme>://<clientId>/…`), the message's sender, then the session's other active clients;
    /// only connected ones.
    fn resource_readers(&self, chat: &str, uri: &str, sender: Option<&str>) -> Vec<String> {
        let core = self.lock();
        let authority = uri
            .split_once("://")
            .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or("").to_owned())
            .filter(|a| !a.is_empty());
        let active: Vec<String> = core
            .chats
            .get(chat)
            .and_then(|m| core.ch.sessions.get(&m.session))
            .map(|s| s.active_clients.iter().map(|c| c.client_id.clone()).collect())
            .unwrap_or_default();
        let mut readers: Vec<String> = Vec::new();
        for candidate in authority.into_iter().chain(sender.map(str::to_owned)).chain(active) {
            if !readers.contains(&candidate) && !core.ch.conns_of_client(&candidate, 0).is_empty() {
                readers.push(candidate);
            }
        }
        readers
    }

    /// A session's annotations (all, or those named) as text: each anchor, then its entries.
    fn annotations_text(&self, channel: &str, ids: Option<&[String]>) -> String {
        let mut core = self.lock();
        self.ensure_loaded(&mut core, channel);
        let Some(state) = core.ch.annotations.get(channel) else { return String::new() };
        let mut out = Vec::new();
        for annotation in state.annotations.iter().filter(|a| ids.is_none_or(|ids| ids.contains(&a.id))) {
            let lines = annotation
                .range
                .as_ref()
                .map(|r| format!(", lines {}-{}", r.start.line + 1, r.end.line + 1))
                .unwrap_or_default();
            let resolved = if annotation.resolved { " (resolved)" } else { "" };
            out.push(format!("{}{lines}{resolved}:", annotation.resource));
            for entry in &annotation.entries {
                let text = match &entry.text {
                    StringOrMarkdown::Plain(s) => s.clone(),
                    StringOrMarkdown::Markdown { markdown } => markdown.clone(),
                };
                out.push(format!("- {text}"));
            }
        }
        out.join("\n")
    }

    /// Another chat's transcript, from its first turn through `endTurn` (its latest completed turn
    /// when absent), as text; attachments inside it are not expanded.
    fn transcript_text(&self, other: &MessageChatAttachment) -> Result<String, String> {
        let mut core = self.lock();
        if !self.ensure_loaded(&mut core, &other.resource) {
            return Err(format!(
                "Attachment \"{}\" names {}, which is no chat of this host",
                other.label, other.resource
            ));
        }
        let Some(state) = core.ch.chats.get(&other.resource) else { return Ok(String::new()) };
        let end = match &other.end_turn {
            Some(id) => state.turns.iter().position(|t| &t.id == id).ok_or_else(|| {
                format!("Attachment \"{}\" ends at turn {id}, which {} does not hold", other.label, other.resource)
            })?,
            None => match state.turns.iter().rposition(|t| t.state == ahp_types::state::TurnState::Complete) {
                Some(last) => last,
                None => return Ok(String::new()),
            },
        };
        let mut out = Vec::new();
        for turn in &state.turns[..=end] {
            out.push(format!("User: {}", turn.message.text));
            let said: String = turn
                .response_parts
                .iter()
                .filter_map(|p| match p {
                    ResponsePart::Markdown(m) => Some(m.content.as_str()),
                    _ => None,
                })
                .collect();
            if !said.is_empty() {
                out.push(format!("Assistant: {said}"));
            }
        }
        Ok(out.join("\n\n"))
    }
}

/// A file in the session's folder (a folder: its listing), bounded by the limit.
async fn read_file(rules: &Rules, resource: &MessageResourceAttachment, real: &Path) -> Result<Content, String> {
    let (uri, label) = (&resource.uri, &resource.label);
    let meta = tokio::fs::metadata(real).await.map_err(|e| format!("Could not read {uri}: {e}"))?;
    if meta.is_dir() {
        let mut entries = tokio::fs::read_dir(real).await.map_err(|e| format!("Could not list {uri}: {e}"))?;
        let mut names = Vec::new();
        while let Ok(Some(entry)) = entries.next_entry().await {
            if names.len() >= MAX_LISTED {
                names.push("…".to_owned());
                break;
            }
            let is_dir = entry.file_type().await.is_ok_and(|t| t.is_dir());
            let name = entry.file_name().to_string_lossy().into_owned();
            names.push(if is_dir { format!("{name}/") } else { name });
        }
        names.sort();
        return Ok(Content::Text(names.join("\n")));
    }
    rules.fits(label, meta.len())?;
    let bytes = tokio::fs::read(real).await.map_err(|e| format!("Could not read {uri}: {e}"))?;
    rules.fits(label, u64::try_from(bytes.len()).unwrap_or(u64::MAX))?;
    let declared = resource.content_type.as_deref().unwrap_or_else(|| crate::fileuri::type_of_path(real));
    Ok(classify(bytes, declared))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::{MessageEmbeddedResourceAttachment, MessageOrigin, SimpleMessageAttachment, TextPosition};

    fn rules(types: &[&str], limit: u64, folder: Option<PathBuf>) -> Rules {
        Rules {
            provider: "pi".into(),
            support: AttachmentSupport { types: types.iter().map(|t| (*t).to_owned()).collect(), max_bytes: None },
            limit,
            folder,
        }
    }

    fn message(attachments: Vec<MessageAttachment>) -> Message {
        Message {
            text: "look".into(),
            origin: MessageOrigin { kind: ahp_types::state::MessageKind::User },
            attachments: Some(attachments),
            model: None,
            agent: None,
            meta: None,
        }
    }

    fn embedded(label: &str, kind: &str, bytes: &[u8]) -> MessageAttachment {
        MessageAttachment::EmbeddedResource(MessageEmbeddedResourceAttachment {
            label: label.into(),
            range: None,
            display_kind: None,
            meta: None,
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
            content_type: kind.into(),
            selection: None,
        })
    }

    #[test]
    fn too_large_and_untaken_types_are_refused_naming_why() {
        let rules = rules(&["image/*"], 10, None);
        let big = check(&rules, &message(vec![embedded("big.txt", "text/plain", &[b'a'; 11])])).expect_err("too big");
        assert_eq!(
            big,
            "Attachment \"big.txt\" is 11 bytes; the largest attachment the pi agent is handed is 10 bytes (attachmentLimitBytes)"
        );
        let pdf = check(&rules, &message(vec![embedded("a.pdf", "application/pdf", b"%PDF")])).expect_err("a pdf");
        assert_eq!(pdf, "The pi agent cannot take application/pdf attachments (\"a.pdf\"); it takes text and image/*");
        assert!(check(&rules, &message(vec![embedded("a.png", "image/png", b"\x89PNG")])).is_ok());
        assert!(check(&rules, &message(vec![embedded("notes", "application/octet-stream", b"plain")])).is_ok());
        let silent = MessageAttachment::Simple(SimpleMessageAttachment {
            label: "x".into(),
            range: None,
            display_kind: None,
            meta: None,
            model_representation: None,
        });
        assert!(check(&rules, &message(vec![silent])).is_err());
    }

    #[test]
    fn a_file_in_the_folder_is_checked_on_the_disk() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("a.txt"), "0123456789abc").expect("file");
        let rules = rules(&[], 10, Some(dir.path().to_path_buf()));
        let resource = |name: &str| {
            MessageAttachment::Resource(MessageResourceAttachment {
                label: name.into(),
                range: None,
                display_kind: None,
                meta: None,
                uri: format!("file://{}", dir.path().join(name).display()),
                size_hint: None,
                content_type: None,
                nonce: None,
                selection: None,
            })
        };
        assert!(check(&rules, &message(vec![resource("a.txt")])).expect_err("too big").contains("13 bytes"));
        assert!(check(&rules, &message(vec![resource("gone.txt")]))
            .expect_err("missing")
            .starts_with("There is no file"));
    }

    #[test]
    fn base64_sizes_are_counted_without_decoding() {
        for n in 0..20usize {
            let data = base64::engine::general_purpose::STANDARD.encode(vec![7u8; n]);
            assert_eq!(decoded_len(&data), n as u64, "{n} bytes");
        }
    }

    #[test]
    fn a_selection_is_cut_to_its_lines() {
        let text = "one\ntwo three\nfour\nfive";
        let range = |sl, sc, el, ec| TextRange {
            start: TextPosition { line: sl, character: sc },
            end: TextPosition { line: el, character: ec },
        };
        assert_eq!(cut(text, &range(1, 4, 2, 4)), "three\nfour");
        assert_eq!(cut(text, &range(1, 0, 1, 3)), "two");
        assert_eq!(cut(text, &range(1, 0, 1, 0)), "two three", "an empty selection is its line");
        assert_eq!(cut(text, &range(9, 0, 9, 1)), "");
    }
}
