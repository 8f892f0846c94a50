//! Changesets: `invokeChangesetOperation` (merge, discard, commit: the person's act of getting
//! work back) and `resourceRead` of the file contents a changeset names. Both are the workspaces
//! feature's to answer; the host checks who may ask and hands them over.

use ahp_types::commands::{InvokeChangesetOperationParams, ResourceReadParams};
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
