//! The scenarios the `opencode` preset and its fork `kilo` are run through for real (their test
//! files are tests/preset_opencode.rs and tests/preset_kilo.rs): `<program> acp` through the
//! daemon and the official client, its model an OpenAI-compatible provider pointed at the
//! scripted Chat Completions mock. The handshake and the agent's offers, a streamed turn, a host
//! tool called through `/ahp-mcp`, a permission asked and answered in the client, a cancel, a turn
//! `kill -9` of the worker cut off resumed, and the conversation loaded again after a daemon
//! restart, judged by what the mock model is sent. Every chat folded through the official reducers equals the host's
//! snapshot.

use std::path::{Path, PathBuf};

use ahp_types::actions::{ChatTurnCancelledAction, ChatTurnResumeAction, StateAction};
use ahp_types::state::{ResponsePart, RootState, ToolCallCancellationReason, ToolCallState, TurnState};
use serde_json::{json, Value};

use crate::installed::opencode_entry;
use crate::mocks::openai::{MockOpenAi, MODEL_ID};
use crate::{turn_text, Daemon, DaemonOptions, TestClient};

/// How long an agent restarted by ahpd (after a `kill -9`, after a daemon restart) may take to
/// start, load its conversation and ask the model: a failure bound, not a measure. The worker's
/// probe starts a second agent beside it, and a kilo boot alone takes 10 to 40 s on a loaded
/// 2-core machine.
const AGENT_START: std::time::Duration = std::time::Duration::from_secs(120);

/// One program of the family, installed, and what it is expected to offer.
pub struct Family {
    /// The preset's name (and the provider id the tests give it).
    pub preset: &'static str,
    /// The installed program.
    pub bin: PathBuf,
    /// Its agents, which ahpd offers as modes, in its order.
    pub modes: &'static [&'static str],
}

impl Family {
    /// The preset `preset` run by `bin`, or `None` (saying the test skipped, and why) when it is
    /// not installed.
    pub fn installed(
        preset: &'static str,
        bin: Result<PathBuf, String>,
        modes: &'static [&'static str],
    ) -> Option<Self> {
        match bin {
            Ok(bin) => Some(Self { preset, bin, modes }),
            Err(why) => {
                eprintln!("skipped: {why}");
                None
            }
        }
    }

    /// A daemon whose only agent is the preset against `mock`, its own files in `home`, `config`
    /// laid over the model's.
    fn options(&self, mock: &MockOpenAi, home: &Path, config: Value) -> DaemonOptions {
        let entry = opencode_entry(self.preset, &self.bin, mock, home, config);
        DaemonOptions::with_config(json!({ "agents": { self.preset: entry } }))
    }

    fn temp(&self, what: &str) -> anyhow::Result<tempfile::TempDir> {
        Ok(tempfile::Builder::new().prefix(&format!("ahpd-{}-{what}-", self.preset)).tempdir()?)
    }

    /// Once the daemon's startup probe has said what the agent offers (the configured model among
    /// it), a session in `folder`: (session, chat). One agent process starts at a time, as a
    /// person's first session after the daemon starts does (on a loaded 2-core machine two booting
    /// at once take longer than a wait's patience).
    async fn open(&self, a: &mut TestClient, folder: &Path) -> anyhow::Result<(String, String)> {
        self.offered(a).await?;
        a.create_session_in(self.preset, folder).await
    }

    /// Waits until the root state lists the agent's models, the configured one among them.
    async fn offered(&self, a: &mut TestClient) -> anyhow::Result<()> {
        let (configured, preset) = (format!("mock/{MODEL_ID}"), self.preset);
        a.until("the probe's offer", |m| models(m.root(), preset).contains(&configured)).await
    }

    /// The handshake (the agent's models, modes and commands offered before any session, and the
    /// session opens) and a streamed turn.
    pub async fn opens_with_its_offers_and_streams_a_turn(&self) -> anyhow::Result<()> {
        let mock = MockOpenAi::start().await?;
        let (home, folder) = (self.temp("home")?, self.temp("folder")?);
        let daemon = Daemon::start_with(self.options(&mock, home.path(), json!({}))).await?;
        let mut a = TestClient::connect(&daemon.url, "a").await?;
        self.offered(&mut a).await?;
        let preset = self.preset;
        let resolved = a
            .request("resolveSessionConfig", json!({ "channel": ahp_types::ROOT_RESOURCE_URI, "provider": preset }))
            .await?;
        let modes = &resolved["schema"]["properties"]["permissionMode"]["enum"];
        assert_eq!(modes, &json!(self.modes), "the agent's agents are the modes: {resolved}");
        let commands = resolved["_meta"]["commands"].as_array().cloned().unwrap_or_default();
        assert!(commands.iter().any(|c| c["name"] == "review"), "and its commands: {resolved}");
        let (session, chat) = a.create_session_in(preset, folder.path()).await?;

        // Twenty words, one a piece.
        let turn = a.turn(&chat, "hello there [[slow]]").await?;
        assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
        let words: Vec<String> = (0..20).map(|i| format!("w{i}")).collect();
        assert_eq!(turn_text(&turn), words.join(" "), "{turn:?}");
        let deltas = a.envelopes.iter().filter(|e| e.channel == chat && matches!(e.action, StateAction::ChatDelta(_)));
        assert!(deltas.count() >= 2, "the answer streamed in pieces");
        let seen = last_seen(&mock);
        assert!(seen.contains("hello there"), "the prompt reached the model: {seen}");

        a.check_against_snapshot(&chat).await?;
        a.check_against_snapshot(&session).await?;
        Ok(())
    }

    /// The model calls `list_sessions` of the session's `/ahp-mcp` and hears its real answer.
    pub async fn calls_a_host_tool_through_ahp_mcp(&self) -> anyhow::Result<()> {
        let mock = MockOpenAi::start().await?;
        let (home, folder) = (self.temp("home")?, self.temp("folder")?);
        let daemon = Daemon::start_with(self.options(&mock, home.path(), json!({}))).await?;
        let mut a = TestClient::connect(&daemon.url, "a").await?;
        let (session, chat) = self.open(&mut a, folder.path()).await?;
        let session_id = session.trim_start_matches("ahp-session:/").to_owned();

        let listed = a.turn(&chat, "[[call ahp_list_sessions {}]]").await?;
        assert_eq!(listed.state, TurnState::Complete, "{listed:?}");
        let calls = tool_calls(&listed.response_parts);
        assert!(matches!(calls[..], [ToolCallState::Completed(c)] if c.success), "{calls:?}");
        let requests = mock.turn_requests();
        let offered = requests.first().map(tool_names).unwrap_or_default();
        assert!(offered.iter().any(|n| n == "ahp_list_sessions"), "the host's tools offered: {offered:?}");
        let answered = last_seen(&mock);
        assert!(answered.contains(&session_id), "list_sessions named this very session to the model: {answered}");
        assert!(turn_text(&listed).starts_with("tool said:"), "{listed:?}");
        a.check_against_snapshot(&chat).await?;
        Ok(())
    }

    /// With the person's rule "ask before a command", the agent asks the client: allowed, the
    /// command runs in the session's folder; denied, it does not.
    pub async fn asks_the_client_before_a_command(&self) -> anyhow::Result<()> {
        let mock = MockOpenAi::start().await?;
        let (home, folder) = (self.temp("home")?, self.temp("folder")?);
        let ask = json!({ "permission": { "bash": "ask" } });
        let daemon = Daemon::start_with(self.options(&mock, home.path(), ask)).await?;
        let mut a = TestClient::connect(&daemon.url, "a").await?;
        let (session, chat) = self.open(&mut a, folder.path()).await?;
        let bash = |file: &str| {
            let args = json!({ "command": format!("touch {file}"), "description": "Make a file" });
            format!("[[call bash {args}]]")
        };

        let allowed = a.send(&chat, &bash("allowed.txt")).await?;
        let waiting = a.until_waiting_calls(&chat, 1).await?;
        let asked = a.mirror.chat(&chat).and_then(|c| c.active_turn.clone()).expect("a running turn");
        match tool_calls(&asked.response_parts)[..] {
            [ToolCallState::PendingConfirmation(p)] => {
                let options = p.options.clone().unwrap_or_default();
                assert!(options.len() >= 2, "the agent's own options: {p:?}");
                let approve = ahp_types::state::ConfirmationOptionKind::Approve;
                assert_eq!(options[0].kind, approve, "approvals first: {p:?}");
            }
            ref other => panic!("one call waits for the person: {other:?}"),
        }
        a.check_against_snapshot(&session).await?;
        a.confirm(&chat, &waiting[0].0, &waiting[0].1, true).await?;
        let turn = a.finished(&chat, &allowed).await?;
        assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
        let calls = tool_calls(&turn.response_parts);
        assert!(matches!(calls[..], [ToolCallState::Completed(c)] if c.success), "{calls:?}");
        assert!(folder.path().join("allowed.txt").exists(), "the allowed command ran");

        let denied = a.send(&chat, &bash("denied.txt")).await?;
        let waiting = a.until_waiting_calls(&chat, 1).await?;
        a.confirm(&chat, &waiting[0].0, &waiting[0].1, false).await?;
        let turn = a.finished(&chat, &denied).await?;
        assert!(!folder.path().join("denied.txt").exists(), "the denied command did not run");
        let calls = tool_calls(&turn.response_parts);
        assert!(
            matches!(calls[..], [ToolCallState::Cancelled(c)] if c.reason == ToolCallCancellationReason::Denied),
            "{calls:?}"
        );
        a.check_against_snapshot(&chat).await?;
        Ok(())
    }

    /// A turn stopped while its answer streams ends cancelled (the model's connection closed), and
    /// the next one is answered.
    pub async fn is_cancelled_mid_turn_and_answers_the_next(&self) -> anyhow::Result<()> {
        let mock = MockOpenAi::start().await?;
        let (home, folder) = (self.temp("home")?, self.temp("folder")?);
        let daemon = Daemon::start_with(self.options(&mock, home.path(), json!({}))).await?;
        let mut a = TestClient::connect(&daemon.url, "a").await?;
        let (_, chat) = self.open(&mut a, folder.path()).await?;

        let long = a.send(&chat, "[[hold]] wait for me").await?;
        let c = chat.clone();
        a.until("the answer to start streaming", move |m| {
            m.chat(&c).and_then(|s| s.active_turn.as_ref()).is_some_and(|t| !t.response_parts.is_empty())
        })
        .await?;
        let stop = ChatTurnCancelledAction { turn_id: long.clone(), duration: 0, meta: None };
        a.dispatch(&chat, StateAction::ChatTurnCancelled(stop)).await?;
        let stopped = a.finished(&chat, &long).await?;
        assert_eq!(stopped.state, TurnState::Cancelled, "{stopped:?}");

        let next = a.turn(&chat, "still there?").await?;
        assert_eq!(next.state, TurnState::Complete, "{next:?}");
        assert!(turn_text(&next).starts_with("mock reply to: still there?"), "{next:?}");
        assert_eq!(mock.holding(), 0, "the held answer's connection was closed by the cancel");
        a.check_against_snapshot(&chat).await?;
        Ok(())
    }

    /// `kill -9` of the worker mid-answer fails the turn, resumably; `chat/turnResume` starts the
    /// agent again, which loads the conversation (`session/load`) from its own store, and the turn
    /// completes. After a daemon restart the next message loads it again. Each time the model hears
    /// the earlier turns, and the history the agent replays is not shown again.
    pub async fn resumes_a_turn_cut_by_a_kill_9_and_loads_after_a_restart(&self) -> anyhow::Result<()> {
        let mock = MockOpenAi::start().await?;
        let (home, folder, daemon_home) = (self.temp("home")?, self.temp("folder")?, self.temp("daemon")?);
        let options = || self.options(&mock, home.path(), json!({}));
        let mut first = Daemon::start_in(daemon_home.path(), options()).await?;
        let mut a = TestClient::connect(&first.url, "a").await?;
        let (session, chat) = self.open(&mut a, folder.path()).await?;
        assert_eq!(a.turn(&chat, "remember ALPHA").await?.state, TurnState::Complete);

        let held = a.send(&chat, "[[hold]] remember BRAVO").await?;
        let c = chat.clone();
        a.until("the answer to start streaming", move |m| {
            m.chat(&c).and_then(|s| s.active_turn.as_ref()).is_some_and(|t| !t.response_parts.is_empty())
        })
        .await?;
        let worker = first.worker().ok_or_else(|| anyhow::anyhow!("no worker"))?;
        let agents = crate::daemon::descendants(worker);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), nix::sys::signal::Signal::SIGKILL)?;
        let lost = a.finished(&chat, &held).await?;
        assert_eq!(lost.state, TurnState::Error, "{lost:?}");
        assert!(
            matches!(lost.response_parts.last(), Some(ResponsePart::Error(e)) if e.resumable == Some(true)),
            "the error says it can be resumed: {:?}",
            lost.response_parts.last()
        );

        // The agent does not outlive its worker, and its held answer ends with it; the resumed
        // request (a new agent, started and loaded, asked the same) holds again, and is let through.
        let left = crate::daemon::until_all_gone(&agents, "the kill").await;
        assert!(left.is_empty(), "the agent ends with its worker: {left:?}");
        mock.until_holding(0, crate::PATIENCE).await.map_err(anyhow::Error::msg)?;
        a.dispatch(&chat, StateAction::ChatTurnResume(ChatTurnResumeAction { turn_id: held.clone() })).await?;
        mock.until_holding(1, AGENT_START).await.map_err(anyhow::Error::msg)?;
        mock.release();
        let (c, t) = (chat.clone(), held.clone());
        a.until("the resumed turn to complete", move |m| {
            m.chat(&c).is_some_and(|s| {
                s.active_turn.is_none() && s.turns.last().is_some_and(|x| x.id == t && x.state == TurnState::Complete)
            })
        })
        .await?;
        let seen = last_seen(&mock);
        assert!(
            seen.contains("remember ALPHA") && seen.contains("remember BRAVO"),
            "the conversation was loaded: {seen}"
        );
        let roles = mock.turn_requests().last().map(roles).unwrap_or_default();
        assert!(roles.iter().any(|r| r == "assistant"), "with the first answer: {roles:?}");
        a.check_against_snapshot(&chat).await?;
        drop(a);
        first.terminate().await?;

        let second = Daemon::start_in(daemon_home.path(), options()).await?;
        let mut b = TestClient::connect(&second.url, "b").await?;
        b.subscribe(&session).await?;
        b.subscribe(&chat).await?;
        assert_eq!(b.mirror.chat(&chat).map(|c| c.turns.len()), Some(2), "the store kept both turns");
        // (The agent starts and loads before the model is asked: a wait of its own.)
        let asked_before = mock.requests().len();
        let next = b.send(&chat, "what came before?").await?;
        mock.wait_for_requests(asked_before + 1, AGENT_START).await.map_err(anyhow::Error::msg)?;
        let next = b.finished(&chat, &next).await?;
        assert_eq!(next.state, TurnState::Complete, "{next:?}");
        assert!(turn_text(&next).starts_with("mock reply to: what came before?"), "{next:?}");
        let seen = last_seen(&mock);
        assert!(
            seen.contains("remember ALPHA") && seen.contains("remember BRAVO"),
            "the history reached the model: {seen}"
        );
        assert!(seen.contains("holding on released"), "and the resumed answer: {seen}");
        assert_eq!(b.mirror.chat(&chat).map(|c| c.turns.len()), Some(3), "{:?}", b.mirror.chat(&chat));
        b.check_against_snapshot(&chat).await?;
        b.check_against_snapshot(&session).await?;
        Ok(())
    }
}

fn tool_calls(parts: &[ResponsePart]) -> Vec<&ToolCallState> {
    parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(tc) => Some(&tc.tool_call),
            _ => None,
        })
        .collect()
}

/// The names of the tools a request offers the model.
fn tool_names(request: &crate::mocks::openai::Recorded) -> Vec<String> {
    let tools = request.body.get("tools").and_then(Value::as_array).cloned().unwrap_or_default();
    tools.iter().filter_map(|t| t.pointer("/function/name")?.as_str().map(str::to_owned)).collect()
}

/// The roles of a request's messages, in order.
fn roles(request: &crate::mocks::openai::Recorded) -> Vec<String> {
    request.messages().iter().filter_map(|m| m["role"].as_str().map(str::to_owned)).collect()
}

/// The text of the last turn the model was asked for (not a title).
fn last_seen(mock: &MockOpenAi) -> String {
    mock.turn_requests().last().map(|r| r.all_text()).unwrap_or_default()
}

/// The model ids the root state lists for `provider`.
fn models(root: Option<&RootState>, provider: &str) -> Vec<String> {
    let agent = root.and_then(|r| r.agents.iter().find(|a| a.provider == provider));
    agent.map(|a| a.models.iter().map(|m| m.id.clone()).collect()).unwrap_or_default()
}
