//! Framing: one JSON-RPC 2.0 message per line, decoded into a [`Frame`] or refused with a reason.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The longest line either side accepts. A longer one is a protocol violation, not a message.
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message} ({code})")]
pub struct RpcError {
    /// The error code (`crate::codes`).
    pub code: i32,
    /// A sentence saying what went wrong.
    pub message: String,
    /// Anything more the sender wants to say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with a code and a sentence.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }
}

/// One decoded line of the worker protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A request: answer it with a response carrying the same id.
    Request { id: u64, method: String, params: Value },
    /// A notification: no answer.
    Notification { method: String, params: Value },
    /// A successful answer to one of our requests.
    Response { id: u64, result: Value },
    /// A failed answer to one of our requests.
    Error { id: u64, error: RpcError },
}

/// Why a line is not a frame.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FrameError {
    /// The line is not JSON at all.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// The line is JSON but not a JSON-RPC 2.0 message this protocol speaks.
    #[error("not a JSON-RPC 2.0 message: {0}")]
    NotJsonRpc(&'static str),
    /// The line is longer than [`MAX_FRAME_BYTES`].
    #[error("a line of {0} bytes is longer than the protocol allows")]
    TooLong(usize),
}

impl Frame {
    /// Decodes one line (without its newline).
    pub fn decode(line: &str) -> Result<Frame, FrameError> {
        if line.len() > MAX_FRAME_BYTES {
            return Err(FrameError::TooLong(line.len()));
        }
        let value: Value = serde_json::from_str(line).map_err(|e| FrameError::NotJson(e.to_string()))?;
        let Value::Object(mut map) = value else {
            return Err(FrameError::NotJsonRpc("a message is one JSON object"));
        };
        if map.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(FrameError::NotJsonRpc("\"jsonrpc\" must be \"2.0\""));
        }
        let id = match map.remove("id") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => Some(n.as_u64().ok_or(FrameError::NotJsonRpc("\"id\" must be a whole number"))?),
            Some(_) => return Err(FrameError::NotJsonRpc("\"id\" must be a whole number")),
        };
        let params = map.remove("params").unwrap_or(Value::Null);
        if let Some(method) = map.remove("method") {
            let Value::String(method) = method else {
                return Err(FrameError::NotJsonRpc("\"method\" must be a string"));
            };
            return Ok(match id {
                Some(id) => Frame::Request { id, method, params },
                None => Frame::Notification { method, params },
            });
        }
        let id = id.ok_or(FrameError::NotJsonRpc("a response needs an \"id\""))?;
        if let Some(error) = map.remove("error") {
            let error: RpcError = serde_json::from_value(error)
                .map_err(|_| FrameError::NotJsonRpc("\"error\" must be {code, message, data?}"))?;
            return Ok(Frame::Error { id, error });
        }
        match map.remove("result") {
            Some(result) => Ok(Frame::Response { id, result }),
            None => Err(FrameError::NotJsonRpc("a response needs \"result\" or \"error\"")),
        }
    }

    /// Encodes the frame as one line, newline included.
    pub fn encode(&self) -> String {
        let value = match self {
            Frame::Request { id, method, params } => {
                serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
            }
            Frame::Notification { method, params } => {
                serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params})
            }
            Frame::Response { id, result } => {
                serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result})
            }
            Frame::Error { id, error } => {
                serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error})
            }
        };
        let mut line = value.to_string();
        line.push('\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_kind() {
        let frames = [
            Frame::Request { id: 7, method: "session/abort".into(), params: serde_json::json!({"chat": "c"}) },
            Frame::Notification { method: "emit".into(), params: serde_json::json!({}) },
            Frame::Response { id: 7, result: Value::Null },
            Frame::Error { id: 8, error: RpcError::new(-32601, "no") },
        ];
        for frame in frames {
            let line = frame.encode();
            assert!(line.ends_with('\n'));
            assert_eq!(Frame::decode(line.trim_end()).expect("decodes"), frame);
        }
    }

    #[test]
    fn refuses_what_is_not_a_frame() {
        assert!(matches!(Frame::decode("hello"), Err(FrameError::NotJson(_))));
        assert!(matches!(Frame::decode("[1]"), Err(FrameError::NotJsonRpc(_))));
        assert!(matches!(Frame::decode(r#"{"id":1,"method":"x"}"#), Err(FrameError::NotJsonRpc(_))));
        assert!(matches!(Frame::decode(r#"{"jsonrpc":"2.0","id":"1","method":"x"}"#), Err(FrameError::NotJsonRpc(_))));
        assert!(matches!(Frame::decode(r#"{"jsonrpc":"2.0","id":1}"#), Err(FrameError::NotJsonRpc(_))));
    }
}
