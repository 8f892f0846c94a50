//! One connection's JSON-RPC: what the host knows of the connection, the framing checks, and the
//! requests this host sends a client in turn.
//!
//! A frame is decoded here, checked for the shapes JSON-RPC requires, and handed to the command
//! table (`commands`) as a request or a notification, or to the request of this host's that it
//! answers. A malformed frame gets the error the spec names and the connection lives on.

use serde::Serialize;
use serde_json::Value;

use super::core::{ConnId, Frame};
use super::errors::AhpError;
use super::limits::{nested_deeper_than, over_limit, CreationWindow, InFlight, Limits};
use super::Host;

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
    /// It answered with base64 that does not decode.
    Undecodable(String),
}

/// A resource a client read for this host (its answer to `resourceRead`).
#[derive(Debug, Clone, PartialEq)]
pub struct ClientResource {
    /// Its content, when the client sent it as text (`encoding: "utf-8"`); `bytes` is empty then.
    pub text: Option<String>,
    /// Its content, when the client sent it as base64.
    pub bytes: Vec<u8>,
    /// The type the client said it is.
    pub content_type: Option<String>,
}

impl ClientResource {
    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.text.as_ref().map_or(self.bytes.len(), String::len)
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
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

    /// Asks the connected client `client_id` for a resource it publishes (`resourceRead`).
    pub async fn read_client_resource(&self, client_id: &str, uri: &str) -> Result<ClientResource, ClientRequestError> {
        let params = serde_json::json!({ "channel": ahp_types::ROOT_RESOURCE_URI, "uri": uri });
        let answer = self.request_client(client_id, "resourceRead", params).await?;
        let data = answer.get("data").and_then(Value::as_str).unwrap_or_default();
        let content_type = answer.get("contentType").and_then(Value::as_str).map(str::to_owned);
        if answer.get("encoding").and_then(Value::as_str) == Some("base64") {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data)
                .map_err(|e| ClientRequestError::Undecodable(e.to_string()))?;
            Ok(ClientResource { text: None, bytes, content_type })
        } else {
            Ok(ClientResource { text: Some(data.to_owned()), bytes: Vec::new(), content_type })
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

/// Encodes a result that is already shaped for the wire.
pub(crate) fn encode_result<T: Serialize>(id: &Value, result: &T) -> Frame {
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
