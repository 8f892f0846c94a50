//! `ahpd connect`: how to reach the running daemon from elsewhere. On stdout, the JSON a person
//! pastes into VS Code's settings.json (`chat.remoteAgentHostsEnabled` and the
//! `chat.remoteAgentHosts` entry); on stderr, the web window's address and the URL VS Code's "Add
//! Remote Agent Host" takes, each with the token.

use std::process::ExitCode;

use serde_json::{json, Value};

use super::remote::{self as client, Target};
use super::say;
use crate::cli::ClientArgs;

/// Runs `ahpd connect`.
pub async fn run(args: &ClientArgs) -> ExitCode {
    client::run(args, |target| async move {
        eprintln!("Web window:  {}", crate::web::page_url(&target.url, target.token.as_deref()));
        eprintln!("VS Code, Add Remote Agent Host:  {}", target.url_with_token());
        eprintln!("Or add this to VS Code's settings.json:");
        say(&serde_json::to_string_pretty(&settings(&target)).map_err(|e| e.to_string())?);
        Ok(ExitCode::SUCCESS)
    })
    .await
}

/// The settings VS Code reads: the address without a scheme for plain `ws://` (a `wss://` prefix
/// stays), the token when there is one.
pub fn settings(target: &Target) -> Value {
    let address = target.url.strip_prefix("ws://").unwrap_or(&target.url).trim_end_matches('/');
    let mut entry = json!({ "address": address, "name": "ahpd" });
    if let Some(token) = &target.token {
        entry["connectionToken"] = json!(token);
    }
    json!({ "chat.remoteAgentHostsEnabled": true, "chat.remoteAgentHosts": [entry] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_has_the_shape_vs_code_reads() {
        let plain = settings(&Target { url: "ws://127.0.0.1:9187".into(), token: None });
        assert_eq!(
            plain,
            json!({ "chat.remoteAgentHostsEnabled": true,
                    "chat.remoteAgentHosts": [{ "address": "127.0.0.1:9187", "name": "ahpd" }] })
        );
        let secure = settings(&Target { url: "wss://box:9187/".into(), token: Some("t".into()) });
        assert_eq!(secure["chat.remoteAgentHosts"][0]["address"], "wss://box:9187");
        assert_eq!(secure["chat.remoteAgentHosts"][0]["connectionToken"], "t");
    }
}
