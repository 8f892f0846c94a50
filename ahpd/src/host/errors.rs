//! The errors a request can end in, with the JSON-RPC code AHP assigns each.

use ahp_types::errors::{ahp_error_codes as ahp, json_rpc_error_codes as rpc};
use serde_json::Value;

/// A request's failure: a code from AHP's table and a sentence a person can read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct AhpError {
    /// The JSON-RPC error code.
    pub code: i32,
    /// What went wrong.
    pub message: String,
    /// Structured detail (`supportedVersions` for -32005).
    pub data: Option<Value>,
}

impl AhpError {
    fn new(code: i32, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }

    /// -32600: the message is not a request this host takes here.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(rpc::INVALID_REQUEST, message)
    }

    /// -32601.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(rpc::METHOD_NOT_FOUND, format!("Unknown method {method}"))
    }

    /// -32602.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(rpc::INVALID_PARAMS, message)
    }

    /// -32603.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(rpc::INTERNAL_ERROR, message)
    }

    /// -32001.
    pub fn session_not_found(uri: &str) -> Self {
        Self::new(ahp::SESSION_NOT_FOUND, format!("There is no session {uri}"))
    }

    /// -32002.
    pub fn provider_not_found(message: impl Into<String>) -> Self {
        Self::new(ahp::PROVIDER_NOT_FOUND, message)
    }

    /// -32003.
    pub fn session_exists(uri: &str) -> Self {
        Self::new(ahp::SESSION_ALREADY_EXISTS, format!("A session {uri} exists already"))
    }

    /// -32003, for a channel other than a session's: the URI is in use.
    pub fn in_use(message: impl Into<String>) -> Self {
        Self::new(ahp::SESSION_ALREADY_EXISTS, message)
    }

    /// -32004.
    pub fn turn_in_progress(message: impl Into<String>) -> Self {
        Self::new(ahp::TURN_IN_PROGRESS, message)
    }

    /// -32005, with the versions this host speaks.
    pub fn unsupported_version(offered: &[String]) -> Self {
        Self {
            code: ahp::UNSUPPORTED_PROTOCOL_VERSION,
            message: format!("This host speaks AHP ^1.0.0, and the client offered {}", offered.join(", ")),
            data: Some(serde_json::json!({ "supportedVersions": ["^1.0.0"] })),
        }
    }

    /// -32007: nobody is signed in; `authenticate` with a person's token against `resource`.
    pub fn auth_required(resource: &str) -> Self {
        Self {
            code: ahp::AUTH_REQUIRED,
            message: "Sign in first: this host has a users directory, and this connection is nobody's".to_owned(),
            data: Some(serde_json::json!({
                "resources": [{ "resource": resource, "resource_name": "ahpd users" }]
            })),
        }
    }

    /// -32008.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ahp::NOT_FOUND, message)
    }

    /// -32009.
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(ahp::PERMISSION_DENIED, message)
    }

    /// The JSON-RPC error object.
    pub fn to_json(&self) -> Value {
        let mut error = serde_json::json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// Reads a request's params into their AHP type, or says which part is wrong.
pub fn parse_params<T: serde::de::DeserializeOwned>(method: &str, params: Value) -> Result<T, AhpError> {
    serde_json::from_value(params).map_err(|e| AhpError::invalid_params(format!("Invalid {method} params: {e}")))
}
