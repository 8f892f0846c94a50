//! Changesets: `invokeChangesetOperation` (merge, discard, commit: the person's act of getting
//! work back) and `resourceRead` of the file contents a changeset names. Both are the workspaces
//! feature's to answer; the host checks who may ask and hands them over. `resourceRead` of a
//! `session-db-resource:` URI (content a part names, kept by `facade::Resources`) is answered for
//! the session the URI is kept for alone.

use ahp_types::commands::{InvokeChangesetOperationParams, ResourceReadParams, ResourceReadResult};
use serde_json::Value;

use super::{to_value, Reply};
use crate::host::core::{channel_kind, ChannelKind};
use crate::host::errors::AhpError;
use crate::host::requests::ConnState;
use crate::host::Host;

impl Host {
    pub(super) fn invoke_changeset_operation(
        &self,
        conn: &mut ConnState,
        reply: Reply,
        params: InvokeChangesetOperationParams,
    ) {
        if channel_kind(&params.channel) != Some(ChannelKind::Changeset) {
            let e = AhpError::invalid_params(format!(
                "Invalid invokeChangesetOperation params: channel must be a changeset (ahp-changeset:/…), not {}",
                params.channel
            ));
            return reply.send(self, Err(e));
        }
        let sender = conn.principal.as_sender();
        let host = self.clone();
        self.spawn("a changeset operation", async move {
            let workspaces = host.lock().workspaces.clone();
            let result = workspaces.invoke(&host, params, sender).await.and_then(|r| to_value(&r));
            reply.send(&host, result);
        });
    }

    pub(super) fn resource_read(&self, _conn: &mut ConnState, reply: Reply, params: ResourceReadParams) {
        if protocol::kept::parse_kept_resource_uri(&params.uri).is_some() {
            let read = self.read_kept(&params);
            return reply.send(self, read.and_then(|r| to_value(&r)));
        }
        let host = self.clone();
        self.spawn("read a changeset's file", async move {
            let workspaces = host.lock().workspaces.clone();
            let result = match workspaces.read(&host, &params.uri) {
                Some(read) => read.await.and_then(|r| to_value(&r)),
                None => Err(AhpError::not_found(format!(
                    "This host reads only the file contents its changesets name, not {}",
                    params.uri
                ))),
            };
            reply.send(&host, result.map(|v: Value| v));
        });
    }
}

impl Host {
    /// Content a part names, read back for a client watching its session: the channel the read
    /// names (the session, one of its chats, or the root) must be the session the content was kept
    /// for, which must exist here.
    fn read_kept(&self, params: &ResourceReadParams) -> Result<ResourceReadResult, AhpError> {
        let uri = &params.uri;
        let Some(feature) = self.lock().resources.clone() else {
            return Err(AhpError::not_found(format!("This host keeps no content, so it has none at {uri}")));
        };
        let key = protocol::kept::parse_kept_resource_uri(uri).map(|k| k.session).unwrap_or_default();
        let session = {
            let mut core = self.lock();
            let named = match channel_kind(&params.channel) {
                Some(ChannelKind::Root) => None,
                Some(ChannelKind::Session) => Some(params.channel.clone()),
                Some(ChannelKind::Chat) if self.ensure_loaded(&mut core, &params.channel) => {
                    core.chat(&params.channel).map(|m| m.session.clone())
                }
                Some(ChannelKind::Chat) => {
                    return Err(AhpError::not_found(format!("There is no chat {}", params.channel)))
                }
                _ => {
                    return Err(AhpError::invalid_params(format!(
                        "resourceRead of {uri} names its session, one of its chats or the root as its channel, not {}",
                        params.channel
                    )))
                }
            };
            let session = named.unwrap_or_else(|| format!("ahp-session:/{}", percent_decoded(&key)));
            if !self.ensure_loaded(&mut core, &session) {
                return Err(AhpError::session_not_found(&session));
            }
            session
        };
        if protocol::kept::kept_session_key(&session) != key {
            return Err(AhpError::permission_denied(format!(
                "{uri} was kept for another session, not {session}; read it through its own session."
            )));
        }
        feature.read(uri, params.encoding)
    }
}

/// `%XX` written back as the byte it stands for.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
