//! The network a box reaches, as the daemon runs it: a box has no network of its own (bubblewrap's
//! `--unshare-net`), only Unix sockets in a folder of its own that lead out through here.
//!
//! - `port-<n>.sock`: a loopback port on the host the box may reach (the model API a test or a
//!   local gateway serves, the daemon's own `/ahp-mcp`), relayed byte for byte;
//! - `proxy.sock`: an HTTP proxy (`CONNECT host:port`, or a plain request in absolute form) that
//!   lets through only the hosts the person allows (`sandboxAllowHosts`); any other is asked of the
//!   person watching the session's running turn, once per host (let through for the box's life on
//!   a yes, kept out for it on a no), and answered `403` with a sentence saying why when nobody
//!   said yes.
//!
//! Inside the box `ahpd box-run` (`relay.rs`) listens on the same loopback ports and on the
//! proxy's, and forwards each connection to its socket here.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agent_runner::sync::lock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The socket of a relayed loopback port, in a box's folder.
pub fn port_socket(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!("port-{port}.sock"))
}

/// The proxy's socket, in a box's folder.
pub fn proxy_socket(dir: &Path) -> PathBuf {
    dir.join("proxy.sock")
}

/// Asks the person whether a box may reach `host:port`, which it is not allowed: `Some` of their
/// yes or no, `None` when nobody could be asked (no turn running, nobody to answer it).
pub type AskToReach = std::sync::Arc<
    dyn Fn(String, u16) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<bool>> + Send>> + Send + Sync,
>;

/// The longest request head the proxy reads.
const HEAD_LIMIT: usize = 16 * 1024;

/// A host a box may reach: `name` on `port`, or on any port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// The host name or address, lower case.
    pub host: String,
    /// The port; `None`: any.
    pub port: Option<u16>,
}

impl Allowed {
    /// `host`, `host:port`, or a URL (`http://host:port/…`), as the config and the agents' base
    /// URLs name them; `None` for what names no host.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        if let Ok(url) = url::Url::parse(text) {
            if let Some(host) = url.host_str() {
                let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
                return Some(Self { host, port: url.port_or_known_default() });
            }
        }
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host, Some(port.parse().ok()?)),
            _ => (text, None),
        };
        (!host.is_empty() && !host.contains('/')).then(|| Self { host: host.to_ascii_lowercase(), port })
    }

    /// True for a loopback host: it is relayed port by port, since a box's own loopback is not
    /// the host's.
    pub fn is_loopback(&self) -> bool {
        matches!(self.host.as_str(), "127.0.0.1" | "localhost" | "::1")
    }

    /// True when it lets `host:port` through.
    pub fn admits(&self, host: &str, port: u16) -> bool {
        self.host.eq_ignore_ascii_case(host) && self.port.is_none_or(|p| p == port)
    }
}

/// The daemon's side of one box's network, running until `cancel`.
pub struct Network {
    /// The folder of its sockets.
    pub dir: tempfile::TempDir,
    /// The loopback ports relayed.
    pub ports: Vec<u16>,
    /// Ends its tasks.
    pub cancel: CancellationToken,
}

impl Network {
    /// Binds a box's sockets and starts serving them (call inside the daemon's runtime): one per
    /// allowed loopback port, and the proxy for the rest.
    pub fn open(
        allowed: &[Allowed],
        ask: Option<AskToReach>,
        tracker: &TaskTracker,
        cancel: CancellationToken,
    ) -> std::io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("ahpd-box-").tempdir()?;
        let mut ports: Vec<u16> = allowed.iter().filter(|a| a.is_loopback()).filter_map(|a| a.port).collect();
        ports.sort_unstable();
        ports.dedup();
        for port in &ports {
            let listener = UnixListener::bind(port_socket(dir.path(), *port))?;
            let port = *port;
            let cancel = cancel.clone();
            tracker.spawn(serve(listener, cancel, move |stream| relay_port(stream, port)));
        }
        // The proxy lets the relayed ports through too, for a program that sends even loopback
        // requests to its proxy; and a host the person allowed when asked, for the box's life.
        let gate = Arc::new(Gate::new(allowed.to_vec(), ask));
        let listener = UnixListener::bind(proxy_socket(dir.path()))?;
        tracker.spawn(serve(listener, cancel.clone(), move |stream| proxy(stream, gate.clone())));
        Ok(Self { dir, ports, cancel })
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Accepts connections on `listener` until `cancel`, each handled in a task of its own.
async fn serve<F, Fut>(listener: UnixListener, cancel: CancellationToken, handle: F)
where
    F: Fn(UnixStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let connection = handle(stream);
                    let cancel = cancel.clone();
                    tokio::spawn(async move {
                        tokio::select! {
                            () = cancel.cancelled() => {}
                            () = connection => {}
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("a box's network socket failed: {e}");
                    return;
                }
            },
        }
    }
}

/// Relays a connection to the host's loopback `port`.
async fn relay_port(mut inside: UnixStream, port: u16) {
    match TcpStream::connect(("127.0.0.1", port)).await {
        Ok(mut outside) => {
            let _ = tokio::io::copy_bidirectional(&mut inside, &mut outside).await;
        }
        Err(e) => tracing::debug!(port, "a box's connection to 127.0.0.1:{port} failed: {e}"),
    }
}

/// What a request head asks the proxy for.
#[derive(Debug, PartialEq, Eq)]
struct Asked {
    host: String,
    port: u16,
    /// `CONNECT`: a tunnel; else a plain request, forwarded with its head.
    tunnel: bool,
}

/// Reads the host and port a proxy request's head names.
fn asked(head: &str) -> Option<Asked> {
    let line = head.lines().next()?;
    let mut words = line.split_whitespace();
    let method = words.next()?;
    let target = words.next()?;
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = target.rsplit_once(':')?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        return Some(Asked { host: host.to_ascii_lowercase(), port: port.parse().ok()?, tunnel: true });
    }
    let url = url::Url::parse(target).ok()?;
    Some(Asked { host: url.host_str()?.to_ascii_lowercase(), port: url.port_or_known_default()?, tunnel: false })
}

/// The proxy's answer to a host it does not let through.
pub fn refusal(host: &str, port: u16) -> String {
    format!(
        "ahpd: {host}:{port} is not among the hosts this sandboxed session may reach; the person can allow it in sandboxAllowHosts."
    )
}

/// The proxy's answer to a host the person, asked, did not let through.
pub fn refused_by_the_person(host: &str, port: u16) -> String {
    format!(
        "ahpd: {host}:{port} is not among the hosts this sandboxed session may reach, and the person did not allow it when asked."
    )
}

/// What the proxy lets through: the hosts allowed, and whom to ask about any other.
struct Gate {
    allowed: Mutex<Vec<Allowed>>,
    /// The hosts the person said no to: not asked about again for the box's life (an agent's own
    /// update checks would ask at every try).
    refused: Mutex<HashSet<(String, u16)>>,
    ask: Option<AskToReach>,
    /// One question at a time: a connection to a host being asked about waits for that answer.
    asking: tokio::sync::Mutex<()>,
}

impl Gate {
    fn new(allowed: Vec<Allowed>, ask: Option<AskToReach>) -> Self {
        Self { allowed: Mutex::new(allowed), refused: Mutex::default(), ask, asking: tokio::sync::Mutex::new(()) }
    }

    /// What is decided of `host:port` already: allowed, or refused by the person.
    fn decided(&self, host: &str, port: u16) -> Option<Result<(), String>> {
        if lock(&self.allowed).iter().any(|a| a.admits(host, port)) {
            return Some(Ok(()));
        }
        lock(&self.refused).contains(&(host.to_owned(), port)).then(|| Err(refused_by_the_person(host, port)))
    }

    /// Whether `host:port` is let through: allowed, or allowed by the person when asked (then for
    /// the rest of the box's life); else the sentence the box is answered.
    async fn admits(&self, host: &str, port: u16) -> Result<(), String> {
        if let Some(decided) = self.decided(host, port) {
            return decided;
        }
        let Some(ask) = &self.ask else { return Err(refusal(host, port)) };
        let _one_question = self.asking.lock().await;
        if let Some(decided) = self.decided(host, port) {
            return decided;
        }
        match ask(host.to_owned(), port).await {
            Some(true) => {
                lock(&self.allowed).push(Allowed { host: host.to_owned(), port: Some(port) });
                Ok(())
            }
            Some(false) => {
                lock(&self.refused).insert((host.to_owned(), port));
                Err(refused_by_the_person(host, port))
            }
            None => Err(refusal(host, port)),
        }
    }
}

/// One proxy connection: the head read, the host checked, then a tunnel or the request forwarded.
async fn proxy(mut inside: UnixStream, gate: Arc<Gate>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match inside.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > HEAD_LIMIT {
            let _ =
                inside.write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n").await;
            return;
        }
    }
    let Some(asked) = asked(&String::from_utf8_lossy(&head)) else {
        let _ = inside.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").await;
        return;
    };
    if let Err(body) = gate.admits(&asked.host, asked.port).await {
        tracing::info!("{body}");
        let answer = format!(
            "HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = inside.write_all(answer.as_bytes()).await;
        return;
    }
    let mut outside = match TcpStream::connect((asked.host.as_str(), asked.port)).await {
        Ok(outside) => outside,
        Err(e) => {
            let body = format!("ahpd: {}:{} could not be reached: {e}", asked.host, asked.port);
            let answer = format!("HTTP/1.1 502 Bad Gateway\r\ncontent-length: {}\r\n\r\n{body}", body.len());
            let _ = inside.write_all(answer.as_bytes()).await;
            return;
        }
    };
    let sent = if asked.tunnel {
        inside.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await
    } else {
        outside.write_all(&head).await
    };
    if sent.is_ok() {
        let _ = tokio::io::copy_bidirectional(&mut inside, &mut outside).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_hosts_read_from_names_ports_and_urls() {
        let any = Allowed::parse("example.com").expect("a host");
        assert_eq!(any, Allowed { host: "example.com".into(), port: None });
        assert!(any.admits("EXAMPLE.com", 443));
        let api = Allowed::parse("http://127.0.0.1:4321/v1").expect("a url");
        assert_eq!(api, Allowed { host: "127.0.0.1".into(), port: Some(4321) });
        assert!(api.is_loopback());
        assert!(!api.admits("127.0.0.1", 22));
        assert_eq!(Allowed::parse("https://api.anthropic.com").and_then(|a| a.port), Some(443));
        assert_eq!(Allowed::parse("host:notaport"), None);
    }

    #[tokio::test]
    async fn a_host_not_allowed_is_asked_about_once_and_a_no_keeps_it_out() {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let said = asked.clone();
        let ask: AskToReach = Arc::new(move |host: String, port: u16| {
            said.lock().expect("not poisoned").push(format!("{host}:{port}"));
            Box::pin(async move {
                match host.as_str() {
                    "yes.example" => Some(true),
                    "no.example" => Some(false),
                    _ => None,
                }
            })
        });
        let allowed = vec![Allowed { host: "api.example".into(), port: Some(443) }];
        let gate = Gate::new(allowed.clone(), Some(ask));
        assert_eq!(gate.admits("api.example", 443).await, Ok(()));
        assert_eq!(gate.admits("yes.example", 443).await, Ok(()));
        assert_eq!(gate.admits("yes.example", 443).await, Ok(()), "allowed for the box's life");
        let no = Err(refused_by_the_person("no.example", 80));
        assert_eq!(gate.admits("no.example", 80).await, no);
        assert_eq!(gate.admits("no.example", 80).await, no, "not asked again");
        let nobody = Err(refusal("nobody.example", 80));
        assert_eq!(gate.admits("nobody.example", 80).await, nobody);
        assert_eq!(gate.admits("nobody.example", 80).await, nobody, "asked again: nobody said no");
        let asked = asked.lock().expect("not poisoned").clone();
        assert_eq!(asked, ["yes.example:443", "no.example:80", "nobody.example:80", "nobody.example:80"]);
        let unasked = Gate::new(allowed, None);
        assert_eq!(unasked.admits("no.example", 80).await, Err(refusal("no.example", 80)));
    }

    #[test]
    fn a_proxy_request_names_its_host() {
        let tunnel = asked("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n");
        assert_eq!(tunnel, Some(Asked { host: "example.com".into(), port: 443, tunnel: true }));
        let plain = asked("GET http://Example.org/x HTTP/1.1\r\n\r\n");
        assert_eq!(plain, Some(Asked { host: "example.org".into(), port: 80, tunnel: false }));
        assert_eq!(asked("GET /relative HTTP/1.1\r\n\r\n"), None);
    }
}
