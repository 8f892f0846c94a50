//! `remotes.<name>` in the config: how each remote host is reached (a command speaking AHP on its
//! stdio, typically `ssh devbox ahpd --stdio`, or a `ws://`/`wss://` URL with a token file) and
//! the name its agents and sessions are shown under.

use std::path::PathBuf;

use serde_json::Value;

/// One remote host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSpec {
    /// Its name: `echo@<name>` is its echo agent here.
    pub name: String,
    /// What a person reads (`displayName`, else the name).
    pub display_name: String,
    /// How it is reached.
    pub reach: Reach,
}

/// How a remote host is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// A program that speaks AHP on its stdin and stdout, one message per line.
    Command(Vec<String>),
    /// A WebSocket, with the remote's connection token read from a file (none: no token).
    Url { url: String, token_file: Option<PathBuf> },
}

impl Reach {
    /// How it is reached, for `ahpd status`, `ahpd agents` and the log (never a token).
    pub fn describe(&self) -> String {
        match self {
            Reach::Command(argv) => argv.join(" "),
            Reach::Url { url, .. } => url.clone(),
        }
    }
}

/// What the check says a value must be ("`remotes` must be …").
pub const MUST_BE: &str = "an object of remote hosts by name ([a-z0-9-]), each {\"command\": [program, args…] or \"a shell command\"} or {\"url\": \"ws://…\" or \"wss://…\", \"tokenFile\"?: path}, with an optional \"displayName\"";

/// Reads `remotes` (null or absent: none).
pub fn parse(value: &Value) -> Result<Vec<RemoteSpec>, String> {
    let Some(entries) = value.as_object() else {
        return if value.is_null() { Ok(Vec::new()) } else { Err("remotes must be an object".into()) };
    };
    entries.iter().map(|(name, entry)| one(name, entry)).collect()
}

fn one(name: &str, entry: &Value) -> Result<RemoteSpec, String> {
    let named = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-');
    if !named {
        return Err(format!("remotes.{name}: a remote's name is lower-case letters, digits and '-'"));
    }
    let display_name = entry.get("displayName").and_then(Value::as_str).unwrap_or(name).to_owned();
    let reach = match (entry.get("command"), entry.get("url")) {
        (Some(command), None) => Reach::Command(command_argv(name, command)?),
        (None, Some(url)) => {
            let url = url.as_str().filter(|u| u.starts_with("ws://") || u.starts_with("wss://"));
            let url = url.ok_or_else(|| format!("remotes.{name}.url must be a ws:// or wss:// URL"))?.to_owned();
            let token_file = match entry.get("tokenFile") {
                None | Some(Value::Null) => None,
                Some(Value::String(path)) if !path.is_empty() => Some(PathBuf::from(path)),
                Some(_) => return Err(format!("remotes.{name}.tokenFile must be a path")),
            };
            Reach::Url { url, token_file }
        }
        _ => return Err(format!("remotes.{name} needs either \"command\" or \"url\", not both")),
    };
    Ok(RemoteSpec { name: name.to_owned(), display_name, reach })
}

/// A command as argv: a list as it is, one string run by `sh -c`.
fn command_argv(name: &str, command: &Value) -> Result<Vec<String>, String> {
    let argv: Option<Vec<String>> = match command {
        Value::String(line) if !line.trim().is_empty() => Some(vec!["sh".into(), "-c".into(), line.clone()]),
        Value::Array(items) => items.iter().map(|v| v.as_str().map(str::to_owned)).collect(),
        _ => None,
    };
    argv.filter(|a| !a.is_empty() && !a[0].is_empty())
        .ok_or_else(|| format!("remotes.{name}.command must be a list of strings or one command line"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_both_forms_and_refuses_the_rest() {
        let specs = parse(&json!({
            "devbox": {"command": ["ssh", "devbox", "ahpd", "--stdio"]},
            "vm": {"url": "ws://10.0.0.5:9187/", "tokenFile": "/t", "displayName": "The VM"},
            "line": {"command": "ssh box ahpd --stdio"}
        }))
        .expect("both forms read");
        assert_eq!(
            specs[0].reach,
            Reach::Command(vec!["ssh".into(), "devbox".into(), "ahpd".into(), "--stdio".into()])
        );
        assert_eq!(specs[1].display_name, "The VM");
        assert_eq!(specs[1].reach, Reach::Url { url: "ws://10.0.0.5:9187/".into(), token_file: Some("/t".into()) });
        assert_eq!(specs[2].reach.describe(), "sh -c ssh box ahpd --stdio");
        assert!(parse(&json!({"Dev": {"command": ["x"]}})).is_err());
        assert!(parse(&json!({"a": {"url": "http://x"}})).is_err());
        assert!(parse(&json!({"a": {}})).is_err());
        assert!(parse(&json!({"a": {"command": []}})).is_err());
        assert!(parse(&Value::Null).expect("none").is_empty());
    }
}
