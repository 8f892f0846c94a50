//! The links the session tools answer and take: `agent-host-session://<provider>/<id>` for a session
//! (and its default chat), with `?chat=<id>` for any other chat — VS Code's open-session link,
//! rearranged from this host's `ahp-session:/<id>` and `ahp-chat:/<id>`.

use crate::host::facade::uri_id;

/// The scheme of an open link.
pub const SCHEME: &str = "agent-host-session";

/// The link that opens a session (and names its default chat).
pub fn session_link(provider: &str, session: &str) -> String {
    format!("{SCHEME}://{provider}/{}", encode(uri_id(session)))
}

/// The link that names a chat: the session's own link for its default chat.
pub fn chat_link(provider: &str, session: &str, chat: &str, default_chat: Option<&str>) -> String {
    if default_chat == Some(chat) {
        return session_link(provider, session);
    }
    format!("{}?chat={}", session_link(provider, session), encode(uri_id(chat)))
}

/// What a tool's `session` (or `chat`) argument names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The session channel.
    pub session: String,
    /// The chat channel the link named, when it named one.
    pub chat: Option<String>,
}

/// Reads a session URI (`ahp-session:/<id>`), a chat URI (`ahp-chat:/<id>`, whose session the
/// caller looks up), or an open link. `None` for anything else.
pub fn parse(input: &str) -> Option<Target> {
    let input = input.trim();
    if let Some(id) = input.strip_prefix("ahp-session:/") {
        return (!id.is_empty() && !id.contains('/')).then(|| Target { session: input.to_owned(), chat: None });
    }
    if let Some(id) = input.strip_prefix("ahp-chat:/") {
        return (!id.is_empty() && !id.contains('/'))
            .then(|| Target { session: String::new(), chat: Some(input.to_owned()) });
    }
    let rest = input.strip_prefix(SCHEME)?.strip_prefix("://")?;
    let rest = rest.split('#').next().unwrap_or(rest);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (provider, id) = path.split_once('/')?;
    let id = decode(id.trim_end_matches('/'))?;
    if provider.is_empty() || id.is_empty() || id.contains('/') {
        return None;
    }
    let chat = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("chat="))
        .and_then(decode)
        .filter(|c| !c.is_empty() && c != "default")
        .map(|c| format!("ahp-chat:/{c}"));
    Some(Target { session: format!("ahp-session:/{id}"), chat })
}

fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_round_trip() {
        let link = session_link("notes", "ahp-session:/abc-1");
        assert_eq!(link, "agent-host-session://notes/abc-1");
        assert_eq!(parse(&link), Some(Target { session: "ahp-session:/abc-1".into(), chat: None }));
        let chat = chat_link("notes", "ahp-session:/abc-1", "ahp-chat:/c 2", Some("ahp-chat:/abc-1"));
        assert_eq!(chat, "agent-host-session://notes/abc-1?chat=c%202");
        assert_eq!(
            parse(&chat),
            Some(Target { session: "ahp-session:/abc-1".into(), chat: Some("ahp-chat:/c 2".into()) })
        );
        assert_eq!(chat_link("notes", "ahp-session:/abc-1", "ahp-chat:/abc-1", Some("ahp-chat:/abc-1")), link);
    }

    #[test]
    fn uris_and_nonsense() {
        assert_eq!(parse("ahp-session:/x"), Some(Target { session: "ahp-session:/x".into(), chat: None }));
        assert_eq!(parse("ahp-chat:/y").and_then(|t| t.chat), Some("ahp-chat:/y".into()));
        assert_eq!(parse("agent-host-session://notes/x?chat=default").and_then(|t| t.chat), None);
        assert_eq!(parse("https://example.com/x"), None);
        assert_eq!(parse("agent-host-session://notes/"), None);
        assert_eq!(parse("ahp-session:/"), None);
    }
}
