//! A message's attachments as a backend gives them to its model. The host read them already
//! (`SendMessageParams::attachments`); a backend puts each in the form its runtime takes (an image
//! block, a document) where it can, and says the rest as text with its label and where it is
//! from ([`as_text`]), so nothing attached is left out without a word. [`refuse_untaken`] is the
//! worker's own check that it was handed nothing it cannot give its model.

use protocol::{Attachment, AttachmentSupport};

use crate::AgentError;

/// Where an attachment is from, as a person reads it: its URI, and for a selection its lines
/// (counted from 1).
pub fn location(attachment: &Attachment) -> Option<String> {
    let lines = attachment.selection.as_ref().map(|s| {
        let (first, last) = (s.start.line + 1, s.end.line + 1);
        if first == last {
            format!("line {first}")
        } else {
            format!("lines {first}-{last}")
        }
    });
    match (&attachment.uri, lines) {
        (Some(uri), Some(lines)) => Some(format!("{uri}, {lines}")),
        (Some(uri), None) => Some(uri.clone()),
        (None, lines) => lines,
    }
}

/// An attachment as text for the model: its label and location, then its content. Content that
/// is not text is described, not shown (a backend hands that as a block of its own, or the host
/// refused it before it came this far).
pub fn as_text(attachment: &Attachment) -> String {
    let mut head = format!("<attachment label=\"{}\"", attachment.label.replace('"', "'"));
    if let Some(at) = location(attachment) {
        head.push_str(&format!(" location=\"{}\"", at.replace('"', "'")));
    }
    if let Some(kind) = &attachment.display_kind {
        head.push_str(&format!(" kind=\"{kind}\""));
    }
    head.push('>');
    let body = match (&attachment.text, &attachment.data) {
        (Some(text), _) => text.clone(),
        (None, Some(data)) => {
            format!("({}, about {} bytes, not shown as text)", attachment.content_type, data.len() / 4 * 3)
        }
        (None, None) => String::new(),
    };
    format!("{head}\n{body}\n</attachment>")
}

/// True for an attachment whose content is bytes rather than text.
pub fn is_binary(attachment: &Attachment) -> bool {
    attachment.text.is_none() && attachment.data.is_some()
}

/// Refuses a message carrying content this backend cannot give its model (the host checks the
/// same before it hands anything over; this is the backend's own word on it).
pub fn refuse_untaken(
    provider: &str,
    support: &AttachmentSupport,
    attachments: &[Attachment],
) -> Result<(), AgentError> {
    match attachments.iter().find(|a| is_binary(a) && !support.takes(&a.content_type)) {
        Some(a) => Err(AgentError::Refused(format!(
            "The {provider} agent cannot take {} attachments ({}); it takes text{}",
            a.content_type,
            a.label,
            taken_list(support)
        ))),
        None => Ok(()),
    }
}

/// ` and image/png, image/jpeg` — the types besides text a backend takes, for a refusal.
pub fn taken_list(support: &AttachmentSupport) -> String {
    if support.types.is_empty() {
        " alone".to_owned()
    } else {
        format!(" and {}", support.types.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::{TextPosition, TextRange};

    fn text(label: &str, uri: Option<&str>, body: &str) -> Attachment {
        Attachment {
            label: label.into(),
            uri: uri.map(str::to_owned),
            selection: None,
            display_kind: None,
            content_type: "text/plain".into(),
            text: Some(body.into()),
            data: None,
        }
    }

    #[test]
    fn text_carries_its_label_and_location() {
        let mut a = text("main.rs", Some("file:///w/main.rs"), "fn main() {}");
        a.selection = Some(TextRange {
            start: TextPosition { line: 2, character: 0 },
            end: TextPosition { line: 4, character: 3 },
        });
        assert_eq!(
            as_text(&a),
            "<attachment label=\"main.rs\" location=\"file:///w/main.rs, lines 3-5\">\nfn main() {}\n</attachment>"
        );
        assert_eq!(as_text(&text("note", None, "hi")), "<attachment label=\"note\">\nhi\n</attachment>");
    }

    #[test]
    fn bytes_a_backend_does_not_take_are_refused_in_words() {
        let mut png = text("shot.png", None, "");
        png.text = None;
        png.data = Some("AAAA".into());
        png.content_type = "image/png".into();
        let none = AttachmentSupport::default();
        let refused = refuse_untaken("pi", &none, &[png.clone()]).expect_err("refused");
        assert_eq!(
            refused.to_string(),
            "The pi agent cannot take image/png attachments (shot.png); it takes text alone"
        );
        let images = AttachmentSupport { types: vec!["image/*".into()], max_bytes: None };
        assert!(refuse_untaken("pi", &images, &[png]).is_ok());
    }
}
