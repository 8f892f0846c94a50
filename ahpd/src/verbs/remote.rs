//! What the terminal-client verbs (`ahpd sessions|changes|send|watch|connect`) share: finding the running
//! daemon (its record, as the other verbs do, or `--url`), the token to present to it (one
//! function, [`token`]), and a connection through the official `ahp` client over `ahp-ws`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ahp::{Client, ClientConfig, ClientEventStream};
use ahp_types::commands::InitializeResult;
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::Value;

use crate::cli::ClientArgs;
use crate::control::Record;
use crate::paths::Paths;

/// How long one request may take before the verb gives up on the daemon.
const REQUEST_WITHIN: Duration = Duration::from_secs(30);

/// A daemon to talk to: where it listens and the token it wants.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its `ws://` URL, without a token.
    pub url: String,
    /// The token to present, when there is one.
    pub token: Option<String>,
}

impl Target {
    /// The URL with the token in it, as `ahp-ws` and VS Code take it.
    pub fn url_with_token(&self) -> String {
        match &self.token {
            Some(token) => {
                format!("{}/?tkn={}", self.url.trim_end_matches('/'), crate::web::percent_encode(token))
            }
            None => self.url.clone(),
        }
    }
}

/// Where the daemon is and which token it wants: `--url`, else the running daemon's record.
pub async fn target(args: &ClientArgs, paths: &Paths) -> Result<Target, String> {
    let record = running(paths)?;
    let url = match (&args.url, &record) {
        (Some(url), _) => url.trim_end_matches('/').to_owned(),
        (None, Some(record)) => record.url.clone(),
        (None, None) => return Err("None running. Start one with ahpd start, or name one with --url.".into()),
    };
    // A `--url` naming this data folder's own daemon finds its token as if none were given.
    let record = record.filter(|r| args.url.is_none() || same_daemon(&url, &r.url));
    Ok(Target { url, token: token(args, paths, record.as_ref()).await? })
}

/// Whether two `ws://` URLs reach the same listener: the same scheme and port, and the same host,
/// the loopback names (`localhost`, `127.0.0.1`, `[::1]`) counting as one.
fn same_daemon(given: &str, recorded: &str) -> bool {
    let (Ok(given), Ok(recorded)) = (url::Url::parse(given), url::Url::parse(recorded)) else {
        return false;
    };
    let host = |u: &url::Url| match u.host() {
        Some(url::Host::Domain(name)) if name.eq_ignore_ascii_case("localhost") => "loopback".to_owned(),
        Some(url::Host::Ipv4(ip)) if ip.is_loopback() => "loopback".to_owned(),
        Some(url::Host::Ipv6(ip)) if ip.is_loopback() => "loopback".to_owned(),
        other => other.map(|h| h.to_string().to_ascii_lowercase()).unwrap_or_default(),
    };
    given.scheme() == recorded.scheme()
        && given.port_or_known_default() == recorded.port_or_known_default()
        && host(&given) == host(&recorded)
}

/// The daemon running on this data folder: its record, when it names a live process and the URL it
/// listens on (a record left by one that is gone is none).
pub fn running(paths: &Paths) -> Result<Option<Record>, String> {
    let record = Record::read(&paths.record()).map_err(|e| e.to_string())?;
    Ok(record.filter(|r| crate::control::process::alive(r.pid) && !r.url.is_empty()))
}

/// The token to present, looked up in one place, first found wins:
/// 1. `--token`, then `--token-file`;
/// 2. `$AHPD_TOKEN`;
/// 3. the running daemon's answer on its control socket (the owner's alone, as its token file is),
///    whichever way it was given its token;
/// 4. when it does not answer: the file its record says its token is kept in (the one it made in
///    its data folder, or its `--connection-token-file`);
/// 5. `--connection-token-file` on its line (a file relative to the folder it started in); a token
///    given on its line is not written down, so that one must be passed again;
/// 6. the config files it reads (`connectionToken`, `connectionTokenFile`), its `--config-file`
///    when it had one;
/// 7. the token kept in the data folder (`crate::token::for_clients`).
///
/// A daemon with no token needs none: `None`.
pub async fn token(args: &ClientArgs, paths: &Paths, record: Option<&Record>) -> Result<Option<String>, String> {
    if let Some(token) = &args.token {
        return Ok(Some(token.clone()));
    }
    if let Some(file) = &args.token_file {
        return read_token(file).map(Some);
    }
    if let Some(token) = std::env::var("AHPD_TOKEN").ok().filter(|t| !t.trim().is_empty()) {
        return Ok(Some(token.trim().to_owned()));
    }
    let Some(record) = record else {
        return Ok(None);
    };
    if let Ok(reply) = super::ask(paths, &crate::control::Request::Token).await {
        if reply.ok {
            return Ok(reply.token);
        }
    }
    if let Some(file) = &record.token_file {
        return read_token(file).map(Some);
    }
    let line = DaemonLine::parse(&record.argv);
    if line.token.is_some() {
        return Err(
            "The daemon was given its token on its command line, which is not written down; pass it with --token or --token-file."
                .into(),
        );
    }
    if let Some(file) = line.token_file {
        return read_token(&record.cwd.join(file)).map(Some);
    }
    let config_file = line.config_file.map(|f| record.cwd.join(f));
    let config = crate::config::Config::load(&paths.config_dir, config_file.as_deref()).map_err(|e| e.to_string())?;
    if let Some(token) = config.string("connectionToken") {
        return Ok(Some(token));
    }
    if let Some(file) = config.string("connectionTokenFile") {
        return read_token(&record.cwd.join(file)).map(Some);
    }
    crate::token::for_clients(paths)
}

fn read_token(file: &Path) -> Result<String, String> {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("could not read the token from {}: {e}", file.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("{} is empty.", file.display()));
    }
    Ok(token.to_owned())
}

/// The token options on a daemon's command line.
#[derive(Debug, Default, PartialEq)]
struct DaemonLine {
    token: Option<String>,
    token_file: Option<PathBuf>,
    config_file: Option<PathBuf>,
}

impl DaemonLine {
    fn parse(argv: &[String]) -> Self {
        let mut line = Self::default();
        let mut words = argv.iter();
        while let Some(word) = words.next() {
            let (flag, inline) = match word.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
                _ => (word.as_str(), None),
            };
            let mut value = || inline.clone().or_else(|| words.next().cloned());
            match flag {
                "--connection-token" => line.token = value(),
                "--connection-token-file" => line.token_file = value().map(PathBuf::from),
                "--config-file" => line.config_file = value().map(PathBuf::from),
                _ => {}
            }
        }
        line
    }
}

/// A connection through the official client, past `initialize` and subscribed to the root.
pub struct Connection {
    /// The client.
    pub client: Client,
    /// Every event on every channel this client subscribed to.
    pub events: ClientEventStream,
    /// The handshake's answer (the root state is its first snapshot).
    pub init: InitializeResult,
    /// This client's id.
    pub client_id: String,
}

/// Connects to `target` and says `initialize`.
pub async fn connect(target: &Target) -> Result<Connection, String> {
    let transport = ahp_ws::WebSocketTransport::connect(&target.url_with_token()).await.map_err(|e| {
        let said = e.to_string();
        if said.contains("401") {
            format!("{} refused the token (pass --token or --token-file): {said}", target.url)
        } else {
            format!("could not connect to {}: {said}", target.url)
        }
    })?;
    let config = ClientConfig { default_request_timeout: Some(REQUEST_WITHIN), subscription_buffer: 1 << 14 };
    let client = Client::connect(transport, config).await.map_err(|e| format!("could not start the client: {e}"))?;
    let events = client.events();
    let client_id = format!("ahpd-cli-{}", uuid::Uuid::new_v4());
    let versions = vec![ahp_types::PROTOCOL_VERSION.to_owned()];
    let init = client
        .initialize(client_id.clone(), versions, vec![ROOT_RESOURCE_URI.to_owned()])
        .await
        .map_err(|e| format!("{} did not accept the handshake: {e}", target.url))?;
    Ok(Connection { client, events, init, client_id })
}

impl Connection {
    /// A raw request with a JSON answer.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, String> {
        self.client.request::<Value, Value>(method, params).await.map_err(|e| format!("{method}: {e}"))
    }

    /// Every session, as `listSessions` lists them (all pages).
    pub async fn sessions(&self) -> Result<Vec<Value>, String> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut params = serde_json::json!({ "channel": ROOT_RESOURCE_URI });
            if let Some(cursor) = &cursor {
                params["cursor"] = Value::from(cursor.clone());
            }
            let page = self.request("listSessions", params).await?;
            items.extend(page["items"].as_array().cloned().unwrap_or_default());
            match page["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return Ok(items),
            }
        }
    }
}

/// Runs a client verb: finds the daemon, runs `body`, and turns its refusal into exit code 1.
pub async fn run<F, Fut>(args: &ClientArgs, body: F) -> std::process::ExitCode
where
    F: FnOnce(Target) -> Fut,
    Fut: std::future::Future<Output = Result<std::process::ExitCode, String>>,
{
    let paths = match Paths::platform() {
        Ok(paths) => paths,
        Err(e) => return super::fail(super::EXIT_USAGE, &e.to_string()),
    };
    let target = match target(args, &paths).await {
        Ok(target) => target,
        Err(why) => return super::fail(super::EXIT_CONFLICT, &why),
    };
    match body(target).await {
        Ok(code) => code,
        Err(why) => super::fail(super::EXIT_CONFLICT, &why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn a_url_naming_the_own_daemon_by_any_loopback_name_is_the_same_daemon() {
        let recorded = "ws://127.0.0.1:8123";
        for given in ["ws://127.0.0.1:8123", "ws://127.0.0.1:8123/", "ws://localhost:8123", "ws://[::1]:8123"] {
            assert!(same_daemon(given, recorded), "{given}");
        }
        for given in ["ws://127.0.0.1:8124", "wss://127.0.0.1:8123", "ws://example.com:8123", "not a url"] {
            assert!(!same_daemon(given, recorded), "{given}");
        }
    }

    #[test]
    fn the_token_options_are_read_off_the_daemons_line() {
        assert_eq!(DaemonLine::parse(&words("--port 0")), DaemonLine::default());
        let line = DaemonLine::parse(&words("--port 9 --connection-token s3cret --config-file c.json"));
        assert_eq!(line.token.as_deref(), Some("s3cret"));
        assert_eq!(line.config_file, Some(PathBuf::from("c.json")));
        let line = DaemonLine::parse(&words("--connection-token-file=tok"));
        assert_eq!(line.token_file, Some(PathBuf::from("tok")));
    }

    #[tokio::test]
    async fn a_flag_wins_and_a_file_is_read_trimmed() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("token");
        std::fs::write(&file, "abc\n").expect("write");
        let paths = Paths { config_dir: dir.path().join("config"), data_dir: dir.path().join("data") };
        let args = ClientArgs { token_file: Some(file.clone()), ..ClientArgs::default() };
        assert_eq!(token(&args, &paths, None).await.expect("reads"), Some("abc".into()));
        let args = ClientArgs { token: Some("given".into()), token_file: Some(file), ..ClientArgs::default() };
        assert_eq!(token(&args, &paths, None).await.expect("given"), Some("given".into()));
        let record = Record {
            pid: 1,
            url: "ws://127.0.0.1:1".into(),
            started_at: String::new(),
            argv: words("--connection-token-file token"),
            cwd: dir.path().to_owned(),
            detached: false,
            version: String::new(),
            socket: dir.path().join("sock"),
            token_file: None,
            groups: Vec::new(),
        };
        if std::env::var_os("AHPD_TOKEN").is_none() {
            assert_eq!(token(&ClientArgs::default(), &paths, Some(&record)).await.expect("line"), Some("abc".into()));
            // The file the record names wins; a token given on the line was never written down.
            std::fs::write(dir.path().join("kept"), "kept\n").expect("write");
            let kept = Record { token_file: Some(dir.path().join("kept")), ..record.clone() };
            assert_eq!(token(&ClientArgs::default(), &paths, Some(&kept)).await.expect("kept"), Some("kept".into()));
            let given = Record { argv: words("--connection-token <set>"), ..record };
            let refused = token(&ClientArgs::default(), &paths, Some(&given)).await.expect_err("not written down");
            assert!(refused.contains("--token"), "{refused}");
        }
    }

    #[test]
    fn the_url_carries_the_token_encoded() {
        let target = Target { url: "ws://127.0.0.1:9".into(), token: Some("a b".into()) };
        assert_eq!(target.url_with_token(), "ws://127.0.0.1:9/?tkn=a%20b");
        assert_eq!(Target { token: None, ..target }.url_with_token(), "ws://127.0.0.1:9");
    }
}
