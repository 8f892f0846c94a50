//! The client's half of ACP that the host really serves: `fs/read_text_file` and
//! `fs/write_text_file` inside the session's folders only, and `terminal/*` running real
//! processes this worker owns. Every request and answer is the `agent-client-protocol` schema's
//! type; [`serve`] is the one place a client method's name picks its handler.

use std::collections::{HashMap, VecDeque};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol_schema::v1 as acp;
use agent_client_protocol_schema::v1::CLIENT_METHOD_NAMES;
use nix::sys::signal::Signal;
use protocol::{codes, RpcError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use agent_runner::child::{signal_name, Child, ChildCommand};
use agent_runner::lock;

fn invalid(message: impl Into<String>) -> RpcError {
    RpcError::new(codes::INVALID_PARAMS, message)
}

/// Why a path an agent named is refused, in the words the agent is answered with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathRefused {
    /// ACP paths are absolute.
    #[error("{0} is not an absolute path; ACP paths are absolute")]
    NotAbsolute(String),
    /// The path leads out of every folder of the session.
    #[error("{path} is outside this session's folders ({roots}); ahpd reads and writes files only inside them")]
    Outside {
        /// The path as named.
        path: String,
        /// The session's folders, joined.
        roots: String,
    },
}

fn failed(message: impl Into<String>) -> RpcError {
    RpcError::new(codes::INTERNAL_ERROR, message)
}

/// Runs `handler` on `params` read as the method's request type, and writes its answer.
async fn typed<Req, Res, Fut>(method: &str, params: Value, handler: impl FnOnce(Req) -> Fut) -> Result<Value, RpcError>
where
    Req: DeserializeOwned,
    Res: Serialize,
    Fut: std::future::Future<Output = Result<Res, RpcError>>,
{
    let request = serde_json::from_value(params).map_err(|e| invalid(format!("{method}: {e}")))?;
    let answer = handler(request).await?;
    serde_json::to_value(answer).map_err(|e| failed(format!("{method}: {e}")))
}

/// Answers one client method other than `session/request_permission`: `fs/*` in the session's
/// folders, `terminal/*` as real processes, anything else "method not found".
pub async fn serve(folders: &Folders, terminals: &Terminals, method: &str, params: Value) -> Result<Value, RpcError> {
    let names = &CLIENT_METHOD_NAMES;
    if method == names.fs_read_text_file {
        typed(method, params, |r| folders.read_text_file(r)).await
    } else if method == names.fs_write_text_file {
        typed(method, params, |r| folders.write_text_file(r)).await
    } else {
        terminals.handle(method, params).await
    }
}

/// The folders a session may reach: its working directory first, then the others it was given.
#[derive(Debug, Clone)]
pub struct Folders {
    roots: Vec<PathBuf>,
}

/// Removes `.` and folds `..` without touching the disk.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The real path of `path`, following links as far as the disk has it and appending what does
/// not exist yet, so a link inside a folder that points out of it is seen for what it is.
fn real(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(found) = existing.canonicalize() {
            let mut out = found;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (existing.file_name().map(|n| n.to_owned()), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

impl Folders {
    /// The session's folders; the first is where relative things happen.
    pub fn new(roots: Vec<PathBuf>) -> Self {
        Self { roots: roots.iter().map(|r| real(&normalize(r))).collect() }
    }

    /// The working directory.
    pub fn cwd(&self) -> Option<&Path> {
        self.roots.first().map(PathBuf::as_path)
    }

    /// `raw` as a path inside one of the folders, or why it is refused.
    pub fn inside(&self, raw: &str) -> Result<PathBuf, PathRefused> {
        let path = Path::new(raw);
        if !path.is_absolute() {
            return Err(PathRefused::NotAbsolute(raw.to_owned()));
        }
        let resolved = real(&normalize(path));
        if self.roots.iter().any(|root| resolved.starts_with(root)) {
            Ok(resolved)
        } else {
            let roots: Vec<String> = self.roots.iter().map(|r| r.display().to_string()).collect();
            Err(PathRefused::Outside { path: raw.to_owned(), roots: roots.join(", ") })
        }
    }

    /// `fs/read_text_file`: the file, or the lines asked for.
    pub async fn read_text_file(&self, read: acp::ReadTextFileRequest) -> Result<acp::ReadTextFileResponse, RpcError> {
        let named = read.path.display().to_string();
        let path = self.inside(&named).map_err(|e| invalid(e.to_string()))?;
        let text = tokio::fs::read_to_string(&path).await.map_err(|e| failed(format!("{named}: {e}")))?;
        let content = match (read.line, read.limit) {
            (None, None) => text,
            (line, limit) => {
                let skip = usize::try_from(line.unwrap_or(1).saturating_sub(1)).unwrap_or(usize::MAX);
                let take = limit.and_then(|l| usize::try_from(l).ok()).unwrap_or(usize::MAX);
                text.split_inclusive('\n').skip(skip).take(take).collect()
            }
        };
        Ok(acp::ReadTextFileResponse::new(content))
    }

    /// `fs/write_text_file`, creating the folders on the way.
    pub async fn write_text_file(
        &self,
        write: acp::WriteTextFileRequest,
    ) -> Result<acp::WriteTextFileResponse, RpcError> {
        let named = write.path.display().to_string();
        let path = self.inside(&named).map_err(|e| invalid(e.to_string()))?;
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(|e| failed(format!("{named}: {e}")))?;
        }
        tokio::fs::write(&path, write.content).await.map_err(|e| failed(format!("{named}: {e}")))?;
        Ok(acp::WriteTextFileResponse::new())
    }
}

/// How a terminal's command ended.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Exit {
    code: Option<i32>,
    signal: Option<i32>,
}

impl Exit {
    fn to_acp(self) -> acp::TerminalExitStatus {
        acp::TerminalExitStatus::new()
            .exit_code(self.code.and_then(|c| u32::try_from(c).ok()))
            .signal(self.signal.map(signal_name))
    }
}

/// What a terminal printed: its last `limit` bytes.
struct Output {
    bytes: Vec<u8>,
    truncated: bool,
    limit: usize,
}

impl Output {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > self.limit {
            let mut cut = self.bytes.len() - self.limit;
            // Cut at a character boundary: never start the output inside a UTF-8 sequence.
            while cut < self.bytes.len() && (self.bytes[cut] & 0b1100_0000) == 0b1000_0000 {
                cut += 1;
            }
            self.bytes.drain(..cut);
            self.truncated = true;
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

struct Terminal {
    process: Child,
    output: Arc<Mutex<Output>>,
    readers_done: Arc<tokio::sync::Notify>,
    readers_left: Arc<std::sync::atomic::AtomicUsize>,
}

impl Terminal {
    fn exit(&self) -> Option<Exit> {
        use std::os::unix::process::ExitStatusExt;
        self.process.status().map(|s| Exit { code: s.code(), signal: s.signal() })
    }

    /// Waits until the command ended and everything it printed was read.
    async fn finished(&self) -> Exit {
        self.process.wait().await;
        while self.readers_left.load(Ordering::Acquire) > 0 {
            let notified = self.readers_done.notified();
            if self.readers_left.load(Ordering::Acquire) == 0 {
                break;
            }
            notified.await;
        }
        self.exit().unwrap_or(Exit { code: None, signal: None })
    }
}

/// How many released terminals' outputs are kept for the tool calls that name them.
const KEPT_OUTPUTS: usize = 32;

/// The terminals one session's agent opened.
pub struct Terminals {
    folders: Arc<Folders>,
    open: Mutex<HashMap<String, Arc<Terminal>>>,
    released: Mutex<VecDeque<(String, String)>>,
    next: AtomicU64,
    tracker: TaskTracker,
    cancel: CancellationToken,
    /// The session's box: every command starts through its launcher.
    confined: Option<protocol::Confined>,
}

/// The default for `outputByteLimit` when the agent gives none.
const DEFAULT_OUTPUT_LIMIT: usize = 1024 * 1024;

impl Terminals {
    /// Terminals for a session in `folders`, their tasks on `tracker`, stopped at `cancel`.
    pub fn new(folders: Arc<Folders>, tracker: TaskTracker, cancel: CancellationToken) -> Self {
        Self {
            folders,
            open: Mutex::new(HashMap::new()),
            released: Mutex::new(VecDeque::new()),
            next: AtomicU64::new(1),
            tracker,
            cancel,
            confined: None,
        }
    }

    /// The same, each command started through the session's box (`Start.confined`).
    pub fn confined(mut self, confined: Option<protocol::Confined>) -> Self {
        self.confined = confined;
        self
    }

    fn get(&self, id: &acp::TerminalId) -> Result<Arc<Terminal>, RpcError> {
        lock(&self.open).get(&*id.0).cloned().ok_or_else(|| invalid(format!("there is no terminal {id}")))
    }

    /// Answers one `terminal/*` request.
    pub async fn handle(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let names = &CLIENT_METHOD_NAMES;
        if method == names.terminal_create {
            typed(method, params, |r| async { self.create(r) }).await
        } else if method == names.terminal_output {
            typed(method, params, |r| async { self.output(r) }).await
        } else if method == names.terminal_wait_for_exit {
            typed(method, params, |r| self.wait_for_exit(r)).await
        } else if method == names.terminal_kill {
            typed(method, params, |r| async { self.kill(r) }).await
        } else if method == names.terminal_release {
            typed(method, params, |r| async { self.release(r) }).await
        } else {
            Err(RpcError::new(codes::METHOD_NOT_FOUND, format!("this client does not answer {method}")))
        }
    }

    fn output(&self, request: acp::TerminalOutputRequest) -> Result<acp::TerminalOutputResponse, RpcError> {
        let terminal = self.get(&request.terminal_id)?;
        let exit = terminal.exit();
        let output = lock(&terminal.output);
        Ok(acp::TerminalOutputResponse::new(output.text(), output.truncated).exit_status(exit.map(Exit::to_acp)))
    }

    async fn wait_for_exit(
        &self,
        request: acp::WaitForTerminalExitRequest,
    ) -> Result<acp::WaitForTerminalExitResponse, RpcError> {
        let terminal = self.get(&request.terminal_id)?;
        tokio::select! {
            exit = terminal.finished() => Ok(acp::WaitForTerminalExitResponse::new(exit.to_acp())),
            _ = self.cancel.cancelled() => Err(failed("the session closed")),
        }
    }

    fn kill(&self, request: acp::KillTerminalRequest) -> Result<acp::KillTerminalResponse, RpcError> {
        self.get(&request.terminal_id)?.process.signal(Signal::SIGKILL);
        Ok(acp::KillTerminalResponse::new())
    }

    fn release(&self, request: acp::ReleaseTerminalRequest) -> Result<acp::ReleaseTerminalResponse, RpcError> {
        let id = request.terminal_id.0.to_string();
        let terminal = lock(&self.open).remove(&id).ok_or_else(|| invalid(format!("there is no terminal {id}")))?;
        terminal.process.signal(Signal::SIGKILL);
        let text = lock(&terminal.output).text();
        let mut released = lock(&self.released);
        released.push_back((id, text));
        while released.len() > KEPT_OUTPUTS {
            released.pop_front();
        }
        Ok(acp::ReleaseTerminalResponse::new())
    }

    /// What a terminal printed (open or released), for the tool call that shows it.
    pub fn output_of(&self, id: &str) -> Option<String> {
        if let Some(terminal) = lock(&self.open).get(id) {
            return Some(lock(&terminal.output).text());
        }
        lock(&self.released).iter().rev().find(|(kept, _)| kept == id).map(|(_, text)| text.clone())
    }

    fn create(&self, create: acp::CreateTerminalRequest) -> Result<acp::CreateTerminalResponse, RpcError> {
        let cwd = match &create.cwd {
            Some(cwd) => self.folders.inside(&cwd.display().to_string()).map_err(|e| invalid(e.to_string()))?,
            None => self
                .folders
                .cwd()
                .map(Path::to_path_buf)
                .ok_or_else(|| invalid("this session has no folder to run in"))?,
        };
        // A command with no args may be a whole shell line (claude-code-acp sends its Bash
        // command that way): the shell reads it, in the session's folder.
        let (program, args) = if create.args.is_empty() {
            ("sh".to_owned(), vec!["-c".to_owned(), create.command.clone()])
        } else {
            (create.command.clone(), create.args)
        };
        // What the command leaves running when it ends (a background job) ends with it.
        let (process, pipes) = ChildCommand::new(&program)
            .args(&args)
            .envs(create.env.into_iter().map(|v| (v.name, v.value)))
            .cwd(&cwd)
            .stdin_null()
            .stderr_to_caller()
            .end_group_with_leader()
            .confined(self.confined.as_ref())
            .spawn()
            .map_err(|e| failed(e.to_string()))?;
        let limit = create.output_byte_limit.and_then(|l| usize::try_from(l).ok()).unwrap_or(DEFAULT_OUTPUT_LIMIT);
        let output = Arc::new(Mutex::new(Output { bytes: Vec::new(), truncated: false, limit }));
        let readers_done = Arc::new(tokio::sync::Notify::new());
        let readers_left = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut streams: Vec<Box<dyn tokio::io::AsyncRead + Unpin + Send>> = vec![Box::new(pipes.stdout)];
        if let Some(stderr) = pipes.stderr {
            streams.push(Box::new(stderr));
        }
        for mut stream in streams {
            readers_left.fetch_add(1, Ordering::AcqRel);
            let (output, done, left, cancel) =
                (output.clone(), readers_done.clone(), readers_left.clone(), self.cancel.clone());
            self.tracker.spawn(async move {
                let mut buf = [0u8; 8192];
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        read = stream.read(&mut buf) => match read {
                            Ok(0) | Err(_) => break,
                            Ok(n) => lock(&output).push(&buf[..n]),
                        },
                    }
                }
                left.fetch_sub(1, Ordering::AcqRel);
                done.notify_waiters();
            });
        }
        let id = format!("term-{}", self.next.fetch_add(1, Ordering::Relaxed));
        lock(&self.open).insert(id.clone(), Arc::new(Terminal { process, output, readers_done, readers_left }));
        Ok(acp::CreateTerminalResponse::new(id))
    }

    /// Kills every command still running (the session is closing).
    pub fn kill_all(&self) {
        for terminal in lock(&self.open).drain().map(|(_, t)| t) {
            terminal.process.signal(Signal::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("agent-acp-client-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch");
        dir
    }

    #[test]
    fn paths_stay_inside_the_folders() {
        let dir = scratch("inside");
        let folders = Folders::new(vec![dir.clone()]);
        let inside = dir.join("a/b.txt");
        assert!(folders.inside(inside.to_str().expect("utf8")).is_ok());
        let escape = format!("{}/../escape.txt", dir.display());
        assert!(folders.inside(&escape).expect_err("outside").to_string().contains("outside this session's folders"));
        assert!(folders.inside("relative.txt").is_err());
        std::os::unix::fs::symlink("/etc", dir.join("link")).expect("symlink");
        assert!(folders.inside(&format!("{}/link/passwd", dir.display())).is_err());
    }

    #[test]
    fn output_keeps_its_tail_at_a_character_boundary() {
        let mut output = Output { bytes: Vec::new(), truncated: false, limit: 4 };
        output.push("aé€".as_bytes());
        assert!(output.truncated);
        assert_eq!(output.text(), "€");
    }

    #[tokio::test]
    async fn a_shell_line_runs_in_the_folder() {
        let dir = scratch("terminal");
        let folders = Arc::new(Folders::new(vec![dir.clone()]));
        let terminals = Terminals::new(folders, TaskTracker::new(), CancellationToken::new());
        let created = terminals
            .handle("terminal/create", json!({"sessionId": "s", "command": "pwd; echo oops >&2; exit 4"}))
            .await
            .expect("create");
        let id = json!({"sessionId": "s", "terminalId": created["terminalId"]});
        let exit = terminals.handle("terminal/wait_for_exit", id.clone()).await.expect("wait");
        assert_eq!(exit["exitCode"], 4);
        let output = terminals.handle("terminal/output", id.clone()).await.expect("output");
        let text = output["output"].as_str().expect("text");
        assert!(text.contains(dir.canonicalize().expect("real").to_str().expect("utf8")), "{text}");
        assert!(text.contains("oops"), "{text}");
        terminals.handle("terminal/release", id.clone()).await.expect("release");
        assert!(terminals.handle("terminal/output", id).await.is_err());
    }
}
