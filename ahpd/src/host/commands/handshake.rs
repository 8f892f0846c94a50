//! The handshake and signing in: `initialize` and `reconnect` (a connection's first request, which
//! binds its client id and answers the snapshots or the replay it resumes from) and `authenticate`.

use std::collections::HashSet;

use ahp_types::commands::{AuthenticateParams, Implementation, InitializeParams, InitializeResult, ReconnectParams};
use ahp_types::state::Snapshot;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::{check_root_channel, to_value, Reply};
use crate::fileuri::file_uri;
use crate::host::core::seq_i64;
use crate::host::errors::AhpError;
use crate::host::grants::USERS_RESOURCE;
use crate::host::limits::{over_limit, Limits};
use crate::host::requests::{encode_result, response, ConnState};
use crate::host::{Core, Host};
use crate::users::Principal;

impl Host {
    /// `authenticate`: a person signs the connection in with their token (an empty one signs it
    /// out). With no users directory there is nothing to sign in to.
    pub(super) fn authenticate(&self, conn: &mut ConnState, params: AuthenticateParams) -> Result<Value, AhpError> {
        if params.resource != USERS_RESOURCE {
            return Err(AhpError::invalid_params(format!(
                "Invalid authenticate params: {} is not a resource this host advertised",
                params.resource
            )));
        }
        let principal = if params.token.is_empty() {
            Principal::Nobody
        } else {
            match self.person_of_token(Some(&params.token)) {
                None => return Err(AhpError::invalid_params("This host has no users directory to sign in to")),
                Some(Ok(principal)) => principal,
                Some(Err(())) => return Err(AhpError::auth_required(USERS_RESOURCE)),
            }
        };
        let mut core = self.lock();
        if let (Some(client_id), Principal::Person(who)) = (&conn.client_id, &principal) {
            // The client id this connection holds becomes the person's, unless it is another's.
            claim_client_id(&mut core, client_id, who)?;
        }
        core.ch.set_principal(conn.id, principal.clone());
        drop(core);
        conn.principal = principal;
        Ok(serde_json::json!({}))
    }

    pub(super) fn initialize(&self, conn: &mut ConnState, reply: Reply, params: InitializeParams) {
        let result = self.try_initialize(conn, params);
        let mut core = self.lock();
        if let Err(error) = &result {
            if error.code == ahp_types::errors::ahp_error_codes::UNSUPPORTED_PROTOCOL_VERSION {
                conn.close_after_flush = true;
            }
        }
        // The snapshots were taken under this same lock: the answer goes out before any action
        // they do not contain.
        reply.send_locked(&mut core, result);
    }

    fn try_initialize(&self, conn: &mut ConnState, params: InitializeParams) -> Result<Value, AhpError> {
        check_root_channel("initialize", &params.channel)?;
        if params.client_id.trim().is_empty() {
            return Err(AhpError::invalid_params("Invalid initialize params: clientId must not be empty"));
        }
        let version = negotiate(&params.protocol_versions)?;
        if let Some(uris) = &params.initial_subscriptions {
            check_subscription_count(&conn.limits, "initialize", uris)?;
        }
        let mut core = self.lock();
        for uri in params.initial_subscriptions.iter().flatten() {
            core.may_watch(&conn.principal, uri)?;
        }
        self.adopt_client(&mut core, conn, &params.client_id)?;
        let mut snapshots = Vec::new();
        for uri in params.initial_subscriptions.unwrap_or_default() {
            self.ensure_loaded(&mut core, &uri);
            if let Some(snapshot) = core.snapshot_for(&conn.principal, &uri) {
                core.ch.subscribe(conn.id, &uri);
                self.client_returned(&mut core, &params.client_id, &uri);
                snapshots.push(snapshot);
            } else {
                tracing::debug!(
                    conn = conn.id,
                    uri,
                    "an initial subscription to a channel that does not exist; skipped"
                );
            }
        }
        conn.initialized = true;
        let result = InitializeResult {
            protocol_version: version,
            server_seq: seq_i64(core.ch.seq()),
            server_info: Some(Implementation {
                name: "ahpd".into(),
                version: Some(self.config().server_version.clone()),
                title: Some("ahpd".into()),
            }),
            meta: None,
            snapshots,
            default_directory: self.config().default_directory.as_ref().map(|d| file_uri(d)),
            completion_trigger_characters: Some(
                crate::host::completions::TRIGGERS.iter().map(|t| (*t).to_owned()).collect(),
            ),
            terminal_command_prefix: core
                .terminals_feature()
                .map(|_| crate::host::terminal_channels::COMMAND_PREFIX.to_owned()),
            telemetry: None,
            automations: core.automations.as_ref().map(|a| a.capabilities()),
        };
        to_value(&result)
    }

    /// Binds a client id to this connection; an older connection holding it is half-open and
    /// goes. Under a users directory a client id is the person's who first claimed it: another
    /// person (or nobody signed in) is refused it.
    fn adopt_client(&self, core: &mut Core, conn: &mut ConnState, client_id: &str) -> Result<(), AhpError> {
        if core.users.is_some() {
            match &conn.principal {
                Principal::Root => {}
                Principal::Person(who) => claim_client_id(core, client_id, who)?,
                Principal::Nobody => {
                    if let Some(owner) = core.client_owners.get(client_id) {
                        return Err(taken(client_id, owner));
                    }
                }
            }
        }
        for other in core.ch.conns_of_client(client_id, conn.id) {
            core.ch.kick(other, "another connection took over its client id");
        }
        if let Some(entry) = core.ch.conn_mut(conn.id) {
            entry.client_id = Some(client_id.to_owned());
        }
        core.known_clients.insert(client_id.to_owned());
        conn.client_id = Some(client_id.to_owned());
        Ok(())
    }

    pub(super) fn reconnect(&self, conn: &mut ConnState, reply: Reply, params: ReconnectParams) {
        if let Err(e) = check_root_channel("reconnect", &params.channel) {
            return reply.send(self, Err(e));
        }
        if params.client_id.trim().is_empty() {
            let e = AhpError::invalid_params("Invalid reconnect params: clientId must not be empty");
            return reply.send(self, Err(e));
        }
        if let Err(e) = check_subscription_count(&conn.limits, "reconnect", &params.subscriptions) {
            return reply.send(self, Err(e));
        }
        let mut core = self.lock();
        if let Some(e) = params.subscriptions.iter().find_map(|uri| core.may_watch(&conn.principal, uri).err()) {
            drop(core);
            return reply.send(self, Err(e));
        }
        let known = core.known_clients.contains(&params.client_id);
        if let Err(e) = self.adopt_client(&mut core, conn, &params.client_id) {
            drop(core);
            return reply.send(self, Err(e));
        }
        let (live, missing): (Vec<String>, Vec<String>) =
            params.subscriptions.iter().cloned().partition(|uri| self.ensure_loaded(&mut core, uri));
        let last_seen = u64::try_from(params.last_seen_server_seq).unwrap_or(0);
        let live_set: HashSet<String> = live.iter().cloned().collect();
        let replay = if known { core.ch.replay_since(last_seen, &live_set) } else { None };
        for uri in &live {
            core.ch.subscribe(conn.id, uri);
            self.client_returned(&mut core, &params.client_id, uri);
        }
        conn.initialized = true;
        let snapshots: Vec<Snapshot> = match replay {
            Some(_) => Vec::new(),
            None => live.iter().filter_map(|uri| core.snapshot_for(&conn.principal, uri)).collect(),
        };
        reply.send_frame_locked(&mut core, |id| match replay {
            Some(envelopes) => replay_frame(id, envelopes, &missing),
            None => response(id, Ok(serde_json::json!({ "type": "snapshot", "snapshots": snapshots }))),
        });
    }
}

/// The answer to a `reconnect` the replay ring can serve: the envelopes as the ring holds them.
fn replay_frame(id: &Value, envelopes: String, missing: &[String]) -> crate::host::core::Frame {
    #[derive(Serialize)]
    struct Replay<'a> {
        r#type: &'static str,
        actions: &'a RawValue,
        missing: &'a [String],
    }
    match RawValue::from_string(envelopes) {
        Ok(actions) => encode_result(id, &Replay { r#type: "replay", actions: &actions, missing }),
        Err(e) => response(id, Err(AhpError::internal(format!("could not assemble the replay: {e}")))),
    }
}

/// The refusal of a client id another person holds.
fn taken(client_id: &str, owner: &str) -> AhpError {
    AhpError::permission_denied(format!(
        "Client id {client_id} belongs to {owner}; connect under a client id of your own"
    ))
}

/// Makes `client_id` `who`'s, unless it is another person's already.
fn claim_client_id(core: &mut Core, client_id: &str, who: &str) -> Result<(), AhpError> {
    match core.client_owners.get(client_id) {
        Some(owner) if owner != who => Err(taken(client_id, owner)),
        Some(_) => Ok(()),
        None => {
            core.client_owners.insert(client_id.to_owned(), who.to_owned());
            Ok(())
        }
    }
}

/// Refuses a handshake that names more channels than one connection may watch.
fn check_subscription_count(limits: &Limits, method: &str, uris: &[String]) -> Result<(), AhpError> {
    let distinct: HashSet<&str> = uris.iter().map(String::as_str).collect();
    if distinct.len() <= limits.max_subscriptions {
        return Ok(());
    }
    Err(over_limit(
        "maxSubscriptionsPerConnection",
        limits.max_subscriptions,
        format!(
            "{method} names {} channels, over this host's limit of {} subscriptions per connection \
             (maxSubscriptionsPerConnection)",
            distinct.len(),
            limits.max_subscriptions
        ),
    ))
}

/// Picks the protocol version: AHP 1.x only, the highest offered.
fn negotiate(offered: &[String]) -> Result<String, AhpError> {
    match ahp_types::negotiate_protocol_version(offered) {
        Err(e) => Err(AhpError::invalid_params(format!("Invalid initialize params: {e}"))),
        Ok(Some(v)) if v.starts_with("1.") => Ok(v.to_owned()),
        Ok(_) => Err(AhpError::unsupported_version(offered)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiates_only_ahp_one() {
        assert_eq!(negotiate(&["1.0.0".into(), "0.9.0".into()]).expect("ok"), "1.0.0");
        assert_eq!(negotiate(&["1.2.0".into()]).expect("ok"), "1.2.0");
        assert_eq!(negotiate(&["0.9.0".into()]).expect_err("refused").code, -32005);
        assert_eq!(negotiate(&["2.0.0".into()]).expect_err("refused").code, -32005);
        assert_eq!(negotiate(&["1.0".into()]).expect_err("malformed").code, -32602);
    }
}
