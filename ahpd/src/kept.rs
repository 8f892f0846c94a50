//! Content a part would carry inline, kept in each session's folder (seed 004's
//! `storeToolResultResource`): an image a tool returned, audio, an embedded resource's bytes. A
//! backend hands it over with `resource/keep` and names it in the part by the `session-db-resource:`
//! URI both sides derive (`protocol::kept_resource_uri`); this keeps the bytes under
//! `<data>/sessions/<session>/resources/<chat>/<call>.<index>`, each file written atomically, at
//! most `toolResultResourceLimitBytes` (`protocol::kept::left_out` decides, for the backend and
//! here alike), reads them back for `resourceRead` byte for byte, lists them for a transcript read
//! back (seed 004's `kept`), and lets them go with their session.
//!
//! A kept file is versioned: one JSON line (`{"v":1,"callId","index","name","contentType"}`), then
//! the bytes as they were. It reaches the host through `host::facade` alone ([`Resources`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ahp_types::commands::{ContentEncoding, ResourceReadResult};
use ahp_types::state::ContentRef;
use base64::Engine;
use protocol::kept::{kept_session_key, parse_kept_resource_uri, KeptKey};
use protocol::{KeepResourceParams, KeptResource};
use serde::{Deserialize, Serialize};

use crate::host::facade::{AhpError, Resources};

/// The version of a kept file's header this writes.
const FORMAT: u32 = 1;

/// What a kept file says of its bytes, on its first line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Header {
    v: u32,
    call_id: String,
    index: u32,
    name: String,
    content_type: String,
}

/// The kept content of every session, in the data folder.
pub struct Kept {
    /// `<data>/sessions`: a folder per session.
    sessions: PathBuf,
    /// `toolResultResourceLimitBytes`.
    limit: u64,
}

impl Kept {
    /// Keeps content under `data_dir`, each of at most `limit` bytes.
    pub fn new(data_dir: &Path, limit: u64) -> Arc<Self> {
        Arc::new(Self { sessions: data_dir.join("sessions"), limit })
    }

    fn session_folder(&self, session_key: &str) -> PathBuf {
        self.sessions.join(session_key)
    }

    fn chat_folder(&self, session_key: &str, chat_key: &str) -> PathBuf {
        self.session_folder(session_key).join("resources").join(chat_key)
    }

    fn file(&self, key: &KeptKey) -> PathBuf {
        self.chat_folder(&key.session, &key.chat).join(format!("{}.{}", key.call, key.index))
    }
}

impl Resources for Kept {
    fn limit_bytes(&self) -> u64 {
        self.limit
    }

    fn keep(&self, session: &str, params: KeepResourceParams) -> Result<String, String> {
        let uri = protocol::kept_resource_uri(session, &params.chat, &params.call_id, params.index);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(params.data.trim())
            .map_err(|e| format!("its bytes are not base64: {e}"))?;
        if let Some(sentence) = protocol::kept::left_out(&params.content_type, bytes.len() as u64, Some(self.limit)) {
            return Err(sentence);
        }
        let key = parse_kept_resource_uri(&uri).ok_or("its reference does not read back")?;
        let header = Header {
            v: FORMAT,
            call_id: params.call_id,
            index: params.index,
            name: params.name,
            content_type: params.content_type,
        };
        let mut file = serde_json::to_vec(&header).map_err(|e| e.to_string())?;
        file.push(b'\n');
        file.extend_from_slice(&bytes);
        crate::fsutil::write_private(&self.file(&key), &file)
            .map_err(|e| format!("{}: {e}", self.file(&key).display()))?;
        Ok(uri)
    }

    fn read(&self, uri: &str, encoding: Option<ContentEncoding>) -> Result<ResourceReadResult, AhpError> {
        let key = parse_kept_resource_uri(uri).ok_or_else(|| not_here(uri))?;
        let (header, bytes) = read_file(&self.file(&key)).ok_or_else(|| not_here(uri))?;
        let utf8 = matches!(encoding, Some(ContentEncoding::Utf8)).then(|| String::from_utf8(bytes.clone()).ok());
        Ok(match utf8.flatten() {
            Some(text) => ResourceReadResult {
                data: text,
                encoding: ContentEncoding::Utf8,
                content_type: Some(header.content_type),
            },
            None => ResourceReadResult {
                data: base64::engine::general_purpose::STANDARD.encode(bytes),
                encoding: ContentEncoding::Base64,
                content_type: Some(header.content_type),
            },
        })
    }

    fn kept_for(&self, session: &str, chat: &str) -> Vec<KeptResource> {
        let session_key = kept_session_key(session);
        let chat_key = kept_session_key(chat);
        let Ok(entries) = std::fs::read_dir(self.chat_folder(&session_key, &chat_key)) else { return Vec::new() };
        let mut kept: Vec<KeptResource> = entries
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .filter_map(|entry| {
                let (header, bytes) = read_file(&entry.path())?;
                let uri = protocol::kept_resource_uri(session, chat, &header.call_id, header.index);
                Some(KeptResource {
                    call_id: header.call_id,
                    index: header.index,
                    content_ref: ContentRef {
                        uri,
                        size_hint: i64::try_from(bytes.len()).ok(),
                        content_type: Some(header.content_type),
                        nonce: None,
                    },
                })
            })
            .collect();
        kept.sort_by(|a, b| (&a.call_id, a.index).cmp(&(&b.call_id, b.index)));
        kept
    }

    fn session_removed(&self, session: &str) {
        let folder = self.session_folder(&kept_session_key(session));
        match std::fs::remove_dir_all(&folder) {
            Ok(()) => tracing::debug!(session, "its kept content went with it"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(session, "could not remove {}: {e}", folder.display()),
        }
    }
}

/// A kept file's header and bytes; `None` when it is missing or not one this reads.
fn read_file(path: &Path) -> Option<(Header, Vec<u8>)> {
    let mut file = std::fs::read(path).ok()?;
    let end = file.iter().position(|b| *b == b'\n')?;
    let header: Header = serde_json::from_slice(&file[..end]).ok().filter(|h: &Header| h.v == FORMAT)?;
    Some((header, file.split_off(end + 1)))
}

fn not_here(uri: &str) -> AhpError {
    AhpError::not_found(format!("ahpd keeps no content at {uri}: it was never kept here, or its session was deleted."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(call: &str, index: u32, data: &[u8]) -> KeepResourceParams {
        KeepResourceParams {
            chat: "ahp-chat:/c1".into(),
            call_id: call.into(),
            index,
            name: "shot.png".into(),
            content_type: "image/png".into(),
            data: base64::engine::general_purpose::STANDARD.encode(data),
        }
    }

    #[test]
    fn kept_content_reads_back_byte_for_byte_and_is_listed_for_its_chat() {
        let dir = tempfile::tempdir().expect("dir");
        let kept = Kept::new(dir.path(), 1024);
        let bytes: Vec<u8> = (0..=255u8).collect();
        let uri = kept.keep("ahp-session:/s1", params("toolu_1", 1, &bytes)).expect("kept");
        assert_eq!(uri, "session-db-resource:/s1/c1/toolu_1/1");
        let read = kept.read(&uri, None).expect("reads");
        assert_eq!(read.encoding, ContentEncoding::Base64);
        assert_eq!(base64::engine::general_purpose::STANDARD.decode(read.data).expect("base64"), bytes);
        assert_eq!(read.content_type.as_deref(), Some("image/png"));
        let listed = kept.kept_for("ahp-session:/s1", "ahp-chat:/c1");
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].call_id.as_str(), listed[0].index), ("toolu_1", 1));
        assert_eq!(listed[0].content_ref.uri, uri);
        assert_eq!(listed[0].content_ref.size_hint, Some(256));
        kept.session_removed("ahp-session:/s1");
        assert!(kept.read(&uri, None).is_err(), "gone with its session");
    }

    #[test]
    fn what_is_over_the_bound_is_not_kept_and_text_reads_as_text() {
        let dir = tempfile::tempdir().expect("dir");
        let kept = Kept::new(dir.path(), 4);
        let refused = kept.keep("ahp-session:/s1", params("c", 0, b"12345")).expect_err("over");
        assert_eq!(refused, "An image of 5 bytes was left out: over toolResultResourceLimitBytes (4 bytes).");
        let uri = kept.keep("ahp-session:/s1", params("c", 0, b"1234")).expect("kept");
        assert_eq!(kept.read(&uri, Some(ContentEncoding::Utf8)).expect("reads").data, "1234");
        let unknown = kept.read("session-db-resource:/s1/c1/other/0", None).expect_err("unknown");
        assert!(unknown.message.contains("ahpd keeps no content at"), "{}", unknown.message);
    }
}
