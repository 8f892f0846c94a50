//! The ACP session's launcher: the agent process and the conversation in it (spawn, `initialize`,
//! `authenticate`, `session/new` or `session/load`, a fork's source read back), the settings made
//! once it opens, and the changes asked of it since.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol_schema::v1 as acp;
use agent_client_protocol_schema::v1::AGENT_METHOD_NAMES;
use agent_runner::child::{describe_exit, Child, ChildCommand};
use agent_runner::engine::Engine;
use agent_runner::rpc::{Peer, PeerError};
use agent_runner::AgentError;
use ahp_types::actions::{SessionConfigChangedAction, StateAction};
use ahp_types::common::JsonObject;
use protocol::{Cut, McpServer, Start, ToolsEndpoint};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::{request_of, withheld, Ask, AskRequest, NotOffered, Offers};
use crate::fork::History;
use crate::handshake::{initialize_request, Caps, ACP_VERSION, EXIT_GRACE};
use crate::session::{Acp, AcpState};
use crate::shared::Shared;

/// ACP's `auth_required` error code.
pub(crate) const AUTH_REQUIRED: i32 = -32000;

/// A live agent process and the conversation with it.
#[derive(Clone)]
pub(crate) struct Link {
    pub peer: Peer,
    pub process: Arc<Child>,
    pub caps: Caps,
    pub generation: u64,
}

/// Changes asked while no agent ran, made when one next opens.
#[derive(Default)]
pub(crate) struct Wanted {
    pub model: Option<String>,
    pub config: BTreeMap<String, Value>,
}

/// Why the agent is being opened.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Opening {
    /// `session/create` with a new conversation.
    New,
    /// `session/create` resuming one (after a restart of the daemon or of this worker).
    Resume,
    /// The agent died; the next message starts it again.
    Restart,
    /// `session/create` of a fork of another conversation (`Start.cut`): a new session whose first
    /// prompt carries the source's kept turns.
    Fork,
}

impl Acp {
    /// How to set `key` to `value` (as [`Offers::ask`] answers), a mode this session's policy
    /// withholds being one the agent does not offer.
    pub(crate) fn offered_in(&self, state: &AcpState, key: &str, value: &Value) -> Result<Option<Ask>, NotOffered> {
        if withheld(self.restricted, key, value) {
            return Err(NotOffered);
        }
        state.offers.ask(key, value)
    }

    /// The agent process and the conversation in it: spawn, `initialize`, `authenticate`, then
    /// `session/new` or `session/load`, then the settings this session was started or since set
    /// with. On failure the process is stopped and the sentence says why, with its last words.
    pub(crate) async fn connect(
        &self,
        engine: &Engine<Self>,
        opening: Opening,
        fork: Option<&Cut>,
    ) -> Result<(), String> {
        let options = &self.shared.options;
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        let process_cwd = options.cwd.clone().unwrap_or_else(|| self.cwd.clone());
        // Something the agent left behind when it ends (a helper holding its stdout) ends with it.
        let (process, mut pipes) = ChildCommand::new(&options.command)
            .args(&options.args)
            .envs(&options.env)
            .cwd(&process_cwd)
            .end_group_with_leader()
            .confined(self.confined.as_ref())
            .spawn()
            .map_err(|e| format!("{}: {e}", self.provider()))?;
        let process = Arc::new(process);
        let stdin = pipes.take_stdin().map_err(|e| format!("{}: {e}", self.provider()))?;
        let handler = engine.arc().ok_or_else(|| format!("{}: the session closed", self.provider()))?;
        let peer =
            Peer::start_foreign(pipes.stdout, stdin, move |message| Acp::on_message(&handler, generation, message));
        self.watch(engine, peer.clone(), process.clone(), generation);
        let link = Link { peer: peer.clone(), process: process.clone(), caps: Caps::default(), generation };
        match self.handshake(engine, link, opening, fork).await {
            Ok(()) => Ok(()),
            Err(sentence) => {
                peer.close_output();
                process.signal(nix::sys::signal::Signal::SIGTERM);
                process.stop(Duration::from_millis(500)).await;
                process.settle(Duration::from_secs(1)).await;
                peer.end();
                // A refusal needs no stderr beside it; anything else might.
                Err(if process.tail().is_blank() { sentence } else { process.tail().last_words(sentence) })
            }
        }
    }

    /// One step of the handshake, bounded by the start timeout, its answer read as `R`.
    async fn step<R: DeserializeOwned>(
        &self,
        engine: &Engine<Self>,
        link: &Link,
        method: &str,
        params: impl Serialize,
    ) -> Result<R, String> {
        let answer = self.step_value(engine, link, method, params).await?;
        serde_json::from_value(answer).map_err(|why| self.oddly(method, why))
    }

    fn oddly(&self, method: &str, why: impl std::fmt::Display) -> String {
        format!("{}: {} answered {method} oddly: {why}", self.provider(), self.shared.options.command_line())
    }

    /// One step of the handshake, its answer as it came.
    async fn step_value(
        &self,
        engine: &Engine<Self>,
        link: &Link,
        method: &str,
        params: impl Serialize,
    ) -> Result<Value, String> {
        let options = &self.shared.options;
        let (command, provider) = (options.command_line(), self.provider());
        let asked = link.peer.request_value(method, params);
        let answer = tokio::select! {
            answer = tokio::time::timeout(options.start_timeout, asked) => answer,
            _ = engine.closing().cancelled() => return Err(format!("{provider}: the session closed while {command} was starting")),
        };
        match answer {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(PeerError::Rpc(error)))
                if error.code == AUTH_REQUIRED && method != AGENT_METHOD_NAMES.authenticate =>
            {
                Err(self.sign_in_needed(&link.caps))
            }
            Ok(Err(PeerError::Rpc(error))) => Err(format!("{provider}: {command} refused {method}: {}", error.message)),
            Ok(Err(PeerError::Decode(why))) => Err(self.oddly(method, why)),
            Ok(Err(PeerError::Closed)) => {
                link.process.settle(Duration::from_secs(1)).await;
                Err(format!("{provider}: {command} {} before it answered {method}", how_it_ended(&link.process)))
            }
            Err(_) => Err(format!(
                "{provider}: {command} did not answer {method} within {} s, so it was stopped",
                options.start_timeout.as_secs_f64()
            )),
        }
    }

    pub(crate) fn sign_in_needed(&self, caps: &Caps) -> String {
        format!(
            "{}: this ACP server wants to be signed in before it answers, and offers {}; set the authenticate option to the one to use",
            self.provider(),
            sign_ins(caps)
        )
    }

    async fn handshake(
        &self,
        engine: &Engine<Self>,
        mut link: Link,
        opening: Opening,
        fork: Option<&Cut>,
    ) -> Result<(), String> {
        let provider = self.provider().to_owned();
        let options = self.shared.options.clone();
        let init: acp::InitializeResponse =
            self.step(engine, &link, AGENT_METHOD_NAMES.initialize, initialize_request()).await?;
        if init.protocol_version != ACP_VERSION {
            return Err(format!(
                "{provider}: {} speaks ACP version {}, and this host speaks {ACP_VERSION}",
                options.command_line(),
                init.protocol_version
            ));
        }
        link.caps = Caps::from_answer(&init);
        self.shared.learn_attachments(link.caps.attachments());
        if let Some(auth) = &options.authenticate {
            if !link.caps.auth_methods.contains(&auth.method_id) {
                return Err(format!("{provider} offers {}, not {}", sign_ins(&link.caps), auth.method_id));
            }
            let authenticate = acp::AuthenticateRequest::new(auth.method_id.clone());
            let _: Value = self.step_value(engine, &link, AGENT_METHOD_NAMES.authenticate, authenticate).await?;
        }
        let endpoint = self.tools_endpoint.as_ref().filter(|_| options.host_tools);
        let servers = mcp_servers(&provider, self.mcp_servers.as_ref(), endpoint, link.caps.mcp_http);
        let cwd = self.cwd.clone();
        if let Some(cut) = fork {
            self.read_fork(engine, &link, cut).await?;
        }
        let known = engine.lock().own.acp_id.clone();
        let (acp_id, answer) = match (opening, known) {
            (Opening::Resume | Opening::Restart, Some(id)) if link.caps.load_session => {
                {
                    let mut state = engine.lock();
                    state.own.loading = true;
                    state.own.replay_heard = std::time::Instant::now();
                    state.own.replayed.clear();
                }
                let load = acp::LoadSessionRequest::new(id.clone(), cwd).mcp_servers(servers);
                let loaded = self.step_value(engine, &link, AGENT_METHOD_NAMES.session_load, load).await;
                if loaded.is_ok() {
                    let_replay_end(engine).await;
                }
                let mut state = engine.lock();
                state.own.loading = false;
                let replayed = std::mem::take(&mut state.own.replayed);
                let words = self.instructions.join("\n\n");
                if loaded.is_ok() && !words.trim().is_empty() && !replayed.contains(&words) {
                    // The conversation never heard these words (or not all of them): they open
                    // its next prompt, as they opened its first.
                    state.own.first_prompt = true;
                }
                (id, loaded?)
            }
            (Opening::Resume, Some(id)) => {
                return Err(format!(
                    "{provider}: this ACP server cannot load a session, so \"{id}\" cannot be resumed"
                ));
            }
            (opening, _) => {
                let mut new = acp::NewSessionRequest::new(cwd).mcp_servers(servers);
                if link.caps.additional_directories {
                    let more = self.additional_directories.iter().map(PathBuf::from).collect::<Vec<_>>();
                    new = new.additional_directories(more);
                }
                let answer = self.step_value(engine, &link, AGENT_METHOD_NAMES.session_new, new).await?;
                let opened =
                    acp::NewSessionResponse::deserialize(&answer).map_err(|why| self.oddly("session/new", why))?;
                if opening == Opening::Restart {
                    // Said in the turn that started it again, and the new conversation opens
                    // with the session's instructions as the first one did.
                    let notice = format!(
                        "{provider}: the agent was started again and cannot load its conversation, so a new one began"
                    );
                    tracing::warn!("{notice}");
                    let mut state = engine.lock();
                    state.own.first_prompt = true;
                    if let Some(turn) = state.turn() {
                        turn.map.notice(&notice);
                    }
                }
                (opened.session_id.to_string(), answer)
            }
        };
        {
            let mut state = engine.lock();
            state.own.acp_id = Some(acp_id);
            state.own.link = Some(link.clone());
        }
        // A new or resumed session says every value the agent starts at; a restarted one only what moved.
        self.learn(engine, Offers::from_answer(&answer), opening != Opening::Restart);
        self.apply_wanted(engine, &link).await;
        Ok(())
    }

    /// Reads the turns a fork keeps from its source: the source loaded in this agent
    /// (`session/load`), its replay kept turn by turn, less the turns the fork leaves out; then
    /// the source is closed again where the agent can. They open the fork's first prompt.
    async fn read_fork(&self, engine: &Engine<Self>, link: &Link, cut: &Cut) -> Result<(), String> {
        let provider = self.provider();
        if !link.caps.load_session {
            return Err(format!(
                "{provider}: this ACP server cannot load a session, so conversation \"{}\" cannot be forked",
                cut.source
            ));
        }
        {
            let mut state = engine.lock();
            state.own.loading = true;
            state.own.replay_heard = std::time::Instant::now();
            state.own.history = Some(History::default());
        }
        let load = acp::LoadSessionRequest::new(cut.source.clone(), self.cwd.clone());
        let loaded = self.step_value(engine, link, AGENT_METHOD_NAMES.session_load, load).await;
        if loaded.is_ok() {
            let_replay_end(engine).await;
        }
        let history = {
            let mut state = engine.lock();
            state.own.loading = false;
            state.own.replayed.clear();
            state.own.history.take().unwrap_or_default()
        };
        loaded?;
        if link.caps.close_session {
            let close = acp::CloseSessionRequest::new(cut.source.clone());
            if let Err(why) = self.step_value(engine, link, AGENT_METHOD_NAMES.session_close, close).await {
                tracing::info!(provider, "the fork's source stays open in its agent: {why}");
            }
        }
        let mut state = engine.lock();
        state.own.fork_context = crate::fork::context(&history.kept(cut.dropped.len()));
        state.own.first_prompt = true;
        Ok(())
    }

    /// Takes what the agent now offers: the values that moved are said to every client, the
    /// models and controls reach the agent's probe and schema.
    pub(crate) fn learn(&self, engine: &Engine<Self>, offers: Offers, all: bool) {
        let moved: JsonObject = {
            let mut state = engine.lock();
            let values = offers.values();
            let moved = values
                .iter()
                .filter(|(k, v)| all || state.own.values.get(*k) != Some(*v))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            state.own.values.extend(values);
            state.own.offers = offers.clone();
            moved
        };
        if !moved.is_empty() {
            let said = SessionConfigChangedAction { config: moved, replace: None };
            engine.host().emit_session(StateAction::SessionConfigChanged(said));
        }
        self.shared.learn_offers(&offers);
    }

    /// Learns what the agent offers once `change` moved it.
    pub(crate) fn moved(&self, engine: &Engine<Self>, change: impl FnOnce(&mut Offers)) {
        let mut offers = engine.lock().own.offers.clone();
        change(&mut offers);
        self.learn(engine, offers, false);
    }

    /// Makes the settings this session was started with or given while no agent ran.
    async fn apply_wanted(&self, engine: &Engine<Self>, link: &Link) {
        let wanted = std::mem::take(&mut engine.lock().own.wanted);
        let provider = self.provider();
        if let Some(model) = wanted.model {
            let ask = engine.lock().own.offers.ask_model(provider, &model).map_err(|e| e.to_string());
            if let Err(why) = async { self.ask(engine, link, &ask?).await }.await {
                tracing::warn!(provider, model, why, "the model this session asked for was not set");
            }
        }
        for (key, value) in wanted.config {
            let ask = self.offered_in(&engine.lock().own, &key, &value);
            match ask {
                Ok(Some(ask)) => {
                    if let Err(why) = self.ask(engine, link, &ask).await {
                        tracing::warn!(provider, key, why, "a setting was not made");
                    }
                }
                Ok(None) => {}
                Err(_) => tracing::warn!(provider, key, %value, "the agent does not offer this value"),
            }
        }
    }

    /// Asks the agent for a change and learns what it answers.
    pub(crate) async fn ask(&self, engine: &Engine<Self>, link: &Link, ask: &Ask) -> Result<(), String> {
        let Some(acp_id) = engine.lock().own.acp_id.clone() else {
            return Err("no conversation is open".into());
        };
        let Some(request) = request_of(ask, &acp_id) else {
            return Ok(());
        };
        let (peer, method) = (&link.peer, request.method());
        let answer = match request {
            AskRequest::Mode(params) => peer.request_value(method, params).await,
            AskRequest::Option(params) => peer.request_value(method, params).await,
            AskRequest::Model(params) => peer.request_value(method, params).await,
        }
        .map_err(refusal)?;
        match ask {
            // An answer without the options (or one the schema cannot read) moves nothing.
            Ask::SetOption { .. } => {
                if let Ok(answer) = serde_json::from_value::<acp::SetSessionConfigOptionResponse>(answer) {
                    self.moved(engine, |o| o.options = crate::config::parse_options(&answer.config_options));
                }
            }
            Ask::SetMode(id) => self.moved(engine, |o| o.mode_moved(id)),
            Ask::SetModel(id) => self.moved(engine, |o| o.legacy_model_moved(id)),
            Ask::Nothing => {}
        }
        Ok(())
    }

    /// Notices the agent's end while no turn is waiting on it, so the next message starts it again.
    fn watch(&self, engine: &Engine<Self>, peer: Peer, process: Arc<Child>, generation: u64) {
        let Some(watcher) = engine.arc() else { return };
        engine.spawn(async move {
            tokio::select! {
                _ = peer.ended() => {}
                _ = async {
                    process.wait().await;
                    // Something it left behind may hold its stdout open; its answers are over.
                    tokio::time::sleep(EXIT_GRACE).await;
                } => peer.end(),
            }
            let mut state = watcher.lock();
            if state.own.link.as_ref().is_some_and(|l| l.generation == generation) {
                state.own.link = None;
                // Nobody will hear an answer to what it asked.
                state.forget_parked(|parked| parked.generation != generation);
                let provider = watcher.backend().provider().to_owned();
                tracing::warn!(provider, "the ACP agent ended; the next message starts it again");
            }
        });
    }
}

fn sign_ins(caps: &Caps) -> String {
    if caps.auth_methods.is_empty() {
        "no sign-in method".to_owned()
    } else {
        caps.auth_methods.join(", ")
    }
}

/// What went wrong with a request to the agent, in words.
pub(crate) fn refusal(error: PeerError) -> String {
    match error {
        PeerError::Rpc(error) => error.message,
        PeerError::Closed => "the agent's output ended before it answered".to_owned(),
        PeerError::Decode(why) => why,
    }
}

/// How the agent ended, in words, or that it closed its output while it lives on.
pub(crate) fn how_it_ended(process: &Child) -> String {
    if process.has_exited() {
        describe_exit(process.status())
    } else {
        "closed its output".to_owned()
    }
}

/// The session's folder and the folders it may reach: its working directory (which must exist),
/// or a folder of its own under the worker's data dir when it has none.
pub(crate) fn folders_of(shared: &Shared, start: &Start) -> Result<(PathBuf, Vec<PathBuf>), AgentError> {
    let cwd = match &start.working_directory {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if !dir.is_dir() {
                return Err(AgentError::Refused(format!(
                    "{}: the session's folder {} does not exist",
                    shared.provider,
                    dir.display()
                )));
            }
            dir
        }
        None => {
            let base = shared.data_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("ahpd-acp"));
            let name: String = start
                .conversation_id
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
                .collect();
            let dir = base.join("sessions").join(name);
            std::fs::create_dir_all(&dir)
                .map_err(|e| AgentError::Failed(format!("{}: {}: {e}", shared.provider, dir.display())))?;
            dir
        }
    };
    let mut roots = vec![cwd.clone()];
    roots.extend(start.additional_directories.iter().map(PathBuf::from));
    Ok((cwd, roots))
}

/// The MCP servers handed to `session/new`: the deployment's, in ACP's shapes, then the session's
/// own endpoint as `ahp`, where the agent takes servers over HTTP.
fn mcp_servers(
    provider: &str,
    configured: Option<&BTreeMap<String, McpServer>>,
    endpoint: Option<&ToolsEndpoint>,
    http: bool,
) -> Vec<acp::McpServer> {
    let headers = |map: &BTreeMap<String, String>| -> Vec<acp::HttpHeader> {
        map.iter().map(|(name, value)| acp::HttpHeader::new(name.clone(), value.clone())).collect()
    };
    let mut servers = Vec::new();
    for (name, server) in configured.into_iter().flatten() {
        if name == "ahp" && endpoint.is_some() && http {
            tracing::warn!(provider, "an MCP server named ahp was left out: the name is the host tools'");
            continue;
        }
        match server {
            McpServer::Stdio { command, args, cwd, env } => {
                if cwd.is_some() {
                    tracing::info!(
                        provider,
                        server = name,
                        "ACP carries no cwd for a stdio MCP server; it starts where the agent does"
                    );
                }
                let env = env.iter().map(|(name, value)| acp::EnvVariable::new(name.clone(), value.clone())).collect();
                servers.push(acp::McpServer::Stdio(
                    acp::McpServerStdio::new(name.clone(), command.clone()).args(args.clone()).env(env),
                ));
            }
            McpServer::Http { url, headers: pairs } if http => {
                servers.push(acp::McpServer::Http(
                    acp::McpServerHttp::new(name.clone(), url.clone()).headers(headers(pairs)),
                ));
            }
            McpServer::Http { .. } => {
                tracing::info!(
                    provider,
                    server = name,
                    "this ACP server takes no MCP server over HTTP, so it was left out"
                );
            }
        }
    }
    match endpoint {
        Some(endpoint) if http => {
            let bearer = acp::HttpHeader::new("Authorization", format!("Bearer {}", endpoint.token));
            servers
                .push(acp::McpServer::Http(acp::McpServerHttp::new("ahp", endpoint.url.clone()).headers(vec![bearer])));
        }
        Some(_) => tracing::info!(
            provider,
            "ahp: this ACP server takes no MCP server over HTTP, so the host tools were left out"
        ),
        None => {}
    }
    servers
}

/// How long the agent stays quiet after answering `session/load` before its replay is taken
/// as ended, and the most a trailing replay is waited for.
const REPLAY_QUIET: Duration = Duration::from_millis(150);
const REPLAY_MOST: Duration = Duration::from_secs(10);

/// Waits out a replay that trails the answer to `session/load`. The ACP spec has an agent answer
/// the load once the whole conversation is replayed, but Gemini CLI (0.61) answers while its
/// replay is still being written: read as live, its tail would land in the next prompt's reply.
/// What arrives until the agent has been quiet a moment is the replay's.
async fn let_replay_end(engine: &Engine<Acp>) {
    let most = tokio::time::Instant::now() + REPLAY_MOST;
    loop {
        let heard = tokio::time::Instant::from_std(engine.lock().own.replay_heard);
        let quiet_at = (heard + REPLAY_QUIET).min(most);
        if tokio::time::Instant::now() >= quiet_at {
            return;
        }
        tokio::time::sleep_until(quiet_at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mcp_servers_take_acp_shapes_and_the_endpoint_needs_http() {
        let mut configured = BTreeMap::new();
        configured.insert(
            "files".to_owned(),
            McpServer::Stdio {
                command: "srv".into(),
                args: vec!["/x".into()],
                cwd: Some("/srv".into()),
                env: [("T".to_owned(), "1".to_owned())].into_iter().collect(),
            },
        );
        configured.insert(
            "issues".to_owned(),
            McpServer::Http {
                url: "http://i".into(),
                headers: [("H".to_owned(), "v".to_owned())].into_iter().collect(),
            },
        );
        let endpoint = ToolsEndpoint { url: "http://127.0.0.1:1/ahp-mcp/x".into(), token: "tok".into() };
        let json = |servers: Vec<acp::McpServer>| -> Vec<Value> {
            servers.into_iter().map(|s| serde_json::to_value(s).expect("json")).collect()
        };
        let with_http = json(mcp_servers("p", Some(&configured), Some(&endpoint), true));
        assert_eq!(
            with_http,
            vec![
                json!({"name": "files", "command": "srv", "args": ["/x"], "env": [{"name": "T", "value": "1"}]}),
                json!({"type": "http", "name": "issues", "url": "http://i", "headers": [{"name": "H", "value": "v"}]}),
                json!({"type": "http", "name": "ahp", "url": "http://127.0.0.1:1/ahp-mcp/x",
                       "headers": [{"name": "Authorization", "value": "Bearer tok"}]}),
            ]
        );
        let without_http = json(mcp_servers("p", Some(&configured), Some(&endpoint), false));
        assert_eq!(without_http.len(), 1);
        assert_eq!(without_http[0]["name"], "files");
    }
}
