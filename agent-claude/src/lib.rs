//! The Claude Code backend: the real `claude` CLI driven headless over stream-json and its
//! control channel, as a worker of kind `claude` (issue 7).
//!
//! One `claude -p --input-format stream-json --output-format stream-json --verbose
//! --include-partial-messages --permission-prompt-tool stdio` process per chat, kept open between
//! turns, started in the session's folder with `--session-id=<uuid>` (or `--resume=<uuid>`).
//! Its output is mapped to AHP as seed 004 requires ([`mapper`]); its permission questions
//! become confirmations and `AskUserQuestion` a chat input request ([`permissions`]); the host's
//! and clients' tools reach the model through two in-process MCP servers, `host` and `client`
//! ([`mcp`]). Claude's own sessions are listed and read back from its files without starting
//! anything ([`catalogue`]); models come from the CLI's `initialize` answer at probe time.
//!
//! Config entry `options` ([`options::ClaudeOptions`]): `command` (default `claude`), `args`
//! (extra arguments), `env` (variables over the worker's own, e.g. `ANTHROPIC_BASE_URL`, `HOME`,
//! `CLAUDE_CONFIG_DIR`), `displayName`.
//!
//! **Invariant:** this crate never depends on `ahpd`; it is a backend on `agent-runner`.

pub mod catalogue;
pub mod launch;
pub mod mapper;
pub mod mcp;
pub mod options;
pub mod permissions;
pub mod process;
pub mod session;
pub mod subagents;
#[cfg(test)]
mod testing;
pub mod tools;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_runner::child::ChildCommand;
use agent_runner::sync::lock;
use agent_runner::{Agent, AgentError, AgentFactory, Session, SessionHost};
use ahp_types::common::JsonObject;
use ahp_types::state::{SessionModelInfo, Turn};
use async_trait::async_trait;
use protocol::{
    AgentDescriptor, AgentFeatures, At, CompletionItem, CompletionsParams, CompletionsResult, InitializeParams, Listed,
    Policy, ProbeResult, SchemaResult, SlashCommand, Start,
};
use serde_json::{json, Value};

use crate::launch::{ForkFrom, SessionSpec};
use crate::options::ClaudeOptions;
use crate::process::Cli;
use crate::session::{ClaudeSession, Initial};

/// The session config key for Claude's permission mode.
pub const PERMISSION_MODE_KEY: &str = "permissionMode";
/// The session config key of the output style, whose values the CLI says (`completions`).
pub const OUTPUT_STYLE_KEY: &str = "outputStyle";
/// The permission modes offered, `default` first.
pub const PERMISSION_MODES: [&str; 4] = ["default", "acceptEdits", "plan", "bypassPermissions"];
const PERMISSION_MODE_LABELS: [&str; 4] = ["Ask before acting", "Accept edits", "Plan only", "Bypass permissions"];
const PERMISSION_MODE_DESCRIPTIONS: [&str; 4] = [
    "Asks before edits and commands it is not sure about",
    "Edits files without asking; still asks before other commands",
    "Reads and plans; changes nothing",
    "Runs everything without asking",
];

/// The mode that never asks.
pub const NEVER_ASK: &str = "bypassPermissions";

/// The permission modes offered under `policy`, in a session confined or not: whether "bypass" is
/// offered is the engine's to decide (`policy::never_ask_offered`): a window whose policy
/// restricts elevated auto-approval is not offered it on the machine itself, and a confined
/// session always is.
pub fn offered_modes(policy: &Policy, confined: bool) -> Vec<&'static str> {
    let restricted = policy.auto_approve_policy_restricted == Some(true);
    let never_ask = agent_runner::engine::policy::never_ask_offered(restricted, confined);
    PERMISSION_MODES.iter().copied().filter(|m| never_ask || *m != NEVER_ASK).collect()
}

/// The mode a session that chose none starts in: the never-ask mode where it is confined
/// (`policy::never_ask_by_default`), else the CLI's own default.
pub fn default_mode(confined: bool) -> &'static str {
    if agent_runner::engine::policy::never_ask_by_default(confined) {
        NEVER_ASK
    } else {
        "default"
    }
}

/// The worker kind's factory: what `ahpd worker claude` runs.
pub fn factory() -> AgentFactory {
    Box::new(|init, _ctx| Ok(Arc::new(Claude::from_init(init)) as Arc<dyn Agent>))
}

/// The Claude Code agent.
pub struct Claude {
    options: ClaudeOptions,
    data_dir: Option<PathBuf>,
    /// The conversations listed before, so listing again reads only the transcripts that changed.
    summaries: Arc<std::sync::Mutex<catalogue::Summaries>>,
    /// The output styles the CLI's `initialize` offered at the last probe: the answers for
    /// `outputStyle`'s completions.
    output_styles: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Claude {
    /// Builds the agent from the handshake's options.
    pub fn from_init(init: &InitializeParams) -> Self {
        Self {
            options: ClaudeOptions::from_json(&init.options),
            data_dir: init.data_dir.as_ref().map(PathBuf::from),
            summaries: Arc::default(),
            output_styles: Arc::default(),
        }
    }

    fn projects(&self) -> Option<PathBuf> {
        self.options.projects_dir()
    }

    /// The instructions `spec` carries that conversation `spec.session_id` was not started with:
    /// the CLI keeps the system prompt its record holds, so words added since (a client's rules,
    /// a tool now offered) must be said in the conversation itself.
    fn unsaid(&self, spec: &SessionSpec, working_directory: &str) -> Option<String> {
        let prompt = spec.append_system_prompt.as_ref()?;
        let projects = self.projects()?;
        let at = At { working_directory: Some(working_directory.to_owned()) };
        let record = std::fs::read_to_string(catalogue::locate(&projects, &spec.session_id, &at)?).ok()?;
        // The record keeps the prompt as a JSON string.
        let kept = serde_json::to_string(prompt).ok()?;
        let kept = kept.trim_matches('"');
        (!record.contains(kept)).then(|| prompt.clone())
    }

    /// Where a cut begins in the CLI's record of its source: the chain entry the first dropped
    /// turn's prompt follows (`--resume-session-at`), or the whole record when no dropped turn is
    /// on it. Refused when the source has no record to copy.
    fn fork_point(&self, cut: &protocol::Cut, working_directory: &str) -> Result<ForkFrom, AgentError> {
        let refused = || {
            AgentError::Refused(format!(
                "Claude Code has no record of conversation {} to go on from an earlier turn of it",
                cut.source
            ))
        };
        let projects = self.projects().ok_or_else(refused)?;
        let at = At { working_directory: Some(working_directory.to_owned()) };
        let path = catalogue::locate(&projects, &cut.source, &at).ok_or_else(refused)?;
        let record = std::fs::read_to_string(path).map_err(|_| refused())?;
        let dropped: Vec<&str> = cut.dropped.iter().filter_map(|t| t.transcript_id.as_deref()).collect();
        let at = catalogue::entry_before(&record, &dropped);
        if at.is_none() && !dropped.is_empty() && dropped.iter().any(|id| record.contains(id)) {
            return Err(AgentError::Refused(format!(
                "The turn to go on from is not in Claude Code's record of conversation {}",
                cut.source
            )));
        }
        Ok(ForkFrom { source: cut.source.clone(), at })
    }

    /// True when Claude's files hold conversation `id` (or where they are is unknown).
    fn has_record(&self, id: &str, working_directory: &str) -> bool {
        match self.projects() {
            Some(projects) => {
                let at = At { working_directory: Some(working_directory.to_owned()) };
                catalogue::locate(&projects, id, &at).is_some()
            }
            None => true,
        }
    }
}

fn schema(policy: &Policy) -> SchemaResult {
    let offered: Vec<usize> =
        offered_modes(policy, false).iter().filter_map(|m| PERMISSION_MODES.iter().position(|p| p == m)).collect();
    let mut mode =
        agent_runner::schema::property("string", "Permissions", Some("When Claude asks before it acts".into()));
    mode.default = Some(json!("default"));
    mode.r#enum = Some(offered.iter().map(|&i| json!(PERMISSION_MODES[i])).collect());
    mode.enum_labels = Some(offered.iter().map(|&i| PERMISSION_MODE_LABELS[i].to_owned()).collect());
    mode.enum_descriptions = Some(offered.iter().map(|&i| PERMISSION_MODE_DESCRIPTIONS[i].to_owned()).collect());
    let mut style = agent_runner::schema::property(
        "string",
        "Output style",
        Some("How Claude writes its answers (its /output-style); set when the session starts".into()),
    );
    style.default = Some(json!("default"));
    style.session_mutable = Some(false);
    agent_runner::schema::schema_of(vec![(PERMISSION_MODE_KEY, mode), (OUTPUT_STYLE_KEY, style)])
}

/// A path handed as a path or a `file://` URI.
fn as_path(s: &str) -> PathBuf {
    PathBuf::from(s.strip_prefix("file://").unwrap_or(s))
}

#[async_trait]
impl Agent for Claude {
    fn descriptor(&self) -> AgentDescriptor {
        AgentDescriptor {
            provider: "claude".into(),
            display_name: self.options.display_name.clone(),
            description: Some("Anthropic's Claude Code, the claude CLI".into()),
            // Each chat of a session is a conversation (and a process) of its own; a fork is the
            // CLI's `--fork-session` at the kept message.
            capabilities: Some(agent_runner::agent::forking_chats()),
            features: AgentFeatures {
                list: true,
                find: true,
                transcript: true,
                probe: true,
                directories: false,
                inherited_chat_config: true,
                steering: true,
                // `--resume` reads the conversation back from Claude's own record.
                resume: true,
                // Its output styles are the CLI's own, learned at the probe.
                completions: vec![OUTPUT_STYLE_KEY.to_owned()],
                transcript_turn_ids: Some("recorded".into()),
                // `--resume-session-at` goes on from the kept message.
                truncate: true,
                // `--resume` and a prompt that says the turn goes on.
                resume_turn: true,
                // Images and PDFs as content blocks of their own; the rest as text.
                attachments: Some(launch::attachment_support()),
                // Its `system/init` says each MCP server's status.
                mcp_status: true,
            },
        }
    }

    fn schema(&self, policy: &Policy) -> SchemaResult {
        schema(policy)
    }

    fn inherited_chat_config(&self, config: &JsonObject) -> JsonObject {
        config.iter().filter(|(k, _)| k.as_str() == PERMISSION_MODE_KEY).map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    async fn probe(&self) -> Result<ProbeResult, AgentError> {
        let cwd = match &self.data_dir {
            Some(dir) => {
                let dir = dir.join("probe");
                std::fs::create_dir_all(&dir).map_err(|e| AgentError::Failed(format!("{}: {e}", dir.display())))?;
                dir
            }
            None => std::env::temp_dir(),
        };
        let launch = ChildCommand::new(&self.options.command)
            .args(["-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"])
            .args(&self.options.args)
            .envs(&self.options.env)
            .cwd(cwd);
        let (cli, _events) = Cli::spawn(launch).map_err(|e| AgentError::Failed(e.to_string()))?;
        let answer = cli.control(json!({"subtype": "initialize", "hooks": null}), Duration::from_secs(60)).await;
        cli.stop().await;
        let answer = answer.map_err(|e| {
            AgentError::Failed(cli.last_words(format!("Claude Code could not be asked what it offers: {e}")))
        })?;
        let styles = answer["available_output_styles"].as_array().cloned().unwrap_or_default();
        *lock(&self.output_styles) = styles.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect();
        Ok(probe_result(&answer))
    }

    async fn completions(&self, params: CompletionsParams) -> Result<CompletionsResult, AgentError> {
        if params.property != OUTPUT_STYLE_KEY {
            return Ok(CompletionsResult::default());
        }
        let styles = lock(&self.output_styles).clone();
        Ok(output_style_items(&styles, params.query.as_deref().unwrap_or_default()))
    }

    async fn list(&self) -> Result<Vec<Listed>, AgentError> {
        let Some(projects) = self.projects() else { return Ok(Vec::new()) };
        let summaries = self.summaries.clone();
        let listing = move || catalogue::list(&mut lock(&summaries), &projects);
        Ok(tokio::task::spawn_blocking(listing).await.unwrap_or_default())
    }

    async fn find(&self, id: &str, at: &At) -> Result<Option<Listed>, AgentError> {
        let Some(projects) = self.projects() else { return Ok(None) };
        let (id, at) = (id.to_owned(), at.clone());
        Ok(tokio::task::spawn_blocking(move || catalogue::find(&projects, &id, &at)).await.unwrap_or_default())
    }

    async fn transcript(
        &self,
        id: &str,
        at: &At,
        kept: &[protocol::KeptResource],
    ) -> Result<Option<Vec<Turn>>, AgentError> {
        let Some(projects) = self.projects() else { return Ok(None) };
        let (id, at, kept) = (id.to_owned(), at.clone(), kept.to_vec());
        let read = move || catalogue::transcript(&projects, &id, &at, &kept);
        Ok(tokio::task::spawn_blocking(read).await.unwrap_or_default())
    }

    fn confines(&self) -> bool {
        true
    }

    async fn create(&self, start: Start, host: SessionHost) -> Result<Arc<dyn Session>, AgentError> {
        // A cut always begins a copy under a new id: the source keeps its record whole.
        let confined = start.confined.clone();
        let cut_in_place = start.cut.as_ref().is_some_and(|c| c.source == start.conversation_id);
        let session_id = match uuid::Uuid::parse_str(&start.conversation_id) {
            Ok(_) if cut_in_place => uuid::Uuid::new_v4().to_string(),
            Ok(id) => id.to_string(),
            Err(_) if start.resume => {
                return Err(AgentError::Refused(format!("{} is not a Claude Code session id", start.conversation_id)));
            }
            // The CLI keeps conversations under uuids: choose one and say so.
            Err(_) => uuid::Uuid::new_v4().to_string(),
        };
        let cwd = match &start.working_directory {
            Some(dir) => as_path(dir),
            None => std::env::current_dir().map_err(|e| AgentError::Failed(format!("no working directory: {e}")))?,
        };
        if !cwd.is_dir() {
            return Err(AgentError::Refused(format!(
                "{} could not be started in {}, which does not exist",
                self.options.command,
                cwd.display()
            )));
        }
        let working = cwd.display().to_string();
        let instructions: Vec<&str> =
            start.instructions.iter().map(String::as_str).filter(|s| !s.trim().is_empty()).collect();
        let spec = SessionSpec {
            command: self.options.command.clone(),
            extra_args: self.options.args.clone(),
            env: self.options.env.clone(),
            session_id,
            cwd,
            additional_directories: start
                .additional_directories
                .iter()
                .map(|d| as_path(d).display().to_string())
                .collect(),
            mcp_config: mcp::config(start.mcp_servers.as_ref(), Some(&working)),
            append_system_prompt: (!instructions.is_empty()).then(|| instructions.join("\n\n")),
            permission_modes: offered_modes(&start.policy, confined.is_some()),
            cli_settings: cli_settings(&start),
            terminal_outputs: start.terminal_outputs,
            confined: confined.clone(),
        };
        let fork = match &start.cut {
            Some(cut) => Some(self.fork_point(cut, &working)?),
            None => None,
        };
        // The host resumes every conversation it created once, turn or no turn; the CLI can only
        // resume one it wrote down. A cut begins a copy, which has no record until its first turn.
        let resume = fork.is_none() && start.resume && self.has_record(&spec.session_id, &working);
        if start.resume && !resume {
            tracing::info!(session = %spec.session_id, "Claude Code has no record of this conversation yet; starting it");
        }
        let permission_mode = start
            .settings
            .get(PERMISSION_MODE_KEY)
            .and_then(Value::as_str)
            .filter(|m| offered_modes(&start.policy, confined.is_some()).contains(m))
            .unwrap_or(default_mode(confined.is_some()))
            .to_owned();
        let model = start.model.as_ref().map(|m| m.id.clone()).filter(|id| id != "default");
        let unsaid_instructions = if resume { self.unsaid(&spec, &working) } else { None };
        let initial = Initial { resume, model, permission_mode, tools: start.tools, unsaid_instructions, fork };
        Ok(Arc::new(ClaudeSession::start(host, spec, initial)))
    }
}

/// What `--settings` carries for a start: the operator's managed settings, and the output style
/// chosen where they do not set one.
fn cli_settings(start: &Start) -> Option<Value> {
    let mut settings = start.policy.managed_settings.clone().and_then(|s| s.as_object().cloned()).unwrap_or_default();
    if let Some(style) = start.settings.get(OUTPUT_STYLE_KEY).and_then(Value::as_str).filter(|s| *s != "default") {
        settings.entry("outputStyle").or_insert(json!(style));
    }
    (!settings.is_empty()).then_some(Value::Object(settings))
}

/// The output styles whose names hold `query` (any case), as completions.
fn output_style_items(styles: &[String], query: &str) -> CompletionsResult {
    let query = query.to_lowercase();
    CompletionsResult {
        items: styles
            .iter()
            .filter(|s| s.to_lowercase().contains(&query))
            .map(|s| CompletionItem { value: json!(s), label: s.clone(), description: None })
            .collect(),
    }
}

/// Models and commands from the CLI's `initialize` answer.
pub fn probe_result(answer: &Value) -> ProbeResult {
    let models = answer["models"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|m| {
            let id = m["value"].as_str()?;
            let mut meta = JsonObject::new();
            for key in ["description", "resolvedModel"] {
                if let Some(v) = m.get(key).filter(|v| !v.is_null()) {
                    meta.insert(key.into(), v.clone());
                }
            }
            Some(SessionModelInfo {
                id: id.to_owned(),
                provider: "claude".into(),
                name: m["displayName"].as_str().unwrap_or(id).to_owned(),
                max_context_window: None,
                max_output_tokens: None,
                max_prompt_tokens: None,
                supports_vision: Some(true),
                policy_state: None,
                config_schema: None,
                meta: (!meta.is_empty()).then_some(meta),
            })
        })
        .collect();
    let commands = answer["commands"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|c| {
            Some(SlashCommand {
                name: c["name"].as_str()?.to_owned(),
                description: c["description"].as_str().map(str::to_owned),
            })
        })
        .collect();
    ProbeResult { models, commands, account: account(&answer["account"]), attachments: None, capabilities: None }
}

/// The account the CLI's `initialize` answer says it bills to (its `/status`), in the shape of
/// VS Code's `vscode.codexAccount`: `type` `apiKey` for a key, `subscription` for a signed-in
/// person (with `email` and `planType`), beside the CLI's own words for where it comes from.
/// `None` when the CLI says nothing of it.
pub fn account(said: &Value) -> Option<Value> {
    let said = said.as_object()?;
    let signed_in = said.get("email").and_then(Value::as_str).is_some();
    let mut account = JsonObject::new();
    account.insert("type".into(), json!(if signed_in { "subscription" } else { "apiKey" }));
    for (from, to) in [
        ("email", "email"),
        ("subscriptionType", "planType"),
        ("organization", "organization"),
        ("apiKeySource", "apiKeySource"),
        ("apiProvider", "apiProvider"),
        ("tokenSource", "tokenSource"),
    ] {
        if let Some(value) = said.get(from).filter(|v| v.is_string()) {
            account.insert(to.into(), value.clone());
        }
    }
    Some(Value::Object(account))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_withholds_bypass_under_a_restricting_policy() {
        let open = schema(&Policy::default());
        assert_eq!(open.schema.properties[PERMISSION_MODE_KEY].r#enum.as_ref().map(Vec::len), Some(4));
        let restricted = schema(&Policy { managed_settings: None, auto_approve_policy_restricted: Some(true) });
        let modes = restricted.schema.properties[PERMISSION_MODE_KEY].r#enum.clone().unwrap_or_default();
        assert!(!modes.contains(&json!("bypassPermissions")));
        assert_eq!(open.defaults[PERMISSION_MODE_KEY], "default");
    }

    #[test]
    fn output_styles_answer_what_was_typed_and_the_chosen_one_joins_the_managed_settings() {
        let styles = vec!["default".to_owned(), "Explanatory".to_owned(), "Learning".to_owned()];
        let items = output_style_items(&styles, "EXP").items;
        assert_eq!(items.iter().map(|i| i.value.clone()).collect::<Vec<_>>(), vec![json!("Explanatory")]);
        assert_eq!(output_style_items(&styles, "").items.len(), 3);

        let mut start: Start = serde_json::from_value(json!({
            "session": "s", "chat": "c", "conversationId": "x", "clientToolTimeoutMs": 0
        }))
        .expect("a start");
        assert_eq!(cli_settings(&start), None, "nothing to say");
        start.settings.insert(OUTPUT_STYLE_KEY.into(), json!("Learning"));
        assert_eq!(cli_settings(&start), Some(json!({"outputStyle": "Learning"})));
        start.policy.managed_settings = Some(json!({"outputStyle": "Concise", "permissions": {"deny": ["Bash"]}}));
        assert_eq!(
            cli_settings(&start),
            Some(json!({"outputStyle": "Concise", "permissions": {"deny": ["Bash"]}})),
            "the operator's say stands"
        );
    }

    #[test]
    fn the_account_is_a_key_or_a_signed_in_person() {
        let keyed =
            account(&json!({"tokenSource": "none", "apiKeySource": "ANTHROPIC_API_KEY", "apiProvider": "firstParty"}));
        assert_eq!(
            keyed,
            Some(
                json!({"type": "apiKey", "tokenSource": "none", "apiKeySource": "ANTHROPIC_API_KEY", "apiProvider": "firstParty"})
            )
        );
        let person = account(&json!({"email": "a@example.com", "subscriptionType": "max", "organization": "Acme"}));
        assert_eq!(
            person,
            Some(json!({"type": "subscription", "email": "a@example.com", "planType": "max", "organization": "Acme"}))
        );
        assert_eq!(account(&Value::Null), None, "a CLI that says nothing of it");
    }

    #[test]
    fn probe_reads_models_and_commands() {
        let answer = json!({"models": [{"value": "default", "displayName": "Default (recommended)", "resolvedModel": "claude-opus-5-5"},
                                       {"value": "haiku", "displayName": "Haiku"}],
                            "commands": [{"name": "compact", "description": "Compact"}]});
        let probe = probe_result(&answer);
        assert_eq!(probe.models.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), vec!["default", "haiku"]);
        assert_eq!(probe.models[0].name, "Default (recommended)");
        assert_eq!(probe.commands[0].name, "compact");
    }
}
