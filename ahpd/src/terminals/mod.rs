//! Terminals: a real pseudo-terminal per terminal channel, and the `!` commands a person runs in a
//! chat. This module owns the ptys and their processes; the channels are the host's, reached
//! through `host::facade` alone, and every change to them goes through the one write path.
//!
//! - `pty.rs`: a program on a pty in a session (and process group) of its own, killed with it.
//! - `escapes.rs`: shell integration's escape sequences taken out of the output.
//! - `run.rs`: one terminal's task — output to `terminal/data`, input and resizes in order, the
//!   scrollback under its bound, the exit.
//! - `command.rs`: a `!` command's turn — a terminal the turn names, its exit code in the turn.
//!
//! [`Terminals`] is what the host is given (`Host::serve_terminals`); it answers the host's
//! `facade::Terminals`, decides the limits (terminals per session and per client, scrollback) and
//! where a terminal may run, and keeps the running ones.

mod command;
pub mod escapes;
pub mod pty;
pub mod run;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use agent_runner::sync::lock;
use ahp_types::commands::CreateTerminalParams;
use ahp_types::state::{TerminalClaim, TerminalLifecycleState, TerminalRunningLifecycleState, TerminalState};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::run::Control;
use crate::host::facade::{self, over_limit, path_of, AhpError, Asker, CommandRun, TerminalSettings, WeakHost};
use crate::host::{Core, Host};

/// A terminal's size when the client names none.
const DEFAULT_SIZE: (u16, u16) = (80, 24);

/// The largest side a terminal may have, in columns or rows.
const MAX_SIDE: i64 = 4096;

/// A running terminal, as the feature keeps it.
struct Live {
    /// Which start of the channel it is (a channel disposed and created again is a new one).
    id: u64,
    /// Where clients' input and sizes go, in order.
    control: mpsc::UnboundedSender<Control>,
    /// Ends it.
    end: CancellationToken,
    /// Ends its processes at once.
    killer: pty::Killer,
    /// The session that claimed it, counted against `maxTerminalsPerSession`.
    session: Option<String>,
    /// The client that opened it, counted against `maxTerminalsPerConnection`.
    client: Option<String>,
}

/// The running terminals, by channel.
#[derive(Default)]
struct Registry {
    live: Mutex<HashMap<String, Live>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Live>> {
        // A panic while it was held leaves the map as it was; keep serving.
        lock(&self.live)
    }

    /// Forgets start `id` of `uri` once its program was reaped (a later start of the same channel
    /// stays).
    fn forget(&self, uri: &str, id: u64) {
        let mut live = self.lock();
        if live.get(uri).is_some_and(|l| l.id == id) {
            live.remove(uri);
        }
    }
}

/// A program to start on a terminal's pty.
struct Launch<'a> {
    /// The terminal's channel.
    uri: &'a str,
    /// The program and its arguments.
    program: PathBuf,
    args: Vec<String>,
    /// Where it runs.
    cwd: &'a Path,
    /// Columns and rows.
    size: (u16, u16),
    /// The session and the client it counts against.
    session: Option<String>,
    client: Option<String>,
    /// A `!` command's turn, ended once the program exits.
    turn: Option<command::CommandTurn>,
    /// How long it may run before it is stopped (a `!` command's `shellCommandTimeoutMs`).
    deadline: Option<std::time::Duration>,
    /// Its session's box, when the session is confined: the program runs inside it.
    confined: Option<protocol::Confined>,
}

impl Launch<'_> {
    /// The program, its arguments and the variables set for it: through the session's box's
    /// launcher where it has one.
    fn argv(&self) -> (PathBuf, Vec<String>, Vec<(String, String)>) {
        let Some(confined) = &self.confined else { return (self.program.clone(), self.args.clone(), Vec::new()) };
        let Some((launcher, rest)) = confined.wrap.split_first() else {
            return (self.program.clone(), self.args.clone(), Vec::new());
        };
        let mut args = rest.to_vec();
        args.push(self.program.display().to_string());
        args.extend(self.args.iter().cloned());
        let env = confined.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        (PathBuf::from(launcher), args, env)
    }
}

/// The terminals feature.
pub struct Terminals {
    host: WeakHost,
    settings: TerminalSettings,
    /// Where a terminal runs when nothing says where.
    default_directory: Option<PathBuf>,
    registry: Arc<Registry>,
}

impl Terminals {
    /// The terminals of `host`, with the limits its config gives.
    pub fn new(host: &Host) -> Arc<Self> {
        Arc::new(Self {
            host: host.downgrade(),
            settings: host.config().terminals.clone(),
            default_directory: host.config().default_directory.clone(),
            registry: Arc::default(),
        })
    }

    fn live(&self) -> MutexGuard<'_, HashMap<String, Live>> {
        self.registry.lock()
    }

    /// The shell a terminal or `!` command runs: its box's own (a container's `sh`), else
    /// `defaultShell`, else `$SHELL`, else `/bin/sh`.
    fn shell(&self, confined: Option<&protocol::Confined>) -> PathBuf {
        if let Some(shell) = confined.and_then(|c| c.shell.as_ref()) {
            return PathBuf::from(shell);
        }
        self.settings
            .default_shell
            .clone()
            .or_else(|| std::env::var_os("SHELL").filter(|s| !s.is_empty()).map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("/bin/sh"))
    }

    /// Refuses one more terminal for `session` or `client` past its limit.
    fn check_room(&self, session: Option<&str>, client: Option<&str>) -> Result<(), AhpError> {
        let live = self.live();
        if let Some(session) = session {
            let open = live.values().filter(|l| l.session.as_deref() == Some(session)).count();
            if open >= self.settings.per_session {
                return Err(over_limit(
                    "maxTerminalsPerSession",
                    self.settings.per_session,
                    format!(
                        "This session has {open} terminals running, this host's limit (maxTerminalsPerSession); \
                         dispose of one, or let one finish, first"
                    ),
                ));
            }
        }
        if let Some(client) = client {
            let open = live.values().filter(|l| l.client.as_deref() == Some(client)).count();
            if open >= self.settings.per_client {
                return Err(over_limit(
                    "maxTerminalsPerConnection",
                    self.settings.per_client,
                    format!(
                        "This client has {open} terminals running, this host's limit (maxTerminalsPerConnection); \
                         dispose of one first"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Starts a program on a pty and runs its terminal in a task of the host's; once it exited
    /// and that was said, a `!` command's turn ends.
    fn start(&self, launch: Launch<'_>) -> Result<(), String> {
        let host = self.host.upgrade().ok_or("the host is stopping")?;
        let (cols, rows) = launch.size;
        let (program, args, env) = launch.argv();
        let started = pty::spawn(&program, &args, &env, launch.cwd, cols, rows).map_err(|e| e.to_string())?;
        let (control, control_rx) = mpsc::unbounded_channel();
        let end = CancellationToken::new();
        // Counted from its start, on the host's clock.
        let deadline = launch.deadline.map(|d| {
            let clock = host.config().clock.clone();
            let due = clock.now().saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            (clock, due)
        });
        let id = self.registry.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let live = Live {
            id,
            control,
            end: end.clone(),
            killer: started.process.killer(),
            session: launch.session,
            client: launch.client,
        };
        self.live().insert(launch.uri.to_owned(), live);
        let terminal = run::Terminal {
            uri: launch.uri.to_owned(),
            process: started.process,
            reader: started.reader,
            writer: started.writer,
            control: control_rx,
            end,
            scrollback: self.settings.scrollback_bytes,
            deadline,
        };
        let (uri, turn, registry) = (launch.uri.to_owned(), launch.turn, self.registry.clone());
        let scrollback = self.settings.scrollback_bytes;
        host.clone().spawn("terminal", async move {
            let ended = run::run(&host, terminal).await;
            // Reaped: nothing is left to kill, and it no longer counts against a limit.
            registry.forget(&uri, id);
            let mut core = host.lock();
            run::say_exited(&mut core, &uri, ended.code);
            if let Some(turn) = turn {
                command::finished(&mut core, &uri, &turn, ended, scrollback);
            }
        });
        Ok(())
    }

    /// Where a terminal runs: the folder asked for, which a session's terminal must find inside
    /// the session's folder; with none asked, the session's folder or the daemon's.
    fn folder_for(&self, core: &Core, claim: &TerminalClaim, asked: Option<&str>) -> Result<PathBuf, AhpError> {
        let session_folder = match claim {
            TerminalClaim::Session(c) => core.session(&c.session).and_then(|m| m.working_directory.clone()),
            TerminalClaim::Client(_) => None,
        };
        let fallback = session_folder.clone().or_else(|| self.default_directory.clone());
        let Some(asked) = asked else {
            return fallback.ok_or_else(|| AhpError::invalid_params("Name a cwd: this host has no folder of its own"));
        };
        let path = path_of(asked).ok_or_else(|| {
            AhpError::invalid_params(format!(
                "Invalid createTerminal params: cwd must be an absolute file: URI, not {asked}"
            ))
        })?;
        let real = std::fs::canonicalize(&path)
            .ok()
            .filter(|p| p.is_dir())
            .ok_or_else(|| AhpError::invalid_params(format!("There is no folder at {}", path.display())))?;
        if let TerminalClaim::Session(_) = claim {
            let allowed = fallback.ok_or_else(|| AhpError::invalid_params("This session has no folder"))?;
            let root = std::fs::canonicalize(&allowed).unwrap_or(allowed);
            if !real.starts_with(&root) {
                return Err(AhpError::permission_denied(format!(
                    "{} is outside this session's folders ({}); a session's terminal runs inside them",
                    path.display(),
                    root.display()
                )));
            }
        }
        Ok(real)
    }
}

/// A side of a terminal as a client gave it: absent for the default, else 1 to [`MAX_SIDE`].
fn side(given: Option<i64>, default: u16, name: &str) -> Result<u16, AhpError> {
    match given {
        None => Ok(default),
        Some(n) if (1..=MAX_SIDE).contains(&n) => Ok(u16::try_from(n).unwrap_or(default)),
        Some(n) => Err(AhpError::invalid_params(format!(
            "Invalid createTerminal params: {name} must be between 1 and {MAX_SIDE}, not {n}"
        ))),
    }
}

impl facade::Terminals for Terminals {
    fn create(&self, core: &mut Core, asker: &Asker, params: CreateTerminalParams) -> Result<(), AhpError> {
        let (session, client) = match &params.claim {
            TerminalClaim::Client(c) => {
                if asker.client_id.as_deref() != Some(c.client_id.as_str()) {
                    return Err(AhpError::invalid_params(
                        "A client can only claim a terminal for itself, under its own clientId",
                    ));
                }
                (None, Some(c.client_id.clone()))
            }
            TerminalClaim::Session(c) => {
                let in_session =
                    core.session_state(&c.session).is_some_and(|s| s.chats.iter().any(|x| x.resource == c.chat));
                if !in_session {
                    return Err(AhpError::invalid_params(format!(
                        "Invalid createTerminal params: {} is not a chat of {}",
                        c.chat, c.session
                    )));
                }
                (Some(c.session.clone()), asker.client_id.clone())
            }
        };
        let cols = side(params.cols, DEFAULT_SIZE.0, "cols")?;
        let rows = side(params.rows, DEFAULT_SIZE.1, "rows")?;
        let cwd = self.folder_for(core, &params.claim, params.cwd.as_deref())?;
        self.check_room(session.as_deref(), client.as_deref())?;
        let confined = session.as_deref().and_then(|s| core.confinement(s));
        let shell = self.shell(confined.as_ref());
        let title = params.name.clone().filter(|n| !n.trim().is_empty()).unwrap_or_else(|| {
            shell.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "shell".to_owned())
        });
        let state = TerminalState {
            title,
            cwd: Some(facade::file_uri(&cwd)),
            cols: Some(i64::from(cols)),
            rows: Some(i64::from(rows)),
            content: Vec::new(),
            lifecycle: TerminalLifecycleState::Running(TerminalRunningLifecycleState {}),
            claim: params.claim.clone(),
            supports_command_detection: None,
            is_pty: Some(true),
        };
        // The channel is there before the first byte of output.
        core.open_terminal(&params.channel, state, true);
        let launch = Launch {
            uri: &params.channel,
            program: shell,
            args: Vec::new(),
            cwd: &cwd,
            size: (cols, rows),
            session,
            client,
            turn: None,
            deadline: None,
            confined,
        };
        if let Err(why) = self.start(launch) {
            core.close_terminal(&params.channel);
            return Err(AhpError::internal(why));
        }
        Ok(())
    }

    fn input(&self, uri: &str, data: &str) {
        if let Some(live) = self.live().get(uri) {
            let _ = live.control.send(Control::Input(data.to_owned()));
        }
    }

    fn resize(&self, uri: &str, cols: u16, rows: u16) {
        if let Some(live) = self.live().get(uri) {
            let _ = live.control.send(Control::Resize(cols, rows));
        }
    }

    fn end(&self, uri: &str) {
        if let Some(live) = self.live().remove(uri) {
            live.killer.kill();
            live.end.cancel();
        }
    }

    fn run_command(&self, core: &mut Core, run: CommandRun) -> Result<(), String> {
        self.check_room(Some(&run.session), None).map_err(|e| e.message)?;
        let cwd = run
            .cwd
            .clone()
            .or_else(|| self.default_directory.clone())
            .ok_or("This session has no folder to run a command in")?;
        let deadline = self.settings.command_deadline();
        let turn = command::open(core, &run, &cwd, deadline);
        let confined = core.confinement(&run.session);
        let launch = Launch {
            uri: &run.terminal,
            program: self.shell(confined.as_ref()),
            args: vec!["-c".to_owned(), run.command.clone()],
            cwd: &cwd,
            size: DEFAULT_SIZE,
            session: Some(run.session.clone()),
            client: None,
            turn: Some(turn),
            deadline,
            confined,
        };
        if let Err(why) = self.start(launch) {
            core.close_terminal(&run.terminal);
            return Err(why);
        }
        Ok(())
    }
}
