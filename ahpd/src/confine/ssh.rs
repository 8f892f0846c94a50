//! An engine on another machine, reached over SSH as the docker CLI reaches one: each connection
//! is `ssh [-p PORT] [-l USER] HOST docker system dial-stdio`, the engine's API spoken over its
//! stdio. The `ssh` is a child of this process like any other (its own group, killed with its
//! guard and reaped when the connection is dropped, its stderr in the log); when this process is
//! killed instead (an `ahpd box-exec` killed with its session's program), its stdin closes, and
//! `ssh -T` ends at that end of input. No control master is started, so nothing is left running on
//! this machine after a connection, a `kill -9` included.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use agent_runner::child::{Child, ChildCommand};
use bollard::{BollardRequest, ClientVersion, Docker};
use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::process::{ChildStdin, ChildStdout};

/// A client for the engine at `url` (`ssh://[user@]host[:port]`), `timeout` seconds a request.
pub fn connect(url: &str, timeout: u64, version: &ClientVersion) -> Result<Docker, bollard::errors::Error> {
    let client = Client::builder(TokioExecutor::new()).build(SshConnector);
    let transport = move |request: BollardRequest| {
        let client = client.clone();
        async move { client.request(request).await.map_err(bollard::errors::Error::from) }
    };
    Docker::connect_with_custom_transport(transport, Some(url), timeout, version)
}

/// The `ssh` command line for `authority` (`[user@]host[:port]`): never asking for a password
/// (a daemon has nobody to type it), no terminal.
fn ssh_args(authority: &str) -> Result<Vec<String>, String> {
    let (user, host_port) = match authority.rsplit_once('@') {
        Some((user, rest)) => (Some(user), rest),
        None => (None, authority),
    };
    let (host, port) = match host_port.strip_prefix('[') {
        // An IPv6 address: `[::1]:22`.
        Some(rest) => {
            let (host, after) =
                rest.split_once(']').ok_or_else(|| format!("{authority} opens a [ it does not close"))?;
            (host, after.strip_prefix(':'))
        }
        None => match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        },
    };
    let port = port.map(|p| p.parse::<u16>().map_err(|_| format!("{p} is not a port"))).transpose()?;
    if host.is_empty() || host.starts_with('-') {
        return Err(format!("{authority} names no host ssh can reach"));
    }
    let mut args = vec!["-o".to_owned(), "BatchMode=yes".to_owned(), "-T".to_owned()];
    if let Some(port) = port {
        args.extend(["-p".to_owned(), port.to_string()]);
    }
    if let Some(user) = user {
        args.extend(["-l".to_owned(), user.to_owned()]);
    }
    args.extend(["--".to_owned(), host.to_owned(), "docker".into(), "system".into(), "dial-stdio".into()]);
    Ok(args)
}

/// Makes each connection an `ssh` of its own.
#[derive(Clone)]
struct SshConnector;

impl tower_service::Service<Uri> for SshConnector {
    type Response = SshStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<SshStream, io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, destination: Uri) -> Self::Future {
        Box::pin(async move {
            let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
            let authority = destination.authority().ok_or_else(|| invalid(format!("{destination} names no host")))?;
            let args = ssh_args(authority.as_str()).map_err(invalid)?;
            let (child, mut pipes) = ChildCommand::new("ssh")
                .args(&args)
                .log_stderr("ssh", tracing::Level::WARN)
                .spawn()
                .map_err(|e| io::Error::other(format!("ssh could not be started: {e}")))?;
            let stdin = pipes.take_stdin().map_err(|e| io::Error::other(e.to_string()))?;
            let stdout = pipes.stdout;
            Ok(SshStream(TokioIo::new(SshPipes { _child: child, stdin: Some(stdin), stdout })))
        })
    }
}

/// One `ssh`'s stdio as a byte stream; the `ssh` goes with it.
struct SshPipes {
    _child: Child,
    stdin: Option<ChildStdin>,
    stdout: ChildStdout,
}

impl AsyncRead for SshPipes {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stdout).poll_read(cx, buf)
    }
}

impl SshPipes {
    fn stdin(&mut self) -> io::Result<Pin<&mut ChildStdin>> {
        self.stdin.as_mut().map(Pin::new).ok_or_else(|| io::ErrorKind::BrokenPipe.into())
    }
}

impl AsyncWrite for SshPipes {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().stdin()?.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().stdin()?.poll_flush(cx)
    }

    /// Closes `ssh`'s stdin: the engine sees the end of what was sent.
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().stdin.take();
        Poll::Ready(Ok(()))
    }
}

/// What the client reads and writes a connection through.
struct SshStream(TokioIo<SshPipes>);

impl hyper::rt::Read for SshStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for SshStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

impl Connection for SshStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_becomes_the_ssh_the_docker_cli_would_run() {
        let tail = ["--", "box", "docker", "system", "dial-stdio"];
        let args = ssh_args("ana@box:2222").expect("an address");
        assert_eq!(args[..7], ["-o", "BatchMode=yes", "-T", "-p", "2222", "-l", "ana"]);
        assert_eq!(args[7..], tail);
        assert_eq!(ssh_args("box").expect("a host")[3..], tail);
        assert!(ssh_args("ana@box:notaport").is_err());
        assert!(ssh_args("-oProxyCommand=x").is_err(), "no option smuggled in as a host");
        assert_eq!(ssh_args("[::1]:22").expect("an IPv6 address")[3..6], ["-p", "22", "--"]);
    }
}
