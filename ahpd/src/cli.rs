//! The command line: `ahpd` runs the daemon; verbs manage a running one or serve as a worker.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// ahpd runs coding-agent CLIs side by side and serves them to any number of clients over the
/// Agent Host Protocol (AHP 1.0.0).
///
/// With no verb it runs the daemon in the foreground and prints where it listens. Configuration
/// comes from config.json in ahpd's config folder (~/.config/ahpd on Linux, ~/Library/Application
/// Support/ahpd on macOS; `ahpd config` prints it), $AHPD_CONFIG, or --config-file; flags win over
/// files.
#[derive(Debug, Parser)]
#[command(name = "ahpd", version, propagate_version = true, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// What to do; nothing runs the daemon in the foreground.
    #[command(subcommand)]
    pub verb: Option<Verb>,
    /// Daemon options (for the foreground daemon).
    #[command(flatten)]
    pub daemon: DaemonArgs,
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Start the daemon in the background and print where it listens.
    ///
    /// Takes the same options as a foreground `ahpd`, checks them and the config files first (a
    /// bad one is refused before anything starts, exit 2), runs this program again detached with
    /// its output in daemon.log (in the data folder), waits for it to announce itself, and prints
    /// its URL and pid. Exit 1 when one already runs; a record left by one that died is removed.
    #[command(after_help = "Exit codes: 0 started, 1 one already runs or it did not start, 2 bad usage.")]
    Start(StartArgs),
    /// Stop the running daemon gracefully (every worker stopped) and wait until it has exited.
    #[command(after_help = "Exit codes: 0 stopped, 1 none running or it would not stop.")]
    Stop,
    /// Show the running daemon: URL, pid, uptime, sessions, agents (and whether each worker
    /// runs), running turns.
    #[command(after_help = "Exit codes: 0 one runs, 1 none running.")]
    Status {
        /// Print one JSON object instead.
        #[arg(long)]
        json: bool,
    },
    /// Restart a daemon started by `ahpd start` with the same line, to pick up a changed config
    /// or a rebuilt ahpd.
    ///
    /// First checks that this program and today's config files can start with the line the
    /// daemon was started with; a refusal says why and leaves the daemon running. Refuses while a
    /// turn runs unless --force. Then stops the daemon gracefully, starts its successor (same
    /// port unless it was 0), and waits for it to announce itself. Clients reconnect and get
    /// their sessions back from the store.
    #[command(after_help = "Exit codes: 0 restarted, 1 none running, a turn running, or a line that cannot start.")]
    Restart {
        /// Restart even while a turn runs (the turn ends as failed).
        #[arg(long)]
        force: bool,
    },
    /// Show the configuration `ahpd [options]` runs with: every key, its value, and which file,
    /// flag or default set it (credentials shown as <set>), which files were read, and the config
    /// and data folders of this platform. Needs no running daemon.
    #[command(after_help = "Exit codes: 0 shown, 2 a config that cannot start (it says why).")]
    Config(ConfigArgs),
    /// Manage the users directory: the people who may connect, their roles and their tokens.
    ///
    /// The file is --users, else the config's "users" key, else users.json in the config folder.
    /// A token is shown once, when it is made; only its hash is kept. A running daemon reads the
    /// file again at a connection's next command, so a removed person or a replaced token stops
    /// working without a restart. A daemon started with no users directory asks nobody: start it
    /// with --users FILE (or set "users") to turn the directory on.
    #[command(
        after_help = "Roles: admin (every grant), member (read and write sessions, terminals), guest (read sessions; the default).\nExit codes: 0 done, 1 no such person or one exists already, 2 bad usage or an unreadable file."
    )]
    User(UserArgs),
    /// Run the daemon at login under the platform's service manager (a systemd user unit on
    /// Linux, a launchd agent on macOS), with your PATH as it is now, restarted when it fails.
    #[command(
        after_help = "Exit codes: 0 done, 1 not installed, or the manager refused (it says the command), 2 bad usage."
    )]
    Service(ServiceArgs),
    /// List the agents `ahpd [options]` offers: the config's agents, or (with none configured)
    /// echo and every known agent whose program is on the PATH; the program each runs and its
    /// version when it says one; and why each known agent is not offered. Needs no running daemon.
    #[command(after_help = "Exit codes: 0 shown, 2 a config that cannot start (it says why).")]
    Agents(AgentsArgs),
    /// The plugins ahpd ships, and what would load: `ahpd plugin list` prints one line per plugin
    /// (`ready`, `disabled`, `unconfigured`, or `missing: …` with why). Starts nothing; needs no
    /// running daemon.
    #[command(after_help = "Exit codes: 0 shown, 2 a config that cannot start (it says why).")]
    Plugin {
        /// What to do: `list`.
        #[command(subcommand)]
        action: PluginAction,
    },
    /// Check the session store, back it up, or put a backup back (docs/security.md, "The store
    /// under faults").
    ///
    /// The daemon checks its store at every start: a damaged one is moved aside
    /// (sessions.db.damaged-<time>, with its -wal and -shm), what can still be read is recovered
    /// into a fresh store, and it says how many sessions and turns came back. It also backs the
    /// store up as it runs into backups/ in the data folder (storeBackups, storeBackupIntervalMs).
    #[command(
        after_help = "Exit codes: 0 done (check: the store is sound), 1 the store is damaged, a daemon runs on this data folder (restore), or the backup could not be taken, 2 bad usage or no such file."
    )]
    Store(StoreArgs),
    /// Print a completion script for a shell, e.g. `ahpd completions bash >
    /// ~/.local/share/bash-completion/completions/ahpd`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Show the end of the daemon's log (daemon.log in the data folder, kept by a daemon started
    /// by `ahpd start` or run as a service, rotated by size while it runs).
    #[command(after_help = "Exit codes: 0 shown, 1 no log yet.")]
    Logs {
        /// How many lines to show.
        #[arg(short = 'n', long = "lines", value_name = "N", default_value_t = 40)]
        lines: usize,
        /// Keep printing what is written after them (across rotations) until interrupted.
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// List the running daemon's sessions (what listSessions lists): state, agent, title, URI.
    #[command(after_help = "Exit codes: 0 listed, 1 none running or it refused the connection.")]
    Sessions(SessionsArgs),
    /// List, add, run and remove automations: agents that run on a schedule or an event,
    /// unattended (docs/automations.md), through the running daemon's `ahp-automations://`.
    #[command(
        after_help = "Exit codes: 0 done, 1 none running, no such automation, or the daemon refused it (its sentence says why), 2 bad usage."
    )]
    Automations(AutomationsArgs),
    /// Show what a session changed, or get its work back: merge it into the branch it was cut
    /// from, commit it, or discard it (docs/worktrees.md).
    ///
    /// Shows the changeset a person reviews: the session's worktree branch against its base when
    /// it has one, else its folder's uncommitted changes; one line a file (lines added and
    /// removed, or `binary`). --merge, --commit and --discard run that changeset's operation, as
    /// a client's invokeChangesetOperation does; a merge that would conflict is refused with the
    /// files named and nothing changed. --diff prints each file's diff; --comment FILE:LINE TEXT
    /// writes a line comment the agent's listComments sees (as the web window's Changes view
    /// does), and --comments lists them with their replies.
    #[command(
        after_help = "Exit codes: 0 shown or done, 1 none running, no such session, no Git folder, or the operation was refused."
    )]
    Changes(ChangesArgs),
    /// Send a message and stream the reply to stdout.
    ///
    /// To a new session on --agent, or to --session; with neither, to a new session on the
    /// daemon's first agent. A tool call that waits to be allowed is asked about on the terminal,
    /// or answered by --yes or --no; with no terminal and neither flag it is denied. A question is
    /// asked on the terminal, else declined. Tool calls and questions are written to stderr.
    #[command(
        after_help = "Exit codes: 0 the turn completed, 1 it failed or was cancelled (or none running), 2 bad usage."
    )]
    Send(SendArgs),
    /// Follow live activity until interrupted: across every session one line per event (a session
    /// added or removed, a message, a reply, a failure, something waiting for you); for one
    /// SESSION, its replies as they stream. When the daemon goes away (a restart, a crash) it says
    /// so and watches again once one is back.
    #[command(after_help = "Exit codes: 1 none running when it starts, or the session is not found.")]
    Watch(WatchArgs),
    /// Print how to reach the running daemon: the web window's address and the URL for VS Code
    /// (on stderr), and on stdout the JSON to paste into VS Code's settings.json
    /// (chat.remoteAgentHostsEnabled and the chat.remoteAgentHosts entry, with the token).
    #[command(after_help = "Exit codes: 0 printed, 1 none running.")]
    Connect(ClientArgs),
    /// Run a built-in backend as a worker on this process's stdin/stdout (the daemon starts its
    /// workers this way; see docs/workers.md).
    #[command(hide = true)]
    Worker {
        /// The backend kind: echo, notes, claude, acp, pi.
        kind: String,
    },
    /// The first process inside a sandbox: relays the loopback ports the daemon allows, then runs
    /// the program after `--` (docs/security.md).
    #[command(hide = true, name = "box-run")]
    BoxRun(crate::confine::relay::Plan),
    /// The launcher of a container session's processes: runs the program after `--` in the
    /// session's container, its stdio attached (docs/security.md).
    #[command(hide = true, name = "box-exec")]
    BoxExec(crate::confine::exec::Plan),
}

/// How the client verbs reach a daemon.
#[derive(Debug, Clone, Args, Default)]
pub struct ClientArgs {
    /// The daemon's ws:// URL (default: the running daemon's, from its record).
    #[arg(long, value_name = "URL", global = true)]
    pub url: Option<String>,
    /// The connection token (default: --token-file, $AHPD_TOKEN, then what the running daemon was
    /// started with or its config names; also when --url names that daemon).
    #[arg(long, value_name = "SECRET", global = true, conflicts_with = "token_file")]
    pub token: Option<String>,
    /// A file holding the connection token.
    #[arg(long, value_name = "PATH", global = true)]
    pub token_file: Option<PathBuf>,
}

/// `ahpd sessions`' options.
#[derive(Debug, Clone, Args)]
pub struct SessionsArgs {
    /// Print the list as JSON, as listSessions answers it.
    #[arg(long)]
    pub json: bool,
    /// Where the daemon is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `ahpd automations`' options.
#[derive(Debug, Clone, Args)]
pub struct AutomationsArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: AutomationsAction,
    /// Where the daemon is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `ahpd automations` verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum AutomationsAction {
    /// Every automation: on or off, its title, its next run, its last run, its URI.
    List {
        /// Print the catalogue's entries as JSON, as `automation/set` carries them.
        #[arg(long)]
        json: bool,
    },
    /// Create an automation (its message sent to a fresh session of --agent at each run).
    Add {
        /// Its title.
        #[arg(long)]
        title: String,
        /// What each run's session is told.
        #[arg(long)]
        message: String,
        /// Its id (the URI is ahp-automation:/<id>; default: from the title).
        #[arg(long)]
        id: Option<String>,
        /// The agent its runs use (default: the daemon's first).
        #[arg(long)]
        agent: Option<String>,
        /// The folder its runs work in (a worktree of their own is cut from it).
        #[arg(long, value_name = "DIR")]
        folder: Option<PathBuf>,
        /// A five-field cron schedule ("0 9 * * 1-5"); none: it runs when asked.
        #[arg(long, value_name = "EXPR")]
        cron: Option<String>,
        /// The IANA time zone of --cron (default: this machine's, else UTC).
        #[arg(long, value_name = "ZONE", requires = "cron")]
        time_zone: Option<String>,
        /// Occurrences missed while the daemon was down: runOnce (one catch-up run) or skip.
        #[arg(long, value_name = "POLICY", requires = "cron", value_parser = ["runOnce", "skip"])]
        misfire: Option<String>,
        /// Created turned off (its schedule makes no run until it is turned on).
        #[arg(long)]
        disabled: bool,
    },
    /// Start a run now; prints the run's URI.
    Run {
        /// The automation (its URI or id).
        automation: String,
    },
    /// An automation's runs, newest first.
    Runs {
        /// The automation (its URI or id).
        automation: String,
        /// Print its run summaries as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove an automation and its run history.
    Rm {
        /// The automation (its URI or id).
        automation: String,
    },
}

/// `ahpd changes`' options.
#[derive(Debug, Clone, Args)]
pub struct ChangesArgs {
    /// The session (its URI or id).
    #[arg(value_name = "SESSION")]
    pub session: String,
    /// Merge its branch into the branch it was cut from (its uncommitted files committed first).
    #[arg(long, conflicts_with_all = ["commit", "discard"])]
    pub merge: bool,
    /// Commit its uncommitted changes (on its worktree's branch, or on its folder's).
    #[arg(long, conflicts_with = "discard")]
    pub commit: bool,
    /// Discard what its worktree changed: back to where its branch parted from its base.
    #[arg(long)]
    pub discard: bool,
    /// Print the changeset as JSON, as a subscription's snapshot has it.
    #[arg(long, conflicts_with_all = ["merge", "commit", "discard"])]
    pub json: bool,
    /// Print each file's diff after the list.
    #[arg(long, conflicts_with_all = ["merge", "commit", "discard", "json"])]
    pub diff: bool,
    /// Write a comment for the agent on FILE (its path in the changeset) at LINE (or a range
    /// START-END, lines of the file as changed): a comment its listComments sees.
    #[arg(long, num_args = 2, value_names = ["FILE:LINE", "TEXT"], conflicts_with_all = ["merge", "commit", "discard", "json", "diff"])]
    pub comment: Option<Vec<String>>,
    /// List the session's comments with their replies and state.
    #[arg(long, conflicts_with_all = ["merge", "commit", "discard", "json", "diff", "comment"])]
    pub comments: bool,
    /// Where the daemon is.
    #[command(flatten)]
    pub client: ClientArgs,
}

impl ChangesArgs {
    /// The changeset operation asked for, by its id.
    pub fn operation(&self) -> Option<&'static str> {
        [(self.merge, "merge"), (self.commit, "commit"), (self.discard, "discard")]
            .into_iter()
            .find_map(|(asked, id)| asked.then_some(id))
    }
}

/// `ahpd send`'s options.
#[derive(Debug, Clone, Args)]
pub struct SendArgs {
    /// Start a new session on this agent (provider).
    #[arg(long, value_name = "AGENT", conflicts_with = "session")]
    pub agent: Option<String>,
    /// Send to this session (its URI or id).
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// Allow every tool call that asks.
    #[arg(long, conflicts_with = "no")]
    pub yes: bool,
    /// Deny every tool call that asks (and decline questions).
    #[arg(long)]
    pub no: bool,
    /// The message.
    #[arg(required = true, value_name = "TEXT")]
    pub text: Vec<String>,
    /// Where the daemon is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `ahpd watch`'s options.
#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Follow this session alone (its URI or id).
    #[arg(value_name = "SESSION")]
    pub session: Option<String>,
    /// Where the daemon is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `ahpd start`'s options: the daemon's own.
#[derive(Debug, Clone, Args)]
pub struct StartArgs {
    /// Options for the daemon.
    #[command(flatten)]
    pub daemon: DaemonArgs,
}

/// `ahpd user`'s options.
#[derive(Debug, Clone, Args)]
pub struct UserArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: UserAction,
    /// The users directory to manage.
    #[arg(long, value_name = "FILE", global = true)]
    pub users: Option<PathBuf>,
    /// Read only this config file (to find "users").
    #[arg(long, value_name = "PATH", global = true)]
    pub config_file: Option<PathBuf>,
}

/// `ahpd user` verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum UserAction {
    /// Add a person and print their token (shown this once).
    Add {
        /// Their id (letters, digits, '-', '_', '.').
        id: String,
        /// A role (repeatable): admin, member, guest, or one the file defines. Default: guest.
        #[arg(long = "role", value_name = "ROLE")]
        roles: Vec<String>,
    },
    /// List the people and their roles (never tokens).
    List {
        /// Print JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Remove a person; their token stops working at once.
    Rm {
        /// Their id.
        id: String,
    },
    /// Give a person a new token and print it (the old one stops working).
    Token {
        /// Their id.
        id: String,
        /// Print a ws:// URL with the token for the running daemon instead of the bare token.
        #[arg(long)]
        url: bool,
    },
}

/// `ahpd store`'s options.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: StoreAction,
    /// Read only this config file (for storeBackups).
    #[arg(long, value_name = "PATH", global = true)]
    pub config_file: Option<PathBuf>,
}

/// `ahpd store` verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum StoreAction {
    /// Check the store (or FILE, such as a backup) without writing to it: SQLite's full
    /// integrity check, the schema, and every record read as what it is. Safe while the daemon
    /// runs.
    #[command(after_help = "Exit codes: 0 sound, 1 damaged (it says what it found), 2 no such file.")]
    Check {
        /// The file to check; default: the session store.
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
        /// Print one JSON object: { file, sound, problems, sessions, chats, turns }.
        #[arg(long)]
        json: bool,
    },
    /// Back the store up now, while the daemon runs or not: into backups/ in the data folder
    /// (keeping the newest storeBackups), or into --to FILE. A damaged store is not backed up.
    #[command(
        after_help = "Exit codes: 0 backed up (it prints the file), 1 it could not be (it says why), 2 bad usage."
    )]
    Backup {
        /// Write the backup here instead (a file that does not exist yet).
        #[arg(long, value_name = "FILE")]
        to: Option<PathBuf>,
    },
    /// Put a backup in the store's place (the daemon must be stopped). The backup is checked
    /// first; the store it replaces is kept aside as sessions.db.replaced-<time>. With no FILE,
    /// lists the backups.
    #[command(
        after_help = "Exit codes: 0 restored, 1 a daemon runs on this data folder or the backup is damaged, 2 no FILE (the backups are listed) or no such file."
    )]
    Restore {
        /// The backup to restore (a path, or a name in backups/).
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
    },
}

/// `ahpd service`'s options.
#[derive(Debug, Clone, Args)]
pub struct ServiceArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: ServiceAction,
}

/// `ahpd service` verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum ServiceAction {
    /// Write the unit (running this binary with the daemon options given here, your PATH and this
    /// folder) and start it now and at every login.
    Install {
        /// Only write the unit, and say the commands that start it.
        #[arg(long)]
        no_start: bool,
        /// Options for the daemon.
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Stop the service and remove its unit.
    Uninstall,
    /// Say whether a unit is installed, what it runs, and what the manager says of it.
    Status,
}

/// What `ahpd plugin` does.
#[derive(Debug, Clone, Subcommand)]
pub enum PluginAction {
    /// One line per plugin: what would load.
    List(AgentsArgs),
}

/// `ahpd agents`'s options.
#[derive(Debug, Clone, Args)]
pub struct AgentsArgs {
    /// Print one JSON object: { configured, offered, notOffered }.
    #[arg(long)]
    pub json: bool,
    /// Read only this config file.
    #[arg(long, value_name = "PATH")]
    pub config_file: Option<PathBuf>,
}

/// `ahpd config`'s options.
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// Print one JSON object: { files, config, sources, warnings }.
    #[arg(long)]
    pub json: bool,
    /// Daemon options, to see what they change.
    #[command(flatten)]
    pub daemon: DaemonArgs,
}

/// Options of the daemon itself.
#[derive(Debug, Clone, Args, Default)]
pub struct DaemonArgs {
    /// The port to listen on (default 9187); 0 picks a free one.
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// The address to listen on (default 127.0.0.1). A non-loopback address needs a token choice.
    #[arg(long, value_name = "ADDR")]
    pub host: Option<String>,
    /// Read only this config file.
    #[arg(long, value_name = "PATH")]
    pub config_file: Option<PathBuf>,
    /// The token clients must present (as ?tkn= or Authorization: Bearer). Every account on the
    /// machine can read it in `ps`: prefer --connection-token-file. With no token option, a token
    /// is made once and kept in connection-token in the data folder.
    #[arg(long, value_name = "SECRET", conflicts_with_all = ["connection_token_file", "without_connection_token"])]
    pub connection_token: Option<String>,
    /// A file holding the token; created with a random one if it does not exist.
    #[arg(long, value_name = "PATH", conflicts_with = "without_connection_token")]
    pub connection_token_file: Option<PathBuf>,
    /// Accept connections without a token: every account on this machine (and, on a non-loopback
    /// address, anyone who reaches it) may then drive your agents.
    #[arg(long)]
    pub without_connection_token: bool,
    /// Serve exactly one connection over this process's stdin/stdout (one JSON message per line),
    /// for a host that runs ahpd nested inside another or reaches it over ssh. When a daemon
    /// already runs on this data folder, relay to it as its owner's client (it and its turns
    /// outlive this process); else serve in process. Stderr says which; stdout is the protocol's.
    #[arg(long)]
    pub stdio: bool,
    /// Offer the tools that declare advanced permission to every session's model.
    #[arg(long)]
    pub advanced_tools: bool,
    /// Offer the session tools (the default).
    #[arg(long, overrides_with = "no_session_tools")]
    pub session_tools: bool,
    /// Offer the session tools to no session.
    #[arg(long)]
    pub no_session_tools: bool,
    /// Offer the session tools to this provider's sessions alone (repeatable).
    #[arg(long, value_name = "PROVIDER")]
    pub session_tools_providers: Vec<String>,
    /// A users directory (JSON file; `ahpd user add` makes one): each connection is a person
    /// with the grants of their roles, and the connection token is root.
    #[arg(long, value_name = "FILE")]
    pub users: Option<PathBuf>,
    /// How long a client's tool call may wait for its client, in ms (0 waits for ever).
    #[arg(long, value_name = "MS")]
    pub client_tool_timeout_ms: Option<u64>,
}
