//! Content a tool result carries inline (an image with no source, audio, an embedded resource's
//! bytes), said as what a client is shown: a reference to what the parent kept (seed 004's
//! `storeToolResultResource`), or a sentence saying it was left out. Live, the content is handed to
//! the parent ([`SessionHost::keep_resource`]); read back from a transcript, it is looked up in what
//! the parent kept for the conversation ([`KeptLookup`], seed 004's `kept`), so a part read back
//! names the bytes by the reference it named them by live.

use ahp_types::state::{ContentRef, ToolResultContent, ToolResultResourceContent, ToolResultTextContent};
use protocol::KeptResource;

use crate::host::SessionHost;

/// Who keeps inline content for a call's parts.
pub trait Keeper {
    /// Keeps `data_base64` (the `index`th content of call `call_id`, of `content_type`, named
    /// `name`): `Ok` with the reference a part names it by, or `Err` with the sentence saying why
    /// it was left out.
    fn keep(
        &self,
        call_id: &str,
        index: u32,
        name: &str,
        content_type: &str,
        data_base64: &str,
    ) -> Result<ContentRef, String>;

    /// The same, as the content a tool result shows: the reference, or the sentence as text.
    fn content(
        &self,
        call_id: &str,
        index: u32,
        name: &str,
        content_type: &str,
        data_base64: &str,
    ) -> ToolResultContent {
        shown(self.keep(call_id, index, name, content_type, data_base64))
    }
}

/// A kept content as a tool result shows it: the reference, or the sentence as text.
pub fn shown(kept: Result<ContentRef, String>) -> ToolResultContent {
    match kept {
        Ok(r) => ToolResultContent::Resource(ToolResultResourceContent {
            uri: r.uri,
            size_hint: r.size_hint,
            content_type: r.content_type,
            nonce: r.nonce,
        }),
        Err(sentence) => ToolResultContent::Text(ToolResultTextContent { text: sentence }),
    }
}

/// A name for the `index`th content of a call of `tool`: `screenshot-1.png`.
pub fn content_name(tool: &str, index: u32, content_type: &str) -> String {
    let subtype = content_type.split(['/', ';', '+']).nth(1).unwrap_or("bin").trim();
    let extension = if subtype.is_empty() { "bin" } else { subtype };
    let tool: String = tool.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    format!("{tool}-{index}.{extension}")
}

impl Keeper for SessionHost {
    fn keep(
        &self,
        call_id: &str,
        index: u32,
        name: &str,
        content_type: &str,
        data_base64: &str,
    ) -> Result<ContentRef, String> {
        self.keep_resource(call_id, index, name, content_type, data_base64)
    }
}

/// What the parent kept for one conversation, handed to `agent/transcript`.
pub struct KeptLookup<'a>(pub &'a [KeptResource]);

impl Keeper for KeptLookup<'_> {
    fn keep(&self, call_id: &str, index: u32, _: &str, content_type: &str, _: &str) -> Result<ContentRef, String> {
        self.0
            .iter()
            .find(|k| k.call_id == call_id && k.index == index)
            .map(|k| k.content_ref.clone())
            .ok_or_else(|| protocol::kept::not_kept(content_type))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transcript_names_what_was_kept_by_its_reference_and_leaves_the_rest_out() {
        let content_ref = ContentRef {
            uri: "session-db-resource:/s/c/toolu_1/1".into(),
            size_hint: Some(68),
            content_type: Some("image/png".into()),
            nonce: None,
        };
        let kept = [KeptResource { call_id: "toolu_1".into(), index: 1, content_ref: content_ref.clone() }];
        let lookup = KeptLookup(&kept);
        assert_eq!(lookup.keep("toolu_1", 1, "", "image/png", "iVBO"), Ok(content_ref));
        assert_eq!(
            lookup.keep("toolu_1", 0, "", "image/png", "iVBO"),
            Err("An image was left out: ahpd kept no copy of it.".to_owned())
        );
    }

    #[test]
    fn a_content_is_named_for_its_tool_and_type() {
        assert_eq!(content_name("mcp__probe__screenshot", 1, "image/png"), "mcp__probe__screenshot-1.png");
        assert_eq!(content_name("Read", 0, "image/svg+xml"), "Read-0.svg");
        assert_eq!(content_name("x", 2, "application/octet-stream"), "x-2.octet-stream");
    }
}
