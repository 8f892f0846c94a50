//! One connection's JSON-RPC: framing checks, the handshake, and each AHP command.
//!
//! A frame is decoded here, checked for the shapes JSON-RPC and AHP require, and routed. A
//! malformed frame, an unknown method or wrong params get the error the spec names and the
//! connection lives on. Answers that must be ordered against actions (a subscribe's snapshot, a
//! page of turns) are queued under the host's lock.

use std::collections::HashSet;

use ahp_types::commands::{
    CompletionsParams, FetchTurnsParams, Implementation, InitializeParams, InitializeResult, ListSessionsParams,
    ReconnectParams, ResolveSessionConfigParams, SessionConfigCompletionsParams, SubscribeParams,
};
use ahp_types::state::{Snapshot, SnapshotState};
use ahp_types::ROOT_RESOURCE_URI;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::core::{channel_kind, seq_i64, ChannelKind, ConnId, Frame};
use super::errors::{parse_params, AhpError};
use super::limits::{nested_deeper_than, over_limit, CreationWindow, InFlight, Limits};
use super::{Core, Host};
use crate::users::Principal;

/// What one connection has said about itself, and what it has used of its limits.
pub struct ConnState {
    /// The host's id for it.
    pub id: ConnId,
    /// `initialize` or `reconnect` succeeded.
    pub initialized: bool,
    /// Its `clientId`.
    pub client_id: Option<String>,
    /// What it may ask of the host.
    pub limits: Limits,
    /// Its requests waiting for an answer.
    pub in_flight: InFlight,
    /// When it created its recent sessions.
    pub created: CreationWindow,
    /// Set when the connection must close after what is queued (a refused handshake).
    pub close_after_flush: bool,
    /// Who is behind it.
    pub principal: crate::users::Principal,
}

/// One page of stored sessions, and what asked for it.
pub struct StorePage {
    /// The summaries.
    pub items: Vec<Value>,
    /// Where the next page starts, when there is one.
    pub next: Option<(String, String)>,
    /// True when the store holds more after these.
    pub store_has_more: bool,
    /// The page size asked for.
    pub limit: usize,
    /// The row this page starts after (modifiedAt, uri).
    pub after: Option<(String, String)>,
}

impl ConnState {
    /// A new connection's state.
    pub fn new(id: ConnId, limits: Limits) -> Self {
        Self {
            id,
            initialized: false,
            client_id: None,
            limits,
            in_flight: InFlight::default(),
            created: CreationWindow::default(),
            close_after_flush: false,
            principal: crate::users::Principal::Root,
        }
    }
}

/// Encodes a response to request `id`.
pub fn response(id: &Value, result: Result<Value, AhpError>) -> Frame {
    let value = match result {
        Ok(result) => serde_json::json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(error) => serde_json::json!({ "jsonrpc": "2.0", "id": id, "error": error.to_json() }),
    };
    Frame::from(value.to_string())
}

fn to_value<T: Serialize>(value: &T) -> Result<Value, AhpError> {
    serde_json::to_value(value).map_err(|e| AhpError::internal(format!("could not encode the answer: {e}")))
}

/// Refuses a message over the size or nesting limit before anything is decoded from it.
fn check_shape(text: &str, limits: &Limits) -> Result<(), AhpError> {
    if text.len() > limits.max_frame_bytes {
        return Err(over_limit(
            "maxFrameBytes",
            limits.max_frame_bytes,
            format!(
                "A message of {} bytes is over this host's limit of {} bytes (maxFrameBytes); it was not read",
                text.len(),
                limits.max_frame_bytes
            ),
        ));
    }
    if nested_deeper_than(text, limits.max_json_depth) {
        return Err(over_limit(
            "maxJsonDepth",
            limits.max_json_depth,
            format!(
                "A message nested deeper than this host's limit of {} levels (maxJsonDepth) was not read",
                limits.max_json_depth
            ),
        ));
    }
    Ok(())
}

/// Finds the id a refused frame is answered under, without trusting the rest.
fn id_of_oversized(text: &str) -> Value {
    #[derive(serde::Deserialize)]
    struct IdOnly {
        #[serde(default)]
        id: Value,
    }
    serde_json::from_str::<IdOnly>(text).map(|x| x.id).unwrap_or(Value::Null)
}

impl Host {
    /// Sends a frame to one connection.
    pub fn send_to(&self, conn: ConnId, frame: Frame) {
        self.lock().ch.send(conn, frame);
    }

    /// Handles one text frame from a connection.
    pub fn handle_frame(&self, conn: &mut ConnState, text: &str) {
        if let Err(error) = check_shape(text, &conn.limits) {
            self.send_to(conn.id, response(&id_of_oversized(text), Err(error)));
            return;
        }
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                let error = AhpError { code: -32700, message: format!("Parse error: {e}"), data: None };
                self.send_to(conn.id, response(&Value::Null, Err(error)));
                return;
            }
        };
        let Value::Object(mut message) = value else {
            let why = if value.is_array() {
                "Batches are not supported: send one JSON-RPC message per frame"
            } else {
                "A message must be a JSON-RPC 2.0 object"
            };
            self.send_to(conn.id, response(&Value::Null, Err(AhpError::invalid_request(why))));
            return;
        };
        let id = message.remove("id");
        if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            let id = id.unwrap_or(Value::Null);
            self.send_to(conn.id, response(&id, Err(AhpError::invalid_request("\"jsonrpc\" must be \"2.0\""))));
            return;
        }
        let params = message.remove("params").unwrap_or(Value::Null);
        let Some(method) = message.remove("method").and_then(|m| m.as_str().map(str::to_owned)) else {
            // A response to a request the host sent; or a message with no method at all.
            if id.is_none() || !(message.contains_key("result") || message.contains_key("error")) {
                self.send_to(
                    conn.id,
                    response(
                        &id.unwrap_or(Value::Null),
                        Err(AhpError::invalid_request("A request needs a \"method\"")),
                    ),
                );
                return;
            }
            self.client_answered(conn, id.as_ref(), message);
            return;
        };
        match id {
            None | Some(Value::Null) => self.handle_notification(conn, &method, params),
            Some(Value::Number(n)) if n.as_u64().is_some() => {
                let id = Value::Number(n);
                self.handle_request(conn, id, &method, params);
            }
            Some(other) => {
                let error = AhpError::invalid_request(
                    "Request ids must be whole numbers (AHP clients match answers by integer id)",
                );
                self.send_to(conn.id, response(&other, Err(error)));
            }
        }
    }

    fn handle_notification(&self, conn: &mut ConnState, method: &str, params: Value) {
        if !conn.initialized {
            tracing::debug!(conn = conn.id, method, "a notification before the handshake; ignored");
            return;
        }
        match method {
            "dispatchAction" => self.dispatch_action(conn, params),
            "unsubscribe" => match params.get("channel").and_then(Value::as_str) {
                Some(channel) => self.unsubscribe(conn, channel),
                None => tracing::debug!(conn = conn.id, "unsubscribe without a channel; ignored"),
            },
            other => tracing::debug!(conn = conn.id, method = other, "an unknown notification; ignored"),
        }
    }

    fn handle_request(&self, conn: &mut ConnState, id: Value, method: &str, params: Value) {
        if !params.is_null() && !params.is_object() {
            self.send_to(conn.id, response(&id, Err(AhpError::invalid_params("params must be an object"))));
            return;
        }
        if method == "ping" {
            self.send_to(conn.id, response(&id, Ok(Value::Null)));
            return;
        }
        let waiting = conn.in_flight.count();
        if waiting >= conn.limits.max_pending_requests {
            let error = over_limit(
                "maxPendingRequestsPerConnection",
                conn.limits.max_pending_requests,
                format!(
                    "This connection has {waiting} requests waiting for their answers, this host's limit \
                     (maxPendingRequestsPerConnection); send {method} again once one is answered"
                ),
            );
            self.send_to(conn.id, response(&id, Err(error)));
            return;
        }
        if method != "initialize" && method != "reconnect" && !conn.initialized {
            let error = AhpError::invalid_request("initialize or reconnect must be the first request");
            self.send_to(conn.id, response(&id, Err(error)));
            return;
        }
        if params.get("channel").and_then(Value::as_str).is_none() && is_known_method(method) {
            let error = AhpError::invalid_params(format!("Invalid {method} params: \"channel\" is required"));
            self.send_to(conn.id, response(&id, Err(error)));
            return;
        }
        if let Err(e) = self.check_grant(conn, method, &params) {
            let refused_listing =
                method == "listSessions" && e.code == ahp_types::errors::ahp_error_codes::PERMISSION_DENIED;
            // The listing is cut to the person: without session:read it is empty, not an error.
            let result = if refused_listing { Ok(serde_json::json!({ "items": [] })) } else { Err(e) };
            self.send_to(conn.id, response(&id, result));
            return;
        }
        let result = match method {
            "authenticate" => self.authenticate(conn, params),
            "initialize" => return self.initialize(conn, id, params),
            "reconnect" => return self.reconnect(conn, id, params),
            "subscribe" => return self.subscribe(conn, id, params),
            "fetchTurns" => return self.fetch_turns(conn, id, params),
            "createSession" => return self.create_session(conn, id, params),
            "createChat" => return self.create_chat(conn, id, params),
            "resolveSessionConfig" => return self.resolve_session_config(conn, id, params),
            "sessionConfigCompletions" => return self.session_config_completions(conn, id, params),
            "listSessions" if self.has_catalogue() => {
                let (host, conn_id) = (self.clone(), conn.id);
                self.spawn("list sessions with the agents' own", async move {
                    let result = host.list_with_catalogue(params).await;
                    host.send_to(conn_id, response(&id, result));
                });
                return;
            }
            "listSessions" => self.list_sessions(params),
            "disposeSession" => self.dispose_session(params),
            "disposeChat" => self.dispose_chat(params),
            "completions" => self.completions(params),
            "ahpd/test/advanceClock" => self.advance_clock(params),
            // A tool's move and a client's are refused in the same words while chat moves are off.
            "moveChat" => Err(AhpError::invalid_request(crate::tools::session::CHAT_MOVES_OFF)),
            other if is_known_method(other) => {
                Err(AhpError::method_not_found(&format!("{other} (this host does not serve it yet)")))
            }
            other => Err(AhpError::method_not_found(other)),
        };
        self.send_to(conn.id, response(&id, result));
    }

    /// The grant check at the dispatch boundary: nobody signed in is asked to; a person without
    /// the grant is told the host's sentence; deleting a session is its owner's say.
    fn check_grant(&self, conn: &ConnState, method: &str, params: &Value) -> Result<(), AhpError> {
        let Some(grant) = super::grants::request_grant(method, params) else { return Ok(()) };
        let mut core = self.lock();
        if core.users.is_none() {
            return Ok(());
        }
        // A person removed, or given a new role, is so from their next command on.
        core.refresh_users();
        if conn.principal == Principal::Nobody {
            return Err(AhpError::auth_required(super::grants::USERS_RESOURCE));
        }
        core.require(&conn.principal, grant)?;
        if method == "disposeSession" {
            let session = params.get("channel").and_then(Value::as_str).unwrap_or("");
            if self.ensure_loaded(&mut core, session) {
                core.may_dispose(&conn.principal, session)?;
            }
        }
        Ok(())
    }

    /// `authenticate`: a person signs the connection in with their token (an empty one signs it
    /// out). With no users directory there is nothing to sign in to.
    fn authenticate(&self, conn: &mut ConnState, params: Value) -> Result<Value, AhpError> {
        let params: ahp_types::commands::AuthenticateParams = parse_params("authenticate", params)?;
        if params.resource != super::grants::USERS_RESOURCE {
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
                Some(Err(())) => return Err(AhpError::auth_required(super::grants::USERS_RESOURCE)),
            }
        };
        let mut core = self.lock();
        if let (Some(client_id), Principal::Person(who)) = (&conn.client_id, &principal) {
            // The client id this connection holds becomes the person's, unless it is another's.
            match core.client_owners.get(client_id) {
                Some(owner) if owner != who => {
                    return Err(AhpError::permission_denied(format!(
                        "Client id {client_id} belongs to {owner}; connect under a client id of your own"
                    )));
                }
                Some(_) => {}
                None => {
                    core.client_owners.insert(client_id.clone(), who.clone());
                }
            }
        }
        core.ch.set_principal(conn.id, principal.clone());
        drop(core);
        conn.principal = principal;
        Ok(serde_json::json!({}))
    }

    fn initialize(&self, conn: &mut ConnState, id: Value, params: Value) {
        let result = self.try_initialize(conn, params);
        let mut core = self.lock();
        match result {
            Ok(value) => {
                // The snapshots were taken under this same lock: the answer goes out before any
                // action they do not contain.
                core.ch.send(conn.id, response(&id, Ok(value)));
            }
            Err(error) => {
                if error.code == ahp_types::errors::ahp_error_codes::UNSUPPORTED_PROTOCOL_VERSION {
                    conn.close_after_flush = true;
                }
                core.ch.send(conn.id, response(&id, Err(error)));
            }
        }
    }

    fn try_initialize(&self, conn: &mut ConnState, params: Value) -> Result<Value, AhpError> {
        if conn.initialized {
            return Err(AhpError::invalid_request("This connection is initialized already"));
        }
        let params: InitializeParams = parse_params("initialize", params)?;
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
            if let Some(snapshot) = core.ch.snapshot(&uri) {
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
            completion_trigger_characters: None,
            terminal_command_prefix: None,
            telemetry: None,
            automations: None,
        };
        to_value(&result)
    }

    /// Binds a client id to this connection; an older connection holding it is half-open and
    /// goes. Under a users directory a client id is the person's who first claimed it: another
    /// person (or nobody signed in) is refused it.
    fn adopt_client(&self, core: &mut Core, conn: &mut ConnState, client_id: &str) -> Result<(), AhpError> {
        use crate::users::Principal;
        if core.users.is_some() {
            match (core.client_owners.get(client_id), &conn.principal) {
                (_, Principal::Root) => {}
                (Some(owner), Principal::Person(who)) if owner == who => {}
                (Some(owner), _) => {
                    return Err(AhpError::permission_denied(format!(
                        "Client id {client_id} belongs to {owner}; connect under a client id of your own"
                    )));
                }
                (None, Principal::Person(who)) => {
                    core.client_owners.insert(client_id.to_owned(), who.clone());
                }
                (None, Principal::Nobody) => {}
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

    fn reconnect(&self, conn: &mut ConnState, id: Value, params: Value) {
        if conn.initialized {
            self.send_to(
                conn.id,
                response(&id, Err(AhpError::invalid_request("This connection is initialized already"))),
            );
            return;
        }
        let params: ReconnectParams = match parse_params("reconnect", params) {
            Ok(p) => p,
            Err(e) => return self.send_to(conn.id, response(&id, Err(e))),
        };
        if let Err(e) = check_root_channel("reconnect", &params.channel) {
            return self.send_to(conn.id, response(&id, Err(e)));
        }
        if params.client_id.trim().is_empty() {
            let e = AhpError::invalid_params("Invalid reconnect params: clientId must not be empty");
            return self.send_to(conn.id, response(&id, Err(e)));
        }
        if let Err(e) = check_subscription_count(&conn.limits, "reconnect", &params.subscriptions) {
            return self.send_to(conn.id, response(&id, Err(e)));
        }
        let mut core = self.lock();
        if let Some(e) = params.subscriptions.iter().find_map(|uri| core.may_watch(&conn.principal, uri).err()) {
            drop(core);
            return self.send_to(conn.id, response(&id, Err(e)));
        }
        let known = core.known_clients.contains(&params.client_id);
        if let Err(e) = self.adopt_client(&mut core, conn, &params.client_id) {
            drop(core);
            return self.send_to(conn.id, response(&id, Err(e)));
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
        let frame = match replay {
            Some(envelopes) => {
                #[derive(Serialize)]
                struct Replay<'a> {
                    r#type: &'static str,
                    actions: &'a RawValue,
                    missing: &'a [String],
                }
                match RawValue::from_string(envelopes) {
                    Ok(actions) => {
                        encode_result(&id, &Replay { r#type: "replay", actions: &actions, missing: &missing })
                    }
                    Err(e) => response(&id, Err(AhpError::internal(format!("could not assemble the replay: {e}")))),
                }
            }
            None => {
                let snapshots: Vec<Snapshot> = live.iter().filter_map(|uri| core.ch.snapshot(uri)).collect();
                let value = serde_json::json!({ "type": "snapshot", "snapshots": snapshots });
                response(&id, Ok(value))
            }
        };
        core.ch.send(conn.id, frame);
    }

    fn subscribe(&self, conn: &mut ConnState, id: Value, params: Value) {
        let params: SubscribeParams = match parse_params("subscribe", params) {
            Ok(p) => p,
            Err(e) => return self.send_to(conn.id, response(&id, Err(e))),
        };
        let uri = params.channel;
        let Some(kind) = channel_kind(&uri) else {
            let e = AhpError::invalid_params(format!(
                "{uri} is not a channel this host serves (root, ahp-session:/, ahp-chat:/, annotations)"
            ));
            return self.send_to(conn.id, response(&id, Err(e)));
        };
        let known = {
            let mut core = self.lock();
            self.ensure_loaded(&mut core, &uri)
        };
        if !known && matches!(kind, ChannelKind::Session | ChannelKind::Chat) && self.has_catalogue() {
            // Perhaps a session an agent keeps and this host never held: read it back first.
            let (host, conn_id, client_id) = (self.clone(), conn.id, conn.client_id.clone());
            let (view, max) = (params.view.and_then(|v| v.turns), conn.limits.max_subscriptions);
            self.spawn("open an agent's own session", async move {
                host.import_foreign(&uri).await;
                host.finish_subscribe(conn_id, client_id.as_deref(), id, &uri, kind, view, max);
            });
            return;
        }
        let (view, max) = (params.view.and_then(|v| v.turns), conn.limits.max_subscriptions);
        self.finish_subscribe(conn.id, conn.client_id.as_deref(), id, &uri, kind, view, max);
    }

    /// Answers a subscribe with the channel's snapshot (trimmed to `view_turns` turns), unless the
    /// connection already watches `max_subscriptions` others.
    #[allow(clippy::too_many_arguments)]
    fn finish_subscribe(
        &self,
        conn_id: ConnId,
        client_id: Option<&str>,
        id: Value,
        uri: &str,
        kind: ChannelKind,
        view_turns: Option<i64>,
        max_subscriptions: usize,
    ) {
        let uri = uri.to_owned();
        let mut core = self.lock();
        self.ensure_loaded(&mut core, &uri);
        let Some(mut snapshot) = core.ch.snapshot(&uri) else {
            drop(core);
            let e = AhpError::not_found(format!("There is no channel {uri}"));
            return self.send_to(conn_id, response(&id, Err(e)));
        };
        if let Err(e) = check_room_for(&core, conn_id, max_subscriptions, &uri) {
            drop(core);
            return self.send_to(conn_id, response(&id, Err(e)));
        }
        if kind == ChannelKind::Chat {
            if let Some(n) = view_turns {
                limit_turns(&mut snapshot, n);
            }
        }
        core.ch.subscribe(conn_id, &uri);
        if let Some(client_id) = client_id {
            self.client_returned(&mut core, client_id, &uri);
        }
        let frame = response(&id, to_value(&serde_json::json!({ "snapshot": snapshot })));
        core.ch.send(conn_id, frame);
    }

    fn unsubscribe(&self, conn: &ConnState, channel: &str) {
        let mut core = self.lock();
        if core.ch.unsubscribe(conn.id, channel) {
            if let Some(client_id) = &conn.client_id {
                self.client_unsubscribed(&mut core, client_id, channel);
            }
        }
    }

    fn fetch_turns(&self, conn: &mut ConnState, id: Value, params: Value) {
        let params: FetchTurnsParams = match parse_params("fetchTurns", params) {
            Ok(p) => p,
            Err(e) => return self.send_to(conn.id, response(&id, Err(e))),
        };
        let mut core = self.lock();
        self.ensure_loaded(&mut core, &params.channel);
        let Some(chat) = core.ch.chats.get(&params.channel) else {
            drop(core);
            return self.send_to(
                conn.id,
                response(&id, Err(AhpError::not_found(format!("There is no chat {}", params.channel)))),
            );
        };
        let turns = &chat.turns;
        let end = match params.cursor.as_deref() {
            None => turns.len(),
            Some(cursor) => match cursor.strip_prefix("before:").and_then(|t| turns.iter().position(|x| x.id == t)) {
                Some(i) => i,
                None => {
                    drop(core);
                    let e = AhpError::invalid_params(format!(
                        "Invalid fetchTurns params: cursor {cursor} is not one this host gave"
                    ));
                    return self.send_to(conn.id, response(&id, Err(e)));
                }
            },
        };
        let start = end.saturating_sub(TURN_PAGE);
        let page = turns[start..end].to_vec();
        let next = (start > 0).then(|| format!("before:{}", turns[start].id));
        let action = ahp_types::actions::StateAction::ChatTurnsLoaded(ahp_types::actions::ChatTurnsLoadedAction {
            turns: page,
            turns_next_cursor: next,
        });
        // Only the connection that paged receives the page: other subscribers hold every turn.
        core.ch.send_private(conn.id, &params.channel, &action);
        core.ch.send(conn.id, response(&id, Ok(serde_json::json!({}))));
    }

    fn list_sessions(&self, params: Value) -> Result<Value, AhpError> {
        let page = self.list_sessions_page(params)?;
        let mut result = serde_json::json!({ "items": page.items });
        if let Some((modified, uri)) = page.next {
            result["nextCursor"] = Value::String(encode_cursor(&modified, &uri));
        }
        Ok(result)
    }

    /// One page of the store's sessions for `listSessions` params.
    pub(super) fn list_sessions_page(&self, params: Value) -> Result<StorePage, AhpError> {
        let params: ListSessionsParams = parse_params("listSessions", params)?;
        check_root_channel("listSessions", &params.channel)?;
        let limit = match params.limit {
            None => 1000,
            Some(n) if n >= 1 => usize::try_from(n.min(1000)).unwrap_or(1000),
            Some(n) => {
                return Err(AhpError::invalid_params(format!(
                    "Invalid listSessions params: limit must be at least 1, not {n}"
                )))
            }
        };
        let after = match params.cursor.as_deref() {
            None => None,
            Some(cursor) => Some(decode_cursor(cursor).ok_or_else(|| {
                AhpError::invalid_params(format!(
                    "Invalid listSessions params: cursor {cursor} is not one this host gave"
                ))
            })?),
        };
        // The store is the catalogue: sessions not used since start-up are listed from it without
        // being loaded, and the live ones write their summary there whenever it changes.
        let core = self.lock();
        let page = core
            .store
            .page(after.as_ref().map(|(m, u)| (m.as_str(), u.as_str())), limit)
            .map_err(|e| AhpError::internal(e.to_string()))?;
        Ok(StorePage { store_has_more: page.next.is_some(), items: page.items, next: page.next, limit, after })
    }

    /// Tests only: moves a manual clock (`AHPD_TEST_CLOCK=manual`) forward by `ms`. A daemon on
    /// wall time does not answer it.
    fn advance_clock(&self, params: Value) -> Result<Value, AhpError> {
        let clock = &self.config().clock;
        if !clock.is_manual() {
            return Err(AhpError::method_not_found("ahpd/test/advanceClock"));
        }
        let ms = params
            .get("ms")
            .and_then(Value::as_u64)
            .ok_or_else(|| AhpError::invalid_params("ms must be a whole number"))?;
        clock.advance(std::time::Duration::from_millis(ms));
        Ok(serde_json::json!({ "now": clock.now() }))
    }

    fn completions(&self, params: Value) -> Result<Value, AhpError> {
        let params: CompletionsParams = parse_params("completions", params)?;
        let mut core = self.lock();
        if !self.ensure_loaded(&mut core, &params.channel) || !core.ch.chats.contains_key(&params.channel) {
            return Err(AhpError::not_found(format!("There is no chat {}", params.channel)));
        }
        Ok(serde_json::json!({ "items": [] }))
    }

    fn resolve_session_config(&self, conn: &mut ConnState, id: Value, params: Value) {
        let result = (|| {
            let params: ResolveSessionConfigParams = parse_params("resolveSessionConfig", params)?;
            check_root_channel("resolveSessionConfig", &params.channel)?;
            let core = self.lock();
            let provider = core.pick_provider(params.provider.as_deref())?;
            let schema = core
                .agent(&provider)
                .and_then(|a| a.schema.clone())
                .ok_or_else(|| AhpError::provider_not_found(format!("The {provider} agent has not started yet")))?;
            let values = super::catalog::resolve_config(&schema, params.config.as_ref())?;
            Ok(serde_json::json!({ "schema": schema.schema, "values": values }))
        })();
        self.send_to(conn.id, response(&id, result));
    }

    fn session_config_completions(&self, conn: &mut ConnState, id: Value, params: Value) {
        let parsed: Result<SessionConfigCompletionsParams, _> = parse_params("sessionConfigCompletions", params);
        let params = match parsed {
            Ok(p) => p,
            Err(e) => return self.send_to(conn.id, response(&id, Err(e))),
        };
        // Bound first: a guard in the match's scrutinee would live through the arms, and the
        // error arm's send takes the same lock (a deadlock the fuzzer found).
        let picked = self.lock().pick_provider(params.provider.as_deref());
        let provider = match picked {
            Ok(p) => p,
            Err(e) => return self.send_to(conn.id, response(&id, Err(e))),
        };
        let answers = self
            .lock()
            .agent(&provider)
            .and_then(|a| a.descriptor.as_ref())
            .map(|d| d.features.completions.contains(&params.property));
        if answers != Some(true) {
            return self.send_to(conn.id, response(&id, Ok(serde_json::json!({ "items": [] }))));
        }
        let (host, conn_id, waiting) = (self.clone(), conn.id, conn.in_flight.begin());
        self.spawn("session config completions", async move {
            let result = host.ask_completions(&provider, params).await;
            // Counted off before the answer goes, so a client that sends again on reading it is
            // never refused for the request it was just answered.
            drop(waiting);
            host.send_to(conn_id, response(&id, result));
        });
    }

    async fn ask_completions(&self, provider: &str, params: SessionConfigCompletionsParams) -> Result<Value, AhpError> {
        let worker = self
            .supervisor()
            .worker(provider, self.config().worker_wait)
            .await
            .map_err(|e| AhpError::internal(e.to_string()))?;
        let ask = protocol::CompletionsParams {
            property: params.property,
            query: params.query,
            config: params.config.unwrap_or_default(),
            working_directory: params.working_directory,
        };
        let answer: protocol::CompletionsResult = worker
            .peer
            .request(protocol::methods::parent::COMPLETIONS, ask)
            .await
            .map_err(|e| AhpError::internal(format!("The {provider} agent could not answer: {e}")))?;
        let items: Vec<Value> = answer
            .items
            .into_iter()
            .map(|i| {
                let value = match i.value {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                let mut item = serde_json::json!({ "value": value, "label": i.label });
                if let Some(d) = i.description {
                    item["description"] = Value::String(d);
                }
                item
            })
            .collect();
        Ok(serde_json::json!({ "items": items }))
    }
}

/// How long a request this host sends a client may wait for its answer.
pub const CLIENT_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Why a request this host sent a client got no result.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientRequestError {
    /// No connection holds that client id.
    NotConnected,
    /// The client answered with a JSON-RPC error; its message, as it said it.
    Refused(String),
    /// It closed its connection first.
    Disconnected,
    /// It did not answer in time.
    TimedOut,
}

impl Host {
    /// Sends the connected client `client_id` a request of this host's own and waits for its
    /// answer, at most [`CLIENT_REQUEST_TIMEOUT`].
    pub async fn request_client(
        &self,
        client_id: &str,
        method: &str,
        params: Value,
    ) -> Result<Value, ClientRequestError> {
        let (conn, request, answer) = {
            let mut core = self.lock();
            let conn =
                core.ch.conns_of_client(client_id, 0).into_iter().next().ok_or(ClientRequestError::NotConnected)?;
            let (request, answer) = core.ch.request(conn, method, &params).ok_or(ClientRequestError::NotConnected)?;
            (conn, request, answer)
        };
        match tokio::time::timeout(CLIENT_REQUEST_TIMEOUT, answer).await {
            Ok(Ok(Ok(result))) => Ok(result),
            Ok(Ok(Err(error))) => Err(ClientRequestError::Refused(
                error.get("message").and_then(Value::as_str).unwrap_or("no reason given").to_owned(),
            )),
            Ok(Err(_)) => Err(ClientRequestError::Disconnected),
            Err(_) => {
                self.lock().ch.forget_request(conn, request);
                Err(ClientRequestError::TimedOut)
            }
        }
    }

    /// A connection answered a request this host sent it.
    fn client_answered(&self, conn: &ConnState, id: Option<&Value>, mut message: serde_json::Map<String, Value>) {
        let Some(request) = id.and_then(Value::as_u64) else {
            tracing::debug!(conn = conn.id, "an answer with an id this host never gives; ignored");
            return;
        };
        let answer = match message.remove("error") {
            Some(error) => Err(error),
            None => Ok(message.remove("result").unwrap_or(Value::Null)),
        };
        if !self.lock().ch.settle_request(conn.id, request, answer) {
            tracing::debug!(conn = conn.id, request, "an answer to no request this host is waiting on; ignored");
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

/// Turns sent per page of `fetchTurns`.
const TURN_PAGE: usize = 50;

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

fn encode_result<T: Serialize>(id: &Value, result: &T) -> Frame {
    #[derive(Serialize)]
    struct Out<'a, T> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: &'a T,
    }
    match serde_json::to_string(&Out { jsonrpc: "2.0", id, result }) {
        Ok(s) => Frame::from(s),
        Err(e) => response(id, Err(AhpError::internal(format!("could not encode the answer: {e}")))),
    }
}

fn is_known_method(method: &str) -> bool {
    matches!(
        method,
        "initialize"
            | "reconnect"
            | "subscribe"
            | "listSessions"
            | "resolveSessionConfig"
            | "sessionConfigCompletions"
            | "createSession"
            | "disposeSession"
            | "createChat"
            | "disposeChat"
            | "moveChat"
            | "fetchTurns"
            | "completions"
            | "authenticate"
            | "createTerminal"
            | "disposeTerminal"
            | "invokeChangesetOperation"
            | "resourceRead"
            | "resourceWrite"
            | "resourceList"
            | "resourceCopy"
            | "resourceMove"
            | "resourceDelete"
            | "resourceResolve"
            | "resourceMkdir"
            | "resourceRequest"
            | "createResourceWatch"
            | "listAutomationTriggerDefinitions"
            | "runAutomation"
            | "fetchAutomationRuns"
    )
}

fn check_root_channel(method: &str, channel: &str) -> Result<(), AhpError> {
    if channel == ROOT_RESOURCE_URI {
        Ok(())
    } else {
        Err(AhpError::invalid_params(format!(
            "Invalid {method} params: channel must be {ROOT_RESOURCE_URI}, not {channel}"
        )))
    }
}

/// Picks the protocol version: AHP 1.x only, the highest offered.
fn negotiate(offered: &[String]) -> Result<String, AhpError> {
    match ahp_types::negotiate_protocol_version(offered) {
        Err(e) => Err(AhpError::invalid_params(format!("Invalid initialize params: {e}"))),
        Ok(Some(v)) if v.starts_with("1.") => Ok(v.to_owned()),
        Ok(_) => Err(AhpError::unsupported_version(offered)),
    }
}

pub(super) fn encode_cursor(modified_at: &str, uri: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{modified_at}\n{uri}"))
}

fn decode_cursor(cursor: &str) -> Option<(String, String)> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (modified, uri) = text.split_once('\n')?;
    Some((modified.to_owned(), uri.to_owned()))
}

/// A `file://` URI for a path.
pub fn file_uri(path: &std::path::Path) -> String {
    format!("file://{}", path.display())
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

    #[test]
    fn cursors_round_trip() {
        let c = encode_cursor("2026-01-01T00:00:00.000Z", "ahp-session:/x");
        assert_eq!(decode_cursor(&c), Some(("2026-01-01T00:00:00.000Z".into(), "ahp-session:/x".into())));
        assert_eq!(decode_cursor("garbage!"), None);
    }
}
