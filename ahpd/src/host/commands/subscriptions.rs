//! Watching channels: `subscribe` answers a channel's snapshot (reading a session an agent keeps
//! back first, when this host never held it) and `unsubscribe` stops its actions.

use ahp_types::commands::SubscribeParams;
use ahp_types::state::{Snapshot, SnapshotState};
use serde_json::Value;

use super::{to_value, Reply};
use crate::host::core::{channel_kind, ChannelKind, ConnId};
use crate::host::errors::AhpError;
use crate::host::limits::over_limit;
use crate::host::requests::ConnState;
use crate::host::{Core, Host};

impl Host {
    pub(super) fn subscribe(&self, conn: &mut ConnState, reply: Reply, params: SubscribeParams) {
        let uri = params.channel;
        let Some(kind) = channel_kind(&uri) else {
            let e = AhpError::invalid_params(format!(
                "{uri} is not a channel this host serves (root, ahp-session:/, ahp-chat:/, annotations, ahp-changeset:/, ahp-terminal:/, ahp-automations://, ahp-automation-run:/)"
            ));
            return reply.send(self, Err(e));
        };
        let known = {
            let mut core = self.lock();
            self.ensure_loaded(&mut core, &uri)
        };
        let watch = Watch {
            client_id: conn.client_id.clone(),
            uri,
            kind,
            view_turns: params.view.and_then(|v| v.turns),
            max_subscriptions: conn.limits.max_subscriptions,
            computed: None,
        };
        if !known {
            if let Some(remotes) = self.remote_for(&watch.uri) {
                // Another host runs it: mirrored here first, then answered from the mirror.
                let host = self.clone();
                self.spawn("open a remote host's channel", async move {
                    match remotes.open(&host, &watch.uri).await {
                        Ok(()) => host.finish_subscribe(reply, watch),
                        Err(e) => reply.send(&host, Err(e)),
                    }
                });
                return;
            }
        }
        if !known && kind == ChannelKind::Changeset {
            // Computed when first watched (git runs outside the lock), then kept up to date.
            let host = self.clone();
            self.spawn("compute a changeset", async move {
                let workspaces = host.lock().workspaces.clone();
                match workspaces.open_changeset(&host, &watch.uri).await {
                    Ok(state) => host.finish_subscribe(reply, Watch { computed: Some(state), ..watch }),
                    Err(e) => reply.send(&host, Err(e)),
                }
            });
            return;
        }
        if !known && matches!(kind, ChannelKind::Session | ChannelKind::Chat) && self.has_catalogue() {
            // Perhaps a session an agent keeps and this host never held: read it back first.
            let host = self.clone();
            self.spawn("open an agent's own session", async move {
                host.import_foreign(&watch.uri).await;
                host.finish_subscribe(reply, watch);
            });
            return;
        }
        self.finish_subscribe(reply, watch);
    }

    /// Answers a subscribe with the channel's snapshot (trimmed to the turns asked for), unless
    /// the connection already watches as many others as it may.
    fn finish_subscribe(&self, reply: Reply, watch: Watch) {
        let Watch { client_id, uri, kind, view_turns, max_subscriptions, computed } = watch;
        let conn_id = reply.conn();
        let mut core = self.lock();
        self.ensure_loaded(&mut core, &uri);
        if let Some(state) = computed {
            // Unless somebody else's subscribe put it there first.
            if !core.ch.changesets.contains_key(&uri) {
                core.ch.changesets.insert(uri.clone(), state);
                core.ch.mark_loaded(&uri);
            }
        }
        let principal = core.ch.conn(conn_id).map_or(crate::users::Principal::Nobody, |c| c.principal.clone());
        let Some(mut snapshot) = core.snapshot_for(&principal, &uri) else {
            drop(core);
            return reply.send(self, Err(AhpError::not_found(format!("There is no channel {uri}"))));
        };
        if let Err(e) = check_room_for(&core, conn_id, max_subscriptions, &uri) {
            drop(core);
            return reply.send(self, Err(e));
        }
        if kind == ChannelKind::Chat {
            if let Some(n) = view_turns {
                limit_turns(&mut snapshot, n);
            }
        }
        core.ch.subscribe(conn_id, &uri);
        if let Some(client_id) = &client_id {
            self.client_returned(&mut core, client_id, &uri);
        }
        reply.send_locked(&mut core, to_value(&serde_json::json!({ "snapshot": snapshot })));
    }

    /// `unsubscribe` (a notification): the connection stops receiving the channel; a client that
    /// leaves a session this way leaves it for good.
    pub(super) fn unsubscribe(&self, conn: &mut ConnState, params: Value) {
        let Some(channel) = params.get("channel").and_then(Value::as_str) else {
            tracing::debug!(conn = conn.id, "unsubscribe without a channel; ignored");
            return;
        };
        let mut core = self.lock();
        if core.ch.unsubscribe(conn.id, channel) {
            if let Some(client_id) = &conn.client_id {
                self.client_unsubscribed(&mut core, client_id, channel);
            }
        }
    }
}

/// A subscription being answered.
struct Watch {
    client_id: Option<String>,
    uri: String,
    kind: ChannelKind,
    view_turns: Option<i64>,
    max_subscriptions: usize,
    /// A changeset's state, computed for this subscribe.
    computed: Option<ahp_types::state::ChangesetState>,
}

/// Refuses a new subscription that would take the connection past its limit; one it holds already
/// is fine (subscribing again only refreshes the snapshot).
fn check_room_for(core: &Core, conn: ConnId, max: usize, uri: &str) -> Result<(), AhpError> {
    let held = core.ch.conn(conn).map(|c| c.subs.len()).unwrap_or(0);
    if core.ch.is_subscribed(conn, uri) || held < max {
        return Ok(());
    }
    Err(over_limit(
        "maxSubscriptionsPerConnection",
        max,
        format!(
            "This connection watches {held} channels, this host's limit (maxSubscriptionsPerConnection); \
             unsubscribe from one before subscribing to {uri}"
        ),
    ))
}

/// Keeps a chat snapshot's last `n` turns, with the cursor that pages back to the rest.
fn limit_turns(snapshot: &mut Snapshot, n: i64) {
    let SnapshotState::Chat(chat) = &mut snapshot.state else {
        return;
    };
    let keep = usize::try_from(n.max(0)).unwrap_or(0);
    if chat.turns.len() > keep {
        let cut = chat.turns.len() - keep;
        chat.turns_next_cursor = chat.turns.get(cut).map(|t| format!("before:{}", t.id));
        chat.turns.drain(..cut);
    }
}
