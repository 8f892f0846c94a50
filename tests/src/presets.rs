//! The ACP presets as one table: every row is one agent program run for real (installed by
//! `scripts/deps/*.sh`) through the daemon and the official client, its model API a scripted mock
//! on 127.0.0.1, and every row goes through the same scenarios (tests/tests/preset_table.rs runs
//! them, `<row>::<scenario>`, so `cargo nextest run -p tests --test preset_table qwen::` runs one
//! preset's):
//!
//! - [`Row::opens_offers_and_streams`]: the handshake, what the agent offers (models, modes,
//!   commands), the preset's command line and variables reaching the program, a streamed turn
//!   with its reasoning, and the person's words reaching the model;
//! - [`Row::calls_a_host_tool`]: `list_sessions` of the session's `/ahp-mcp` called by the model,
//!   its real answer heard;
//! - [`Row::asks_and_a_refusal_holds_though_side_calls_say_allow`]: with every side call of the
//!   mock (a safety classifier, a router: [`crate::mocks::side`]) saying "allow", a command is
//!   asked about in the client before it runs, allowed once (it runs in the session's folder) and
//!   refused once by the strict [`crate::turns::one_allowed_one_denied`]; the refused command did
//!   not run, the model was told no, and the turn went on to complete with its reply shown;
//! - [`Row::works_in_a_sandbox_without_asking`]: in a session of `isolation: "sandbox"` (its own
//!   home the agent's writable state, the mock the one host it reaches), the command it asks
//!   about runs without a person, in the session's worktree; one writing outside the worktree
//!   fails inside the agent's call and the turn goes on; the host's tool answers from inside the
//!   box (the session's `/ahp-mcp`, relayed);
//! - [`Row::is_cancelled_mid_turn_and_answers_the_next`]: a stop while the answer streams closes
//!   the model's stream (where the agent closes it), and the next message is answered;
//! - [`Row::resumes_after_a_kill_9_and_loads_after_a_restart`]: a turn cut by `kill -9` of the
//!   worker is resumed (`chat/turnResume`) in the conversation the agent loads (`session/load`),
//!   and after a daemon restart the next message is answered in it, judged by what the mock model
//!   is sent; the history the agent replays is not shown again.
//!
//! Every chat and session folded through the official reducers equals the host's snapshot.
//!
//! # What a row needs
//!
//! A [`Row`] says: the provider id its entry is offered under; where its program is installed
//! ([`crate::installed`], a test skips when it is not, and fails under CI); the config entry
//! (usually `{ "kind": "acp", "preset": NAME, "env": { what points it at the mock } }`); which
//! mock model API it talks to ([`Dialect`]); the words that make the model ask to run a command
//! (the shell tool's name and arguments in its dialect); the name the model calls the host's
//! `list_sessions` by, if it can; what it offers; what its preset must pass the program; what the
//! agent tells the model when the person says no; and its [`Quirk`]s, things only some agents do
//! that a scenario checks where a row names them. Adding an agent is one row; the mini ACP agent
//! in `tests/workers/mini_acp_agent.py` is one, added in the table's own test file.

use std::path::{Path, PathBuf};

use ahp_types::actions::{ChatTurnResumeAction, SessionConfigChangedAction, StateAction};
use ahp_types::state::{ResponsePart, ToolCallCancellationReason, ToolCallState, Turn, TurnState};
use serde_json::{json, Value};

use crate::mocks::gemini::MockGemini;
use crate::mocks::openai::MockOpenAi;
use crate::mocks::responses::MockResponses;
use crate::mocks::side::{SideCalls, Verdict};
use crate::turns::{active_text, asked_options, reasoning, stop, tool_calls, turn_allowing};
use crate::{turn_text, Daemon, DaemonOptions, Mirror, TestClient};

/// How long an agent ahpd starts again (after a `kill -9`, after a daemon restart) may take to
/// start, load its conversation and ask the model: a failure bound, not a measure (a kilo boot
/// alone takes 10 to 40 s on a loaded 2-core machine).
const AGENT_START: std::time::Duration = std::time::Duration::from_secs(120);

/// The mock model API a row's agent talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI chat completions ([`crate::mocks::openai`]).
    Chat,
    /// OpenAI Responses ([`crate::mocks::responses`]).
    Responses,
    /// Gemini ([`crate::mocks::gemini`]).
    Gemini,
}

/// How the model reaches the host's `list_sessions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostTool {
    /// The name the model calls it by.
    pub call: &'static str,
    /// Offered with its schema from the first request; else the agent keeps MCP tools behind a
    /// search tool of its own (`tool_search`) and names them in the prompt.
    pub up_front: bool,
}

/// What an agent offers, as the client sees it.
#[derive(Debug, Clone, Copy)]
pub struct Offers {
    /// Models the root state lists for the agent, by id or name (none: it names no models).
    pub models: &'static [&'static str],
    /// Its modes, exactly, in its order (empty: not checked).
    pub modes: &'static [&'static str],
    /// What a new session's `permissionMode` ends with.
    pub starts_in: &'static str,
    /// A slash command it names.
    pub command: Option<&'static str>,
    /// Config keys a session shows beside the mode.
    pub keys: &'static [&'static str],
}

/// What the preset must hand the program.
#[derive(Debug, Clone, Copy)]
pub struct Reaches {
    /// Arguments on the agent's command line, in order.
    pub args: &'static [&'static str],
    /// `NAME=value` in the environment of the process whose command line is `process` (the
    /// program the agent runs, for an adapter that runs one), else of any process of the agent.
    pub env: &'static [&'static str],
    /// The process that must carry `env`, by its whole command line.
    pub process: Option<&'static str>,
}

/// What words the agent puts around the person's in the prompt (so the mock's echo is not them
/// exactly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adds {
    /// Words before (Copilot's `<current_datetime>` line).
    pub before: bool,
    /// Words after (Kilo's `<environment_details>`).
    pub after: bool,
}

/// What only some agents do, checked where a row names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quirk {
    /// A model picked for one message is the one the agent asks (`session/set_model`), where its
    /// starting model (`auto`) routes elsewhere.
    PicksAModel(&'static str),
    /// Each turn is exactly one request to the model (no side requests between).
    OneRequestPerTurn,
    /// The agent asks about a command only through an extension installed in its folder (pi's
    /// own example `permission-gate.ts`), for a destructive command.
    PermissionGate,
    /// The options the agent offers when it asks, exactly, by label.
    OptionLabels(&'static [&'static str]),
    /// A conversation loaded in the same UTC minute it was last written is erased (Gemini CLI
    /// 0.61.0, google-gemini/gemini-cli#28693): the agents started before each load run minutes
    /// back ([`EarlierClock`]).
    ClockBackBeforeLoads,
    /// The requests of the conversation itself open with this system prompt (others are the
    /// agent's own: a memory extraction).
    ConversationOpensWith(&'static str),
    /// A mode the person may pick in which a model classifier (a side call whose answer has the
    /// field `verdict`) decides: picked, with the classifier saying "allow", the command runs
    /// without anybody being asked.
    ClassifierMode {
        /// The mode.
        mode: &'static str,
        /// The field of the classifier's answer that says yes or no.
        verdict: &'static str,
    },
    /// A stopped turn's model stream is left open by the agent (Codex reads it to its end), so
    /// the scenario does not wait for it to close.
    KeepsAStoppedStream,
    /// The agent runs its own shell tool without asking anybody (pi's nature: only an extension
    /// asks), shown as a call in the chat.
    RunsItsToolsUnasked,
}

/// A program of the table, and what the scenarios expect of it (see the module docs).
pub struct Row {
    /// The provider id (and the preset's name, for a preset).
    pub name: &'static str,
    /// Where the program is, or why it is not installed.
    pub program: fn() -> Result<PathBuf, String>,
    /// The agents entry, given the program, the mock and a home folder of its own.
    pub entry: fn(&Setup<'_>) -> anyhow::Result<Value>,
    /// The mock model API.
    pub dialect: Dialect,
    /// The words that make the model ask to run a command that creates `file`.
    pub ask: fn(&str) -> String,
    /// The host tool, when the agent takes MCP servers.
    pub host_tool: Option<HostTool>,
    /// What it offers.
    pub offers: Offers,
    /// What its preset passes the program.
    pub reaches: Reaches,
    /// What its reasoning shows for a `[[think]]` turn, when it shows any.
    pub reasoning: Option<&'static str>,
    /// Words it puts around the person's.
    pub adds: Adds,
    /// What the model's reply to a refusal shows: what the agent told it.
    pub told_no: &'static str,
    /// Its quirks.
    pub quirks: &'static [Quirk],
}

/// What a row's entry is made of.
pub struct Setup<'a> {
    /// The installed program.
    pub program: &'a Path,
    /// The mock.
    pub mock: &'a Mock,
    /// A home folder of the agent's own.
    pub home: &'a Path,
}

/// The running mock of a row's dialect.
pub enum Mock {
    /// Chat completions.
    Chat(MockOpenAi),
    /// Responses.
    Responses(MockResponses),
    /// Gemini.
    Gemini(MockGemini),
}

impl Mock {
    async fn start(dialect: Dialect) -> anyhow::Result<Self> {
        Ok(match dialect {
            Dialect::Chat => Mock::Chat(MockOpenAi::start().await?),
            Dialect::Responses => Mock::Responses(MockResponses::start().await?),
            Dialect::Gemini => Mock::Gemini(MockGemini::start().await?),
        })
    }

    /// The chat completions mock (a row's entry in that dialect reads its URL).
    pub fn chat(&self) -> anyhow::Result<&MockOpenAi> {
        match self {
            Mock::Chat(mock) => Ok(mock),
            _ => anyhow::bail!("this row's mock is not the chat completions one"),
        }
    }

    /// The Responses mock.
    pub fn responses(&self) -> anyhow::Result<&MockResponses> {
        match self {
            Mock::Responses(mock) => Ok(mock),
            _ => anyhow::bail!("this row's mock is not the Responses one"),
        }
    }

    /// The Gemini mock.
    pub fn gemini(&self) -> anyhow::Result<&MockGemini> {
        match self {
            Mock::Gemini(mock) => Ok(mock),
            _ => anyhow::bail!("this row's mock is not the Gemini one"),
        }
    }

    fn side_calls(&self, choice: SideCalls) {
        match self {
            Mock::Chat(m) => m.side_calls(choice),
            Mock::Responses(m) => m.side_calls(choice),
            Mock::Gemini(m) => m.side_calls(choice),
        }
    }

    fn side_calls_answered(&self) -> Vec<crate::mocks::side::Answered> {
        match self {
            Mock::Chat(m) => m.side_answered(),
            Mock::Responses(m) => m.side_answered(),
            Mock::Gemini(m) => m.side_answered(),
        }
    }

    /// Its address, for a box to be let through to.
    pub fn base_url(&self) -> String {
        match self {
            Mock::Chat(m) => m.base_url(),
            Mock::Responses(m) => m.base_url(),
            Mock::Gemini(m) => m.base_url(),
        }
    }

    fn release(&self) {
        match self {
            Mock::Chat(m) => m.release(),
            Mock::Responses(m) => m.release(),
            Mock::Gemini(m) => m.release(),
        }
    }

    /// Waits until the model is sent `words` (an agent ahpd starts again loads its conversation
    /// first: a wait of its own, bounded by [`AGENT_START`]).
    async fn until_asked(&self, words: &str) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + AGENT_START;
        let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
        match self {
            Mock::Gemini(m) => m
                .wait_for(AGENT_START, |r| r.transcript_text().contains(words))
                .await
                .map(|_| ())
                .ok_or_else(|| anyhow::anyhow!("the model was not sent {words:?} within {AGENT_START:?}")),
            Mock::Chat(m) => loop {
                let seen = m.requests();
                if seen.iter().any(|r| r.all_text().contains(words)) {
                    return Ok(());
                }
                m.wait_for_requests(seen.len() + 1, left()).await.map_err(anyhow::Error::msg)?;
            },
            Mock::Responses(m) => loop {
                let seen = m.requests();
                if seen.iter().any(|r| r.all_text().contains(words)) {
                    return Ok(());
                }
                m.wait_for_requests(seen.len() + 1, left()).await.map_err(anyhow::Error::msg)?;
            },
        }
    }

    async fn until_holding(&self, count: usize) -> anyhow::Result<()> {
        let held = match self {
            Mock::Chat(m) => m.until_holding(count, AGENT_START).await,
            Mock::Responses(m) => m.until_holding(count, AGENT_START).await,
            Mock::Gemini(m) => m.until_holding(count, AGENT_START).await,
        };
        held.map_err(anyhow::Error::msg)
    }
}

/// The requests of the conversation itself (not side calls, titles, nor the agent's own
/// requests), each as (every text it carries, the tools it offers, the model it asks).
fn conversation(row: &Row, mock: &Mock) -> Vec<(String, Vec<String>, String)> {
    let opening = row.quirks.iter().find_map(|q| match q {
        Quirk::ConversationOpensWith(words) => Some(*words),
        _ => None,
    });
    match mock {
        Mock::Chat(m) => m
            .turn_requests()
            .into_iter()
            .filter(|r| {
                opening.is_none_or(|words| {
                    r.messages().first().and_then(|m| m["content"].as_str()).is_some_and(|s| s.starts_with(words))
                })
            })
            .map(|r| {
                let tools = r.body["tools"].as_array().cloned().unwrap_or_default();
                let names = tools.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_owned)).collect();
                let model = r.body["model"].as_str().unwrap_or_default().to_owned();
                (r.all_text(), names, model)
            })
            .collect(),
        Mock::Responses(m) => m
            .turn_requests()
            .into_iter()
            .map(|r| (r.all_text(), r.tool_names(), r.body["model"].as_str().unwrap_or_default().to_owned()))
            .collect(),
        Mock::Gemini(m) => {
            m.turn_requests().into_iter().map(|r| (r.transcript_text(), r.tool_names(), r.model().to_owned())).collect()
        }
    }
}

/// Every text the conversation's last request carried.
fn last_seen(row: &Row, mock: &Mock) -> String {
    conversation(row, mock).pop().map(|(text, _, _)| text).unwrap_or_default()
}

/// The models the root lists for `provider`, by id and by name (Qwen Code's ids are its own,
/// `$runtime|openai|mock-model(openai)`, its names the provider's).
fn models(m: &Mirror, provider: &str) -> Vec<String> {
    let agent = m.root().and_then(|r| r.agents.iter().find(|a| a.provider == provider));
    agent.map(|a| a.models.iter().flat_map(|m| [m.id.clone(), m.name.clone()]).collect()).unwrap_or_default()
}

/// The session's config values as the client folded them.
fn values(m: &Mirror, session: &str) -> serde_json::Map<String, Value> {
    let config = m.session(session).and_then(|s| s.config.as_ref());
    config.map(|c| c.values.clone().into_iter().collect()).unwrap_or_default()
}

/// A daemon running one row, its home kept for a restart.
struct Run<'a> {
    row: &'a Row,
    program: PathBuf,
    mock: Mock,
    home: tempfile::TempDir,
    folder: tempfile::TempDir,
    daemon_home: tempfile::TempDir,
    clock: Option<EarlierClock>,
}

impl<'a> Run<'a> {
    async fn new(row: &'a Row, program: PathBuf) -> anyhow::Result<Self> {
        let temp = |what: &str| tempfile::Builder::new().prefix(&format!("ahpd-{}-{what}-", row.name)).tempdir();
        Ok(Self {
            row,
            program,
            mock: Mock::start(row.dialect).await?,
            home: temp("home")?,
            folder: temp("folder")?,
            daemon_home: temp("daemon")?,
            clock: None,
        })
    }

    /// The daemon's options: the row's entry, with the program's folder first on the PATH.
    fn options(&self) -> anyhow::Result<DaemonOptions> {
        let setup = Setup { program: &self.program, mock: &self.mock, home: self.home.path() };
        let mut entry = (self.row.entry)(&setup)?;
        if let Some(clock) = &self.clock {
            entry["env"]["NODE_OPTIONS"] = json!(clock.preload());
        }
        let mut options = DaemonOptions::with_config(json!({ "agents": { self.row.name: entry } }));
        options.env.push(("PATH".into(), crate::installed::path_with(&self.program)));
        Ok(options)
    }

    async fn daemon(&self) -> anyhow::Result<Daemon> {
        Daemon::start_in(self.daemon_home.path(), self.options()?).await
    }

    /// A session in the folder, once the agent's offer (from the daemon's own probe of it)
    /// reached the client: one agent process starts at a time, as a person's first session after
    /// the daemon starts does.
    async fn open(&self, a: &mut TestClient) -> anyhow::Result<(String, String)> {
        self.offered(a).await?;
        a.create_session_in(self.row.name, self.folder.path()).await
    }

    /// Waits until the root lists the row's models (when it names any).
    async fn offered(&self, a: &mut TestClient) -> anyhow::Result<()> {
        let (name, wanted) = (self.row.name, self.row.offers.models);
        if wanted.is_empty() {
            return Ok(());
        }
        a.until("the agent's models", move |m| {
            let listed = models(m, name);
            wanted.iter().all(|w| listed.iter().any(|l| l == w))
        })
        .await
    }

    /// What the mock's echo of `words` reads, as far as the agent leaves it.
    fn echoes(&self, text: &str, words: &str) -> bool {
        let Some(echo) = text.strip_prefix("mock reply to: ") else { return false };
        let adds = self.row.adds;
        (adds.before || echo.starts_with(words)) && (adds.after || echo.ends_with(words)) && echo.contains(words)
    }
}

impl Row {
    fn has(&self, quirk: Quirk) -> bool {
        self.quirks.contains(&quirk)
    }

    /// The installed program, or `None` after saying why the test skips.
    fn installed(&self) -> Option<PathBuf> {
        crate::skip::or_skip((self.program)())
    }

    /// See the module docs.
    pub async fn opens_offers_and_streams(&self) -> anyhow::Result<()> {
        let Some(program) = self.installed() else { return Ok(()) };
        let run = Run::new(self, program).await?;
        let daemon = run.daemon().await?;
        let mut a = TestClient::connect(&daemon.url, "a").await?;
        run.offered(&mut a).await?;
        if !self.offers.modes.is_empty() {
            let resolved = a
                .request(
                    "resolveSessionConfig",
                    json!({ "channel": ahp_types::ROOT_RESOURCE_URI, "provider": self.name }),
                )
                .await?;
            let modes = &resolved["schema"]["properties"]["permissionMode"]["enum"];
            assert_eq!(modes, &json!(self.offers.modes), "the agent's modes: {resolved}");
        }
        let (session, chat) = a.create_session_in(self.name, run.folder.path()).await?;

        // The session starts where the person is asked, its controls and commands offered.
        let (s, offers) = (session.clone(), self.offers);
        a.until("the session's mode and controls", move |m| {
            let values = values(m, &s);
            let mode = values.get("permissionMode").and_then(Value::as_str).unwrap_or_default();
            mode.ends_with(offers.starts_in) && offers.keys.iter().all(|k| values.contains_key(*k))
        })
        .await?;
        if let Some(command) = self.offers.command {
            let s = session.clone();
            a.until("the agent's commands", move |m| {
                let commands = m.session(&s).and_then(|st| st.meta.as_ref()).and_then(|meta| meta.get("commands"));
                commands.is_some_and(|c| c.as_array().is_some_and(|c| c.iter().any(|c| c["name"] == command)))
            })
            .await?;
        }

        // The preset's command line and variables reached the program.
        let tree = crate::daemon::descendants(daemon.pid());
        let lines: Vec<String> = tree.iter().map(|pid| crate::daemon::cmdline(*pid)).collect();
        let args = self.reaches.args.join(" ");
        assert!(lines.iter().any(|l| l.contains(&args)), "{args} in {lines:#?}");
        for variable in self.reaches.env {
            let carriers: Vec<i32> = tree
                .iter()
                .copied()
                .filter(|pid| self.reaches.process.is_none_or(|p| crate::daemon::cmdline(*pid) == p))
                .collect();
            let found = carriers.iter().any(|pid| {
                let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
                environ.split(|b| *b == 0).any(|v| v == variable.as_bytes())
            });
            assert!(found, "{variable} reached {:?}: {lines:#?}", self.reaches.process);
        }

        // A streamed turn, its reasoning first; then twenty words a piece.
        run.mock.side_calls(SideCalls::say(Verdict::Allow));
        let one = a.turn(&chat, "[[think]] hello there").await?;
        assert_eq!(one.state, TurnState::Complete, "{one:#?}");
        assert_eq!(turn_text(&one), "thought done", "{one:#?}");
        if let Some(thought) = self.reasoning {
            assert!(reasoning(&one).contains(thought), "{thought}: {one:#?}");
        }
        let two = a.turn(&chat, "[[slow]] go on").await?;
        assert_eq!(turn_text(&two), (0..20).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" "), "{two:#?}");
        let deltas = a.envelopes.iter().filter(|e| e.channel == chat && matches!(e.action, StateAction::ChatDelta(_)));
        assert!(deltas.count() >= 10, "the answer streamed in pieces");
        let seen = last_seen(self, &run.mock);
        let (first, second) = (seen.find("[[think]] hello there"), seen.rfind("[[slow]] go on"));
        assert!(matches!((first, second), (Some(f), Some(s)) if f < s), "the person's words, in order: {seen}");
        if self.has(Quirk::OneRequestPerTurn) {
            assert_eq!(conversation(self, &run.mock).len(), 2, "one request a turn");
        }
        if self.has(Quirk::RunsItsToolsUnasked) {
            let ran = a.turn(&chat, "[[bash echo $((6 * 7))]]").await?;
            assert_eq!(ran.state, TurnState::Complete, "{ran:#?}");
            assert_eq!(turn_text(&ran), "tool said: 42", "{ran:#?}");
            let calls = tool_calls(&ran.response_parts);
            assert!(matches!(calls[..], [ToolCallState::Completed(c)] if c.success), "{calls:#?}");
        }
        for quirk in self.quirks {
            if let Quirk::PicksAModel(model) = quirk {
                let asked =
                    |run: &Run<'_>| conversation(self, &run.mock).into_iter().map(|(_, _, m)| m).collect::<Vec<_>>();
                assert!(asked(&run).iter().all(|m| m != model), "its own model routed elsewhere");
                let mut message = crate::user_message("which model?");
                message.model = Some(ahp_types::state::ModelSelection { id: (*model).into(), config: None });
                let (picked, _) = a.send_message(&chat, message).await?;
                assert_eq!(a.finished(&chat, &picked).await?.state, TurnState::Complete);
                assert_eq!(asked(&run).last().map(String::as_str), Some(*model), "the picked model answered");
            }
        }
        a.check_against_snapshot(&chat).await?;
        a.check_against_snapshot(&session).await?;
        Ok(())
    }

    /// See the module docs.
    pub async fn calls_a_host_tool(&self) -> anyhow::Result<()> {
        let Some(program) = self.installed() else { return Ok(()) };
        let host_tool = self.host_tool.ok_or_else(|| anyhow::anyhow!("{} takes no MCP server", self.name))?;
        let run = Run::new(self, program).await?;
        let daemon = run.daemon().await?;
        let mut a = TestClient::connect(&daemon.url, "a").await?;
        let (session, chat) = run.open(&mut a).await?;
        let session_id = session.trim_start_matches("ahp-session:/").to_owned();

        let listed = turn_allowing(&mut a, &chat, &format!("[[call {} {{}}]]", host_tool.call)).await?;
        assert_eq!(listed.state, TurnState::Complete, "{listed:#?}");
        let calls = tool_calls(&listed.response_parts);
        assert!(matches!(calls[..], [ToolCallState::Completed(c)] if c.success), "{calls:#?}");
        assert!(turn_text(&listed).starts_with("tool said:"), "{listed:#?}");
        let requests = conversation(self, &run.mock);
        let (first_text, offered, _) = requests.first().cloned().unwrap_or_default();
        if host_tool.up_front {
            assert!(offered.iter().any(|n| n == host_tool.call), "offered from the first request: {offered:?}");
        } else {
            let hidden = !offered.iter().any(|n| n == host_tool.call);
            assert!(offered.iter().any(|n| n == "tool_search") && hidden, "behind tool_search: {offered:?}");
            assert!(first_text.contains(host_tool.call), "named to the model from the first request");
        }
        let answered = last_seen(self, &run.mock);
        assert!(answered.contains(&session_id), "list_sessions named this very session to the model: {answered}");
        a.check_against_snapshot(&chat).await?;
        Ok(())
    }

    /// See the module docs.
    pub async fn asks_and_a_refusal_holds_though_side_calls_say_allow(&self) -> anyhow::Result<()> {
        let Some(program) = self.installed() else { return Ok(()) };
        let run = Run::new(self, program).await?;
        if self.has(Quirk::PermissionGate) {
            install_permission_gate(&run.program, run.home.path())?;
        }
        let daemon = run.daemon().await?;
        let mut a = TestClient::connect(&daemon.url, "a").await?;
        let (session, chat) = run.open(&mut a).await?;
        run.mock.side_calls(SideCalls::say(Verdict::Allow));

        // The options the agent offers, when a row says them (a turn of its own, refused).
        for quirk in self.quirks {
            if let Quirk::OptionLabels(expected) = quirk {
                let asked = a.send(&chat, &(self.ask)("labels.txt")).await?;
                let waiting = a.until_waiting_calls(&chat, 1).await?;
                let labels: Vec<String> = asked_options(&a.mirror, &chat).into_iter().map(|(label, _)| label).collect();
                assert_eq!(labels, *expected, "the agent's own options");
                a.confirm(&chat, &waiting[0].0, &waiting[0].1, false).await?;
                a.finished(&chat, &asked).await?;
            }
        }

        // Asked in the client before it runs: allowed once (it runs in the session's folder),
        // refused once (it does not, whatever the side calls said).
        crate::turns::one_allowed_one_denied(&mut a, &session, &chat, run.folder.path(), self.ask).await?;
        let refused = a.mirror.chat(&chat).and_then(|c| c.turns.last().cloned()).expect("the refused turn");
        told_no(self, &refused);
        a.check_against_snapshot(&chat).await?;
        a.check_against_snapshot(&session).await?;

        // A mode in which the agent's classifier decides, picked by the person: the classifier
        // (the mock's side call) allows, and the command runs without anybody being asked.
        for quirk in self.quirks {
            if let Quirk::ClassifierMode { mode, verdict } = quirk {
                let pick = [("permissionMode".to_owned(), json!(mode))].into_iter().collect();
                let action =
                    StateAction::SessionConfigChanged(SessionConfigChangedAction { config: pick, replace: None });
                let seq = a.dispatch(&session, action).await?;
                assert_eq!(a.echo_of(seq).await?.rejection_reason, None, "{mode} was taken");
                let before = run.mock.side_calls_answered().len();
                let turn = a.turn(&chat, &(self.ask)("classified.txt")).await?;
                assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
                let calls = tool_calls(&turn.response_parts);
                assert!(matches!(calls[..], [ToolCallState::Completed(c)] if c.success), "{calls:#?}");
                assert!(run.folder.path().join("classified.txt").exists(), "the classifier let it run");
                let asked = run.mock.side_calls_answered().split_off(before);
                assert!(asked.iter().any(|c| c.answer.get(*verdict).is_some()), "the classifier was asked: {asked:#?}");
                a.check_against_snapshot(&chat).await?;
            }
        }
        Ok(())
    }

    /// See the module docs.
    pub async fn works_in_a_sandbox_without_asking(&self) -> anyhow::Result<()> {
        let Some(program) = self.installed() else { return Ok(()) };
        let Some(_bwrap) = crate::skip::or_skip(crate::installed::bwrap()) else { return Ok(()) };
        let run = Run::new(self, program).await?;
        crate::git::repository_with_a_commit(run.folder.path());
        let mut options = run.options()?;
        let config = options.config.get_or_insert_with(|| json!({}));
        // The agent's own folder (its home here) is its state; its model API is the mock.
        config["sandboxWritable"] = json!([run.home.path()]);
        config["sandboxAllowHosts"] = json!([run.mock.base_url()]);
        let daemon = Daemon::start_in(run.daemon_home.path(), options).await?;
        let mut a = TestClient::connect(&daemon.url, "a").await?;
        run.offered(&mut a).await?;
        let folder = run.folder.path().canonicalize()?;
        let (session, chat) = a
            .open_session(json!({
                "provider": self.name,
                "workingDirectories": [format!("file://{}", folder.display())],
                "config": { "isolation": "sandbox" },
            }))
            .await
            .map_err(|e| anyhow::anyhow!("{e}\n{}", daemon.log()))?;
        let worktree = a.folder_of(&session)?;
        assert_ne!(worktree, folder, "a sandboxed session works in a worktree of its own");

        // What the agent asks about runs without a person: the box holds it.
        // (Nobody is asked about the agent's own calls; a host it tries to reach on its own, an
        // update check, is asked of the person, who says no here.)
        let inside = a.send(&chat, &(self.ask)("boxed.txt")).await?;
        let (turn, _) = a.finished_saying_no(&chat, &inside).await?;
        assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
        let calls = tool_calls(&turn.response_parts);
        assert!(calls.iter().any(|c| matches!(c, ToolCallState::Completed(c) if c.success)), "{calls:#?}");
        assert!(worktree.join("boxed.txt").exists(), "made in the worktree");
        assert!(!folder.join("boxed.txt").exists(), "not in the person's checkout");

        // Outside the worktree it fails inside the agent's own call, and the turn goes on.
        let outside = run.daemon_home.path().join("outside.txt");
        let outside_turn = a.send(&chat, &(self.ask)(&outside.display().to_string())).await?;
        let (turn, _) = a.finished_saying_no(&chat, &outside_turn).await?;
        assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
        assert!(!outside.exists(), "nothing was made outside the box");
        // Said in the call the person sees, or (Gemini CLI shows no output) to the model.
        let (shown, told) = (serde_json::to_string(&turn)?, last_seen(self, &run.mock));
        let why = "Read-only file system";
        assert!(shown.contains(why) || told.contains(why), "the agent's call says why: {shown}\n{told}");

        // The host's tools reach it from inside, at the session's `/ahp-mcp`.
        if let Some(host_tool) = self.host_tool {
            let listing = a.send(&chat, &format!("[[call {} {{}}]]", host_tool.call)).await?;
            let (listed, _) = a.finished_saying_no(&chat, &listing).await?;
            assert_eq!(listed.state, TurnState::Complete, "{listed:#?}");
            let answered = last_seen(self, &run.mock);
            let id = session.trim_start_matches("ahp-session:/");
            assert!(answered.contains(id), "list_sessions answered from the box: {answered}");
        }
        assert_eq!(a.mirror.chat(&chat).map(|c| c.turns.len()), Some(2 + usize::from(self.host_tool.is_some())));
        let status = daemon.status().await?;
        assert_eq!(status["boxes"][0]["level"], "sandbox", "{status}");
        a.check_against_snapshot(&chat).await?;
        Ok(())
    }

    /// See the module docs.
    pub async fn is_cancelled_mid_turn_and_answers_the_next(&self) -> anyhow::Result<()> {
        let Some(program) = self.installed() else { return Ok(()) };
        let run = Run::new(self, program).await?;
        let daemon = run.daemon().await?;
        let mut a = TestClient::connect(&daemon.url, "a").await?;
        let (session, chat) = run.open(&mut a).await?;

        let held = a.send(&chat, "[[hold]] wait for it").await?;
        let c = chat.clone();
        a.until("the held answer to stream", move |m| active_text(m, &c).starts_with("holding")).await?;
        a.dispatch(&chat, stop(&held)).await?;
        let stopped = a.finished(&chat, &held).await?;
        assert_eq!(stopped.state, TurnState::Cancelled, "{stopped:#?}");
        let next = a.turn(&chat, "still there?").await?;
        assert_eq!(next.state, TurnState::Complete, "{next:#?}");
        assert!(run.echoes(&turn_text(&next), "still there?"), "{next:#?}");
        if !self.has(Quirk::KeepsAStoppedStream) {
            run.mock.until_holding(0).await?;
        }
        let seen = last_seen(self, &run.mock);
        assert!(seen.contains("still there?"), "the model was sent the next message: {seen}");
        a.check_against_snapshot(&chat).await?;
        a.check_against_snapshot(&session).await?;
        Ok(())
    }

    /// See the module docs.
    pub async fn resumes_after_a_kill_9_and_loads_after_a_restart(&self) -> anyhow::Result<()> {
        let Some(program) = self.installed() else { return Ok(()) };
        let mut run = Run::new(self, program).await?;
        if self.has(Quirk::ClockBackBeforeLoads) {
            run.clock = Some(EarlierClock::start()?);
        }
        let mut first = run.daemon().await?;
        let mut a = TestClient::connect(&first.url, "a").await?;
        let (session, chat) = run.open(&mut a).await?;
        let remembered = a.turn(&chat, "remember ALPHA").await?;
        assert_eq!(remembered.state, TurnState::Complete, "{remembered:#?}");
        if let Some(clock) = &run.clock {
            clock.later()?;
        }

        // `kill -9` of the worker once the answer streams: the turn fails, saying it can be resumed.
        let held = a.send(&chat, "[[hold]] remember BRAVO").await?;
        let c = chat.clone();
        a.until("the held answer to stream", move |m| active_text(m, &c).starts_with("holding")).await?;
        let worker = first.worker().ok_or_else(|| anyhow::anyhow!("no worker"))?;
        let agents = crate::daemon::descendants(worker);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), nix::sys::signal::Signal::SIGKILL)?;
        let lost = a.finished(&chat, &held).await?;
        assert_eq!(lost.state, TurnState::Error, "{lost:#?}");
        assert!(
            matches!(lost.response_parts.last(), Some(ResponsePart::Error(e)) if e.resumable == Some(true)),
            "the error says it can be resumed: {:?}",
            lost.response_parts.last()
        );

        // The agent does not outlive its worker, and its held answer ends with it; the resumed
        // turn (a new agent, started and loaded, asked the same) holds again and is let through.
        let left = crate::daemon::until_all_gone(&agents, "the kill").await;
        assert!(left.is_empty(), "the agent ends with its worker: {left:?}");
        run.mock.until_holding(0).await?;
        let asked_before = conversation(self, &run.mock).len();
        a.dispatch(&chat, StateAction::ChatTurnResume(ChatTurnResumeAction { turn_id: held.clone() })).await?;
        run.mock.until_holding(1).await?;
        run.mock.release();
        let (c, t) = (chat.clone(), held.clone());
        a.until("the resumed turn to complete", move |m| {
            m.chat(&c).is_some_and(|s| {
                s.active_turn.is_none() && s.turns.last().is_some_and(|x| x.id == t && x.state == TurnState::Complete)
            })
        })
        .await?;
        assert!(conversation(self, &run.mock).len() > asked_before, "the model was asked again");
        let seen = last_seen(self, &run.mock);
        assert!(seen.contains("remember ALPHA") && seen.contains(&turn_text(&remembered)), "loaded: {seen}");
        assert!(seen.contains("cut off before you finished it") && seen.contains("remember BRAVO"), "{seen}");
        let resumed = a.mirror.chat(&chat).and_then(|c| c.turns.last().cloned()).expect("the turn");
        assert!(turn_text(&resumed).contains("released"), "the resumed answer is the turn's: {resumed:#?}");
        a.check_against_snapshot(&chat).await?;
        drop(a);
        first.terminate().await?;
        if let Some(clock) = &run.clock {
            clock.stop()?;
        }

        // After a daemon restart the next message is answered in the loaded conversation.
        let second = run.daemon().await?;
        let mut b = TestClient::connect(&second.url, "b").await?;
        b.subscribe(&session).await?;
        b.subscribe(&chat).await?;
        assert_eq!(b.mirror.chat(&chat).map(|c| c.turns.len()), Some(2), "the store kept both turns");
        let next = b.send(&chat, "what came before?").await?;
        run.mock.until_asked("what came before?").await?;
        let next = b.finished(&chat, &next).await?;
        assert_eq!(next.state, TurnState::Complete, "{next:#?}");
        assert!(run.echoes(&turn_text(&next), "what came before?"), "{next:#?}");
        let seen = last_seen(self, &run.mock);
        assert!(seen.contains("remember ALPHA") && seen.contains("remember BRAVO"), "the history: {seen}");
        assert!(seen.contains("holding on released"), "and the resumed answer: {seen}");
        assert_eq!(b.mirror.chat(&chat).map(|c| c.turns.len()), Some(3), "no replayed turn was added");
        b.check_against_snapshot(&chat).await?;
        b.check_against_snapshot(&session).await?;
        Ok(())
    }
}

/// The refused turn as the person sees it: a call refused as denied, none that succeeded, and,
/// after the first call, the model's reply to what the agent told it (the turn went on and
/// completed).
fn told_no(row: &Row, refused: &Turn) {
    assert_eq!(refused.state, TurnState::Complete, "the turn went on after the refusal: {refused:#?}");
    let calls = tool_calls(&refused.response_parts);
    let denied =
        |c: &ToolCallState| matches!(c, ToolCallState::Cancelled(c) if c.reason == ToolCallCancellationReason::Denied);
    assert!(calls.iter().copied().any(denied), "a call refused as denied: {calls:#?}");
    let call_at = refused.response_parts.iter().position(|p| matches!(p, ResponsePart::ToolCall(_)));
    let after: String = refused.response_parts[call_at.map_or(0, |i| i + 1)..]
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Markdown(md) => Some(md.content.as_str()),
            _ => None,
        })
        .collect();
    assert!(after.contains(row.told_no), "the reply after the refusal shows {:?}: {refused:#?}", row.told_no);
}

/// Installs pi's own example extension that asks before a destructive shell command, in the pi
/// folder a row's entry gives pi (`<home>/agent`).
fn install_permission_gate(program: &Path, home: &Path) -> anyhow::Result<()> {
    let bin_folder = program.parent().unwrap_or(Path::new("."));
    let example = bin_folder.join("../@earendil-works/pi-coding-agent/examples/extensions/permission-gate.ts");
    let extensions = home.join("agent").join("extensions");
    std::fs::create_dir_all(&extensions)?;
    std::fs::copy(&example, extensions.join("permission-gate.ts"))
        .map_err(|e| anyhow::anyhow!("{}: {e}", example.display()))?;
    Ok(())
}

/// Gemini CLI 0.61.0 erases a conversation it is asked to load (`session/load`) in the same UTC
/// minute the conversation was last written: the load starts a record of its own under the same
/// file name (`session-<minute>-<id>.jsonl`) before it reads the conversation back, and then finds
/// none (google-gemini/gemini-cli#28693, open). A person takes a conversation up minutes later; a
/// test does within seconds, twice (after a `kill -9`, after a restart). So the agents a test
/// starts run with their clock moved back (a script node preloads, `NODE_OPTIONS=--require`): four
/// minutes while the conversation begins, two while the first load takes it up, none for the
/// second.
struct EarlierClock {
    dir: tempfile::TempDir,
}

impl EarlierClock {
    /// Four minutes back, for the agents started until [`EarlierClock::later`].
    fn start() -> anyhow::Result<Self> {
        let clock = Self { dir: tempfile::Builder::new().prefix("ahpd-clock-").tempdir()? };
        clock.back(4)?;
        Ok(clock)
    }

    /// The agents started from now on run two minutes back.
    fn later(&self) -> std::io::Result<()> {
        self.back(2)
    }

    /// The agents started from now on run at the real time.
    fn stop(&self) -> std::io::Result<()> {
        std::fs::write(self.dir.path().join("clock.cjs"), "")
    }

    fn back(&self, minutes: i64) -> std::io::Result<()> {
        let shim = format!(
            "const Real = Date;\n\
             const shift = {};\n\
             globalThis.Date = class extends Real {{\n\
               constructor(...a) {{ if (a.length) super(...a); else super(Real.now() + shift); }}\n\
               static now() {{ return Real.now() + shift; }}\n\
             }};\n",
            -minutes * 60_000
        );
        std::fs::write(self.dir.path().join("clock.cjs"), shim)
    }

    fn preload(&self) -> String {
        format!("--require={}", self.dir.path().join("clock.cjs").display())
    }
}

// ---------------------------------------------------------------- the rows

/// A value of `env` as a string.
fn path(p: &Path) -> Value {
    json!(p.display().to_string())
}

/// `[[call NAME {args}]]`.
fn call(name: &str, args: Value) -> String {
    format!("[[call {name} {args}]]")
}

/// Qwen Code, in its OpenAI-compatible sign-in, on the chat completions mock.
pub const QWEN: Row = Row {
    name: "qwen",
    program: crate::installed::qwen_bin,
    entry: |s| {
        let mock = s.mock.chat()?;
        let env = json!({ "OPENAI_BASE_URL": mock.base_url(), "OPENAI_API_KEY": "mock-dummy-key",
                          "OPENAI_MODEL": crate::mocks::openai::MODEL_ID, "HOME": path(s.home) });
        Ok(json!({ "kind": "acp", "preset": "qwen", "env": env }))
    },
    dialect: Dialect::Chat,
    ask: |file| call("run_shell_command", json!({ "command": format!("touch {file}"), "is_background": false })),
    host_tool: Some(HostTool { call: "mcp__ahp__list_sessions", up_front: false }),
    offers: Offers {
        models: &[crate::mocks::openai::MODEL_ID],
        modes: &[],
        starts_in: "default",
        command: Some("compress"),
        keys: &[],
    },
    reaches: Reaches {
        args: &["--acp", "--approval-mode", "default"],
        env: &["QWEN_CODE_NO_RELAUNCH=true", "QWEN_USAGE_STATISTICS_ENABLED=false"],
        process: None,
    },
    reasoning: Some("Let me think about this."),
    adds: Adds { before: false, after: false },
    // Qwen Code ends its prompt on a "no" without telling the model; ahpd tells it and the turn
    // goes on.
    told_no: "mock reply to: I declined",
    quirks: &[
        Quirk::ConversationOpensWith("You are Qwen Code"),
        Quirk::ClassifierMode { mode: "auto", verdict: "shouldBlock" },
    ],
};

/// Gemini CLI, signed in with a key through its gateway, on the Gemini mock.
pub const GEMINI: Row = Row {
    name: "gemini",
    program: crate::installed::gemini_bin,
    entry: |s| {
        let mut env: serde_json::Map<String, Value> =
            s.mock.gemini()?.cli_env().into_iter().map(|(k, v)| (k, json!(v))).collect();
        env.insert("HOME".into(), path(s.home));
        // A load leaves a record of the conversation's id with nothing in it, and Gemini CLI's
        // session retention (on unless turned off) deletes every file of that id at its next start,
        // the conversation with it: a second load finds none (docs/agents.md).
        std::fs::create_dir_all(s.home.join(".gemini"))?;
        let settings = json!({ "general": { "sessionRetention": { "enabled": false } } });
        std::fs::write(s.home.join(".gemini/settings.json"), settings.to_string())?;
        Ok(json!({ "kind": "acp", "preset": "gemini", "env": env }))
    },
    dialect: Dialect::Gemini,
    ask: |file| call("run_shell_command", json!({ "command": format!("touch {file}") })),
    host_tool: Some(HostTool { call: "mcp_ahp_list_sessions", up_front: true }),
    offers: Offers {
        models: &["auto", "gemini-2.5-pro"],
        modes: &[],
        starts_in: "default",
        command: Some("memory"),
        keys: &[],
    },
    reaches: Reaches {
        args: &["--acp"],
        env: &["GEMINI_CLI_TRUST_WORKSPACE=true", "GEMINI_CLI_NO_RELAUNCH=true"],
        process: None,
    },
    reasoning: Some("Let me think about this."),
    adds: Adds { before: false, after: false },
    told_no: "tool said:",
    quirks: &[Quirk::PicksAModel("gemini-2.5-pro"), Quirk::ClockBackBeforeLoads],
};

/// Codex through Zed's codex-acp, its model provider the Responses mock (a `config.toml` in its
/// own `CODEX_HOME`).
pub const CODEX: Row = Row {
    name: "codex",
    program: crate::installed::codex_acp,
    entry: |s| {
        let mock = s.mock.responses()?;
        std::fs::write(s.home.join("config.toml"), mock.codex_config_toml("gpt-5.4-mini"))?;
        let env = json!({ "CODEX_HOME": path(s.home), "MOCK_API_KEY": "mock-dummy-key" });
        Ok(json!({ "kind": "acp", "preset": "codex", "env": env }))
    },
    dialect: Dialect::Responses,
    // A command the model asks to run outside Codex's sandbox, which Codex asks about first.
    ask: |file| {
        call(
            "exec_command",
            json!({ "cmd": format!("touch {file}"), "sandbox_permissions": "require_escalated",
                    "justification": "Do you want to make this file?" }),
        )
    },
    host_tool: Some(HostTool { call: "mcp__ahp__list_sessions", up_front: true }),
    offers: Offers { models: &["gpt-5.4-mini"], modes: &[], starts_in: "", command: None, keys: &[] },
    reaches: Reaches {
        args: &["-c", "analytics.enabled=false", "-c", "approvals_reviewer=user"],
        env: &[],
        process: None,
    },
    reasoning: Some("Let me think"),
    adds: Adds { before: false, after: false },
    // Codex ends its turn on the only "no" it offers; ahpd tells it and the turn goes on.
    told_no: "mock reply to: I declined",
    quirks: &[Quirk::OneRequestPerTurn, Quirk::KeepsAStoppedStream],
};

/// GitHub Copilot CLI in its bring-your-own-key mode, on the chat completions mock.
pub const COPILOT: Row = Row {
    name: "copilot",
    program: crate::installed::copilot_bin,
    entry: |s| {
        let mock = s.mock.chat()?;
        let env = json!({ "HOME": path(s.home), "COPILOT_PROVIDER_BASE_URL": mock.base_url(),
                          "COPILOT_PROVIDER_API_KEY": "mock-dummy-key", "COPILOT_MODEL": crate::mocks::openai::MODEL_ID });
        Ok(json!({ "kind": "acp", "preset": "copilot", "env": env }))
    },
    dialect: Dialect::Chat,
    ask: |file| call("bash", json!({ "command": format!("touch {file}"), "description": "Make a file" })),
    host_tool: Some(HostTool { call: "ahp-list_sessions", up_front: true }),
    // In its bring-your-own-key mode Copilot names no models: the one it was given is all there is.
    offers: Offers {
        models: &[],
        modes: &[],
        starts_in: "session-modes#agent",
        command: None,
        keys: &["acp.allow_all"],
    },
    reaches: Reaches { args: &["--acp"], env: &["COPILOT_AUTO_UPDATE=false"], process: None },
    reasoning: None,
    adds: Adds { before: true, after: false },
    // Copilot ends its prompt on a "no" ("Info: Operation cancelled by user"); ahpd tells it and
    // the turn goes on (the model's echo of it opens with Copilot's date line).
    told_no: "I declined",
    quirks: &[],
};

/// The config entry of opencode or its fork Kilo: the model `mock/mock-model` of an
/// OpenAI-compatible provider pointed at the mock, reaching the program as
/// `<PRESET>_CONFIG_CONTENT` (as a person's `opencode.json` would), with the home as its HOME and
/// XDG folders (where it keeps its sessions).
fn opencode_family(preset: &str, s: &Setup<'_>) -> anyhow::Result<Value> {
    let model = crate::mocks::openai::MODEL_ID;
    let content = json!({
        "provider": { "mock": {
            "npm": "@ai-sdk/openai-compatible", "name": "Mock",
            "options": { "baseURL": s.mock.chat()?.base_url(), "apiKey": "mock-dummy-key" },
            "models": { model: { "name": "Mock Model" } }
        } },
        "model": format!("mock/{model}"),
    });
    let folder = |sub: &str| path(&s.home.join(sub));
    let env = json!({
        "HOME": path(s.home),
        "XDG_CONFIG_HOME": folder(".config"), "XDG_DATA_HOME": folder(".local/share"),
        "XDG_CACHE_HOME": folder(".cache"), "XDG_STATE_HOME": folder(".local/state"),
        format!("{}_CONFIG_CONTENT", preset.to_uppercase()): content.to_string(),
    });
    Ok(json!({ "kind": "acp", "preset": preset, "env": env }))
}

/// opencode, on the chat completions mock.
pub const OPENCODE: Row = Row {
    name: "opencode",
    program: crate::installed::opencode_bin,
    entry: |s| opencode_family("opencode", s),
    dialect: Dialect::Chat,
    ask: |file| call("bash", json!({ "command": format!("touch {file}"), "description": "Make a file" })),
    host_tool: Some(HostTool { call: "ahp_list_sessions", up_front: true }),
    offers: Offers {
        models: &["mock/mock-model"],
        modes: &["build", "plan"],
        starts_in: "build",
        command: Some("review"),
        keys: &[],
    },
    reaches: Reaches {
        args: &["acp"],
        env: &[r#"OPENCODE_PERMISSION={"bash":"ask"}"#, "NPM_CONFIG_OFFLINE=true"],
        process: None,
    },
    reasoning: None,
    adds: Adds { before: false, after: false },
    // opencode ends its prompt on a "no"; ahpd tells it and the turn goes on.
    told_no: "mock reply to: I declined",
    quirks: &[],
};

/// Kilo, opencode's fork, on the chat completions mock.
pub const KILO: Row = Row {
    name: "kilo",
    program: crate::installed::kilo_bin,
    entry: |s| opencode_family("kilo", s),
    ask: |file| call("bash", json!({ "command": format!("touch {file}"), "description": "Make a file" })),
    offers: Offers {
        models: &["mock/mock-model"],
        modes: &["code", "ask", "debug", "orchestrator", "plan"],
        starts_in: "code",
        command: Some("review"),
        keys: &[],
    },
    reaches: Reaches {
        args: &["acp"],
        env: &["KILO_TELEMETRY_LEVEL=off", r#"KILO_PERMISSION={"bash":"ask"}"#],
        process: None,
    },
    // Kilo adds `<environment_details>` to each prompt.
    adds: Adds { before: false, after: true },
    ..OPENCODE
};

/// pi through pi-acp, pi's own folder pointing it at the chat completions mock. pi asks nothing
/// before it runs a tool; a pi extension does (`ctx.ui.select`), which pi-acp turns into
/// `session/request_permission`. pi has no MCP client, so no host tool.
pub const PI: Row = Row {
    name: "pi",
    program: crate::installed::pi_acp,
    entry: |s| {
        let agent_dir = s.home.join("agent");
        std::fs::create_dir_all(&agent_dir)?;
        crate::installed::write_pi_agent_dir(s.mock.chat()?, &agent_dir)?;
        let env = json!({ "PI_CODING_AGENT_DIR": path(&agent_dir), "HOME": path(s.home) });
        Ok(json!({ "kind": "acp", "preset": "pi", "env": env }))
    },
    dialect: Dialect::Chat,
    // The gate asks before a destructive command (`rm -rf`); the file is what shows it ran.
    ask: |file| format!("[[bash rm -rf ./gone && touch {file}]]"),
    host_tool: None,
    offers: Offers { models: &["mock/mock-model"], modes: &[], starts_in: "", command: None, keys: &[] },
    // (pi names its process `pi`.)
    reaches: Reaches {
        args: &[],
        env: &["PI_OFFLINE=1", "PI_TELEMETRY=0", "PI_SKIP_VERSION_CHECK=1", "NPM_CONFIG_OFFLINE=true"],
        process: Some("pi"),
    },
    reasoning: None,
    adds: Adds { before: false, after: false },
    told_no: "Blocked by user",
    quirks: &[Quirk::PermissionGate, Quirk::OptionLabels(&["Yes", "No"]), Quirk::RunsItsToolsUnasked],
};
