//! Content a part would carry inline, kept by the parent (seed 004's `storeToolResultResource`):
//! the `session-db-resource:` URI it is kept under, which worker and parent both derive from the
//! same four facts, and the one rule that says what is left out and the sentence saying so.
//!
//! The worker names the reference in the part at once, as it names a kept terminal output
//! ([`crate::terminal_output_uri`]): `resource/keep` is a notification the parent handles before
//! the action that names it, so a part never waits for an answer and never races its turn's end.

use ahp_types::state::ContentRef;
use serde::{Deserialize, Serialize};

/// The scheme a kept content's URI has, as VS Code's host names what its session database holds.
pub const KEPT_SCHEME: &str = "session-db-resource";

/// The default of `toolResultResourceLimitBytes`: the largest content the parent keeps.
pub const DEFAULT_KEPT_LIMIT_BYTES: u64 = 8 * 1024 * 1024;

/// One content the parent kept for a conversation, as `agent/transcript` hands it over (seed
/// 004's `kept`): a transcript read back names the bytes by the reference they had live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptResource {
    /// The tool call's id (or the message part's own).
    pub call_id: String,
    /// The content's place among the call's contents.
    pub index: u32,
    /// The reference it was kept under.
    pub content_ref: ContentRef,
}

/// Where kept content lives, read back from its URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptKey {
    /// The session's id, as written in the URI (encoded).
    pub session: String,
    /// The chat's id, as written (encoded).
    pub chat: String,
    /// The call's id, as written (encoded).
    pub call: String,
    /// The content's place among the contents.
    pub index: u32,
}

/// The URI content kept for call `call_id` of `chat` in `session`, at `index`, is read back by:
/// `session-db-resource:/<session id>/<chat id>/<call id>/<index>`, each id with anything but
/// letters, digits, `-` and `_` written `%XX` (so no part is ever `.`, `..` or holds a `/`).
pub fn kept_resource_uri(session: &str, chat: &str, call_id: &str, index: u32) -> String {
    let id = |uri: &str| encode(uri.rsplit_once(":/").map_or(uri, |(_, id)| id.trim_start_matches('/')));
    format!("{KEPT_SCHEME}:/{}/{}/{}/{index}", id(session), id(chat), encode(call_id))
}

/// The parts of a kept content's URI; `None` for any other URI, or one not written as
/// [`kept_resource_uri`] writes them.
pub fn parse_kept_resource_uri(uri: &str) -> Option<KeptKey> {
    let rest = uri.strip_prefix(KEPT_SCHEME)?.strip_prefix(":/")?;
    let mut parts = rest.split('/');
    let (session, chat, call, index) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || [session, chat, call].iter().any(|p| p.is_empty() || !is_encoded(p)) {
        return None;
    }
    let index = index.parse().ok().filter(|i: &u32| i.to_string() == index)?;
    Some(KeptKey { session: session.to_owned(), chat: chat.to_owned(), call: call.to_owned(), index })
}

/// The session id a session URI names, written as a kept content's URI writes it.
pub fn kept_session_key(session: &str) -> String {
    encode(session.rsplit_once(":/").map_or(session, |(_, id)| id.trim_start_matches('/')))
}

fn encode(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn is_encoded(part: &str) -> bool {
    part.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'%'))
}

/// Why content is left out of a part rather than kept: over the parent's bound, or in a session
/// whose parent keeps no folder (`limit` absent). `None`: it is kept. The one place that decides,
/// for the worker that names the part and the parent that writes the bytes alike.
pub fn left_out(content_type: &str, bytes: u64, limit: Option<u64>) -> Option<String> {
    let what = content_word(content_type);
    match limit {
        None => Some(format!("{what} was left out: this session keeps no content.")),
        Some(limit) if bytes > limit => Some(format!(
            "{what} of {} was left out: over toolResultResourceLimitBytes ({}).",
            size_words(bytes),
            size_words(limit)
        )),
        Some(_) => None,
    }
}

/// The sentence for content the parent kept nowhere, read back from a transcript.
pub fn not_kept(content_type: &str) -> String {
    format!("{} was left out: ahpd kept no copy of it.", content_word(content_type))
}

/// "An image", "An audio clip", "A resource": what a sentence about it begins with.
fn content_word(content_type: &str) -> &'static str {
    let family = content_type.split('/').next().unwrap_or("").trim().to_ascii_lowercase();
    match family.as_str() {
        "image" => "An image",
        "audio" => "An audio clip",
        "video" => "A video",
        _ => "A resource",
    }
}

/// A size as a person reads it: `8 MiB`, `9.1 MiB`, `12 KiB`, `300 bytes`.
pub fn size_words(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    let scaled = |unit: u64, name: &str| {
        if bytes.is_multiple_of(unit) {
            format!("{} {name}", bytes / unit)
        } else {
            format!("{:.1} {name}", bytes as f64 / unit as f64)
        }
    };
    if bytes >= MIB {
        scaled(MIB, "MiB")
    } else if bytes >= KIB {
        scaled(KIB, "KiB")
    } else {
        format!("{bytes} bytes")
    }
}

/// The number of bytes base64 text decodes to (padding counted off), without decoding it.
pub fn base64_decoded_len(data: &str) -> u64 {
    // Every four significant characters are three bytes; a shorter tail of n is n - 1 bytes.
    let significant = data.bytes().filter(|b| !b.is_ascii_whitespace() && *b != b'=').count() as u64;
    significant * 3 / 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_content_is_named_by_session_chat_call_and_place() {
        let uri = kept_resource_uri("ahp-session:/s1", "ahp-chat:/c1", "toolu_01", 2);
        assert_eq!(uri, "session-db-resource:/s1/c1/toolu_01/2");
        let key = parse_kept_resource_uri(&uri).expect("parses");
        assert_eq!(
            (key.session.as_str(), key.chat.as_str(), key.call.as_str(), key.index),
            ("s1", "c1", "toolu_01", 2)
        );
        let odd = kept_resource_uri("ahp-session:/s1", "ahp-chat:/c1", "../a b", 0);
        assert_eq!(odd, "session-db-resource:/s1/c1/%2E%2E%2Fa%20b/0");
        assert!(parse_kept_resource_uri(&odd).is_some());
    }

    #[test]
    fn anything_else_is_not_a_kept_content() {
        for uri in [
            "session-db-resource:/s1/c1/..//0",
            "session-db-resource:/s1/c1/../0",
            "session-db-resource:/s1/c1/x/01",
            "session-db-resource:/s1/c1/x",
            "session-db-resource:/s1/c1/x/0/y",
            "file:///etc/passwd",
        ] {
            assert_eq!(parse_kept_resource_uri(uri), None, "{uri}");
        }
    }

    #[test]
    fn what_is_over_the_bound_is_left_out_with_a_sentence() {
        let limit = Some(DEFAULT_KEPT_LIMIT_BYTES);
        assert_eq!(left_out("image/png", 1000, limit), None);
        assert_eq!(left_out("image/png", DEFAULT_KEPT_LIMIT_BYTES, limit), None);
        let over = (9.1 * 1024.0 * 1024.0) as u64;
        assert_eq!(
            left_out("image/png", over, limit).as_deref(),
            Some("An image of 9.1 MiB was left out: over toolResultResourceLimitBytes (8 MiB).")
        );
        assert_eq!(
            left_out("application/pdf", 10, None).as_deref(),
            Some("A resource was left out: this session keeps no content.")
        );
    }

    #[test]
    fn base64_length_is_counted_without_decoding() {
        for (text, bytes) in [("", 0), ("YQ==", 1), ("YWI=", 2), ("YWJj", 3), ("YWJjZA==", 4), ("YWJjZA", 4)] {
            assert_eq!(base64_decoded_len(text), bytes, "{text}");
        }
    }
}
