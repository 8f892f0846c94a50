//! A `!` command's turn (seed 004: "A `!` command's turn is the host's"): the turn holds one tool
//! call that names the terminal the command runs on, live while it runs; when the command exits
//! the call completes with the terminal and the exit code, what the terminal printed is kept in
//! the store (so the terminal reads back after a restart), and the turn ends. The backend never
//! hears of it. It is bounded (seed 003): past `shellCommandTimeoutMs` it is stopped and its call
//! fails saying so, and what it printed is kept up to `terminalScrollbackBytes`, the call saying
//! how much was let go when it printed more.

use std::path::Path;
use std::time::{Duration, Instant};

use ahp_types::actions::{
    ChatToolCallCompleteAction, ChatToolCallContentChangedAction, ChatTurnCompleteAction, StateAction,
};
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    TerminalClaim, TerminalCommandResult, TerminalLifecycleState, TerminalRunningLifecycleState, TerminalSessionClaim,
    TerminalState, ToolCallResult, ToolResultContent, ToolResultTerminalContent, ToolResultTextContent,
};

use super::run::Ended;
use crate::bounds::seconds;
use crate::host::facade::{self, output_of, tail, CommandRun, KeptTerminalRecord, RunningCall};
use crate::host::Core;

/// The tool a command's call is named as.
pub const TOOL_NAME: &str = "terminal";

/// The most of a command's output its result carries for a client that does not open the
/// terminal.
const PREVIEW_BYTES: usize = 4096;

/// A command's turn, to end once its command exited.
pub struct CommandTurn {
    session: String,
    chat: String,
    turn_id: String,
    tool_call_id: String,
    command: String,
    cwd: String,
    started: Instant,
    /// How long it may run (`shellCommandTimeoutMs`), to say when it was stopped.
    deadline: Option<Duration>,
}

impl CommandTurn {
    fn terminal(&self, uri: &str, result: Option<TerminalCommandResult>) -> ToolResultContent {
        ToolResultContent::Terminal(ToolResultTerminalContent {
            resource: uri.to_owned(),
            title: self.command.clone(),
            is_pty: Some(true),
            result,
        })
    }
}

/// Opens the command's terminal channel and its call in the turn, running; it may run for
/// `deadline`.
pub fn open(core: &mut Core, run: &CommandRun, cwd: &Path, deadline: Option<Duration>) -> CommandTurn {
    let turn = CommandTurn {
        session: run.session.clone(),
        chat: run.chat.clone(),
        turn_id: run.turn_id.clone(),
        tool_call_id: facade::new_id(),
        command: run.command.clone(),
        cwd: facade::file_uri(cwd),
        started: Instant::now(),
        deadline,
    };
    let state = TerminalState {
        title: run.command.clone(),
        cwd: Some(turn.cwd.clone()),
        cols: Some(80),
        rows: Some(24),
        content: Vec::new(),
        lifecycle: TerminalLifecycleState::Running(TerminalRunningLifecycleState {}),
        claim: TerminalClaim::Session(TerminalSessionClaim {
            session: run.session.clone(),
            chat: run.chat.clone(),
            turn_id: Some(run.turn_id.clone()),
            tool_call_id: Some(turn.tool_call_id.clone()),
        }),
        supports_command_detection: None,
        is_pty: Some(true),
    };
    core.open_terminal(&run.terminal, state, true);
    let (turn_id, tool_call_id) = (turn.turn_id.clone(), turn.tool_call_id.clone());
    let call = RunningCall {
        turn_id: &turn_id,
        tool_call_id: &tool_call_id,
        tool_name: TOOL_NAME,
        display_name: "Terminal",
        contributor: None,
        invocation: format!("Running `{}`", run.command),
        input: Some(run.command.clone()),
    };
    let [started, ready] = call.actions();
    let actions = [
        started,
        ready,
        // The live terminal, for a client to open while the command runs.
        StateAction::ChatToolCallContentChanged(ChatToolCallContentChangedAction {
            turn_id: turn_id.clone(),
            tool_call_id: tool_call_id.clone(),
            meta: None,
            content: vec![turn.terminal(&run.terminal, None)],
        }),
    ];
    for action in actions {
        core.apply(&run.chat, action, None, None);
    }
    turn
}

/// The command exited (or was stopped at its deadline): what it printed is kept, its terminal
/// leaves the root's list, and its turn — unless somebody stopped it already — completes with the
/// terminal and the code.
pub fn finished(core: &mut Core, uri: &str, turn: &CommandTurn, ended: Ended, scrollback: usize) {
    if core.chat(&turn.chat).is_none() {
        // Its chat was deleted (and the command ended with it): nothing is left to keep it for.
        return;
    }
    let code = ended.code;
    let output = core.terminal_state(uri).map(output_of).unwrap_or_default();
    let kept = tail(&output, scrollback);
    core.keep_terminal(&KeptTerminalRecord {
        uri: uri.to_owned(),
        session: turn.session.clone(),
        chat: turn.chat.clone(),
        title: turn.command.clone(),
        cwd: Some(turn.cwd.clone()),
        output: kept.to_owned(),
        exit_code: code,
        is_pty: true,
    });
    core.unlist_terminal(uri);
    if core.running_turn(&turn.chat).as_deref() != Some(turn.turn_id.as_str()) {
        return;
    }
    let preview = tail(&output, PREVIEW_BYTES);
    let result = TerminalCommandResult {
        exit_code: code,
        preview: Some(preview.to_owned()),
        truncated: (preview.len() < output.len()).then_some(true),
    };
    let stopped = ended.timed_out.then(|| {
        let within = turn.deadline.map(seconds).unwrap_or_default();
        format!("`{}` did not finish within {within} (shellCommandTimeoutMs) and was stopped.", turn.command)
    });
    let success = code == Some(0) && stopped.is_none();
    let past = match (code, &stopped) {
        (_, Some(_)) => format!("Ran `{}`, which ran past its deadline and was stopped", turn.command),
        (Some(0), None) => format!("Ran `{}`", turn.command),
        (Some(code), None) => format!("Ran `{}`, which exited with code {code}", turn.command),
        (None, None) => format!("Ran `{}`, which ended without an exit code", turn.command),
    };
    let mut content = vec![turn.terminal(uri, Some(result))];
    // Counted as the program printed them, as `ended.printed` is (not the terminal's `\r\n`).
    let kept_printed = super::run::program_bytes(kept, false);
    let let_go = ended.printed.saturating_sub(kept_printed);
    if let_go > 0 {
        content.push(ToolResultContent::Text(ToolResultTextContent {
            text: format!(
                "[Output cut: `{}` printed {} bytes; its terminal keeps the last {kept_printed} (terminalScrollbackBytes) and the first {let_go} were let go.]",
                turn.command, ended.printed,
            ),
        }));
    }
    let error = match (&stopped, success) {
        (Some(why), _) => Some(why.clone()),
        (None, false) => Some(format!("exit code {}", code.unwrap_or(-1))),
        (None, true) => None,
    };
    let complete = StateAction::ChatToolCallComplete(ChatToolCallCompleteAction {
        turn_id: turn.turn_id.clone(),
        tool_call_id: turn.tool_call_id.clone(),
        meta: None,
        result: ToolCallResult {
            success,
            past_tense_message: StringOrMarkdown::Plain(past),
            content: Some(content),
            structured_content: None,
            error: error.map(serde_json::Value::String),
        },
        requires_result_confirmation: None,
    });
    core.apply(&turn.chat, complete, None, None);
    let duration = i64::try_from(turn.started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let done =
        StateAction::ChatTurnComplete(ChatTurnCompleteAction { turn_id: turn.turn_id.clone(), duration, meta: None });
    core.apply(&turn.chat, done, None, None);
}
