//! `ahpd --stdio` (or any program that speaks AHP a line a message on its stdio, as `ssh … ahpd
//! --stdio` does) as a child process, and an [`ahp::Transport`] over its stdin and stdout, so the
//! official client (and [`crate::TestClient`]) can talk through it.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use agent_runner::lock;
use ahp::{Transport, TransportError, TransportMessage};
use anyhow::{anyhow, Context};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// A child that speaks AHP on its stdio.
pub struct StdioChild {
    child: Child,
    /// Its transport, until [`StdioChild::transport`] takes it.
    transport: Option<LinesTransport>,
    /// Everything it wrote to stderr.
    pub stderr: Arc<Mutex<Vec<String>>>,
}

impl StdioChild {
    /// `ahpd --stdio` with its folders under `home` (the layout [`crate::Daemon::start_in`] uses).
    pub fn ahpd(home: &Path) -> anyhow::Result<Self> {
        Self::ahpd_with(home, &[])
    }

    /// [`StdioChild::ahpd`] with more variables in its environment.
    pub fn ahpd_with(home: &Path, env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let mut command = Command::new(crate::daemon::ahpd_bin());
        command
            .arg("--stdio")
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env("HOME", home)
            .env_remove("AHPD_CONFIG")
            .env_remove("AHPD_TOKEN")
            .envs(env.iter().copied())
            .current_dir(home);
        Self::spawn(command)
    }

    /// Runs `argv` (a program and its arguments).
    pub fn argv(argv: &[String]) -> anyhow::Result<Self> {
        let (program, args) = argv.split_first().ok_or_else(|| anyhow!("an empty command"))?;
        let mut command = Command::new(program);
        command.args(args);
        Self::spawn(command)
    }

    fn spawn(mut command: Command) -> anyhow::Result<Self> {
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn().context("spawning a stdio child")?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
        let said = Arc::new(Mutex::new(Vec::new()));
        {
            let said = said.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if std::env::var_os("AHPD_TEST_ECHO_LOG").is_some() {
                        eprintln!("[stdio] {line}");
                    }
                    lock(&said).push(line);
                }
            });
        }
        let transport = LinesTransport { stdin: Some(stdin), stdout: BufReader::new(stdout).lines() };
        Ok(Self { child, transport: Some(transport), stderr: said })
    }

    /// Its stdin and stdout as a transport (once).
    pub fn transport(&mut self) -> anyhow::Result<LinesTransport> {
        self.transport.take().ok_or_else(|| anyhow!("the transport was taken already"))
    }

    /// Its pid.
    pub fn pid(&self) -> i32 {
        self.child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0)
    }

    /// What it wrote to stderr so far, a line a line.
    pub fn said(&self) -> String {
        lock(&self.stderr).join("\n")
    }

    /// Waits until it has said a line containing `needle` on stderr (bounded by [`crate::PATIENCE`]).
    pub async fn until_said(&self, needle: &str) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + crate::PATIENCE;
        loop {
            if let Some(line) = lock(&self.stderr).iter().find(|l| l.contains(needle)).cloned() {
                return Ok(line);
            }
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!("it never said {needle:?}; it said:\n{}", self.said());
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Waits for it to exit (bounded by [`crate::PATIENCE`]).
    pub async fn exited(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        tokio::time::timeout(crate::PATIENCE, self.child.wait()).await.context("it did not exit")?.map_err(Into::into)
    }

    /// SIGKILL, and reaps it.
    pub async fn kill9(&mut self) -> anyhow::Result<()> {
        self.child.start_kill()?;
        self.child.wait().await?;
        Ok(())
    }
}

/// One JSON-RPC message a line over a child's stdin and stdout.
pub struct LinesTransport {
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl LinesTransport {
    /// Writes one raw line (a message too long, a message the client would not send).
    pub async fn write_line(&mut self, line: &str) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().ok_or_else(|| anyhow!("stdin is closed"))?;
        stdin.write_all(line.as_bytes()).await?;
        stdin.write_all(b"\n").await?;
        stdin.flush().await?;
        Ok(())
    }

    /// Reads one raw line; `None` once stdout closed.
    pub async fn read_line(&mut self) -> anyhow::Result<Option<String>> {
        Ok(tokio::time::timeout(crate::PATIENCE, self.stdout.next_line()).await.context("no line in time")??)
    }

    /// Closes stdin: the end of the conversation.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }
}

impl Transport for LinesTransport {
    async fn send(&mut self, msg: TransportMessage) -> Result<(), TransportError> {
        let line = match msg {
            TransportMessage::Parsed(m) => {
                serde_json::to_string(&m).map_err(|e| TransportError::Protocol(e.to_string()))?
            }
            TransportMessage::Text(text) => text,
            TransportMessage::Binary(bytes) => {
                String::from_utf8(bytes).map_err(|e| TransportError::Protocol(e.to_string()))?
            }
        };
        self.write_line(&line).await.map_err(|e| TransportError::Io(e.to_string()))
    }

    async fn recv(&mut self) -> Result<Option<TransportMessage>, TransportError> {
        match self.stdout.next_line().await {
            Ok(line) => Ok(line.map(TransportMessage::Text)),
            Err(e) => Err(TransportError::Io(e.to_string())),
        }
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        self.close_stdin();
        Ok(())
    }
}
