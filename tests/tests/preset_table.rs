//! The ACP presets run for real, one table (tests::presets): every row through the same
//! scenarios, each test named `<row>::<scenario>` (`cargo nextest run -p tests --test
//! preset_table qwen::` runs one preset's). The last rows are added here, to show what a new
//! agent costs: a small ACP agent of the test suite's own (tests/workers/mini_acp_agent.py) that
//! asks the chat completions mock, the same agent whose only "no" ends its prompt, as Codex's
//! does, and the same agent answering `session/load` before its replay, as Gemini CLI does.

use std::path::PathBuf;

use serde_json::json;
use tests::presets::{
    Adds, Dialect, HostTool, Offers, Reaches, Row, Setup, CODEX, COPILOT, GEMINI, KILO, OPENCODE, PI, QWEN,
};

/// The mini ACP agent: python3 runs it.
fn mini_agent() -> Result<PathBuf, String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("workers/mini_acp_agent.py");
    match ahpd::agents::find_on_path("python3") {
        Some(_) => Ok(script),
        None => Err("python3 is not on the PATH; install Python 3 to run the mini ACP agent".into()),
    }
}

/// Its entry: a command of one's own rather than a preset, pointed at the mock, its conversations
/// kept in its home.
fn mini_entry(setup: &Setup<'_>, args: &[&str]) -> anyhow::Result<serde_json::Value> {
    let mut all = vec![setup.program.display().to_string()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    let env = json!({ "OPENAI_BASE_URL": setup.mock.chat()?.base_url(),
                      "MINI_ACP_STATE": setup.home.join("state").display().to_string() });
    Ok(json!({ "kind": "acp", "options": { "command": "python3", "args": all }, "env": env }))
}

/// The row a new agent costs.
const MINI: Row = Row {
    name: "mini",
    program: mini_agent,
    entry: |s| mini_entry(s, &[]),
    dialect: Dialect::Chat,
    ask: |file| format!(r#"[[call shell {{"command": "touch {file}"}}]]"#),
    host_tool: Some(HostTool { call: "ahp_list_sessions", up_front: true }),
    offers: Offers { models: &["mock-model"], modes: &["ask"], starts_in: "ask", command: Some("review"), keys: &[] },
    reaches: Reaches { args: &["mini_acp_agent.py"], env: &[], process: None },
    reasoning: Some("Let me think about this."),
    adds: Adds { before: false, after: false },
    told_no: "tool said: The person refused",
    quirks: &[],
};

/// The same agent, its only "no" ending the prompt (`abort`): the person's "no" still lets the
/// turn go on.
const MINI_ABORTING: Row = Row {
    name: "mini-aborting",
    entry: |s| mini_entry(s, &["--abort-on-refusal"]),
    reaches: Reaches { args: &["mini_acp_agent.py --abort-on-refusal"], env: &[], process: None },
    told_no: "mock reply to: I declined",
    ..MINI
};

/// The same agent answering `session/load` before its replay, as Gemini CLI 0.61 does: the
/// replay's tail is the conversation's, never the next prompt's reply.
const MINI_LATE_REPLAY: Row = Row {
    name: "mini-late-replay",
    entry: |s| mini_entry(s, &["--replay-after-answer"]),
    reaches: Reaches { args: &["mini_acp_agent.py --replay-after-answer"], env: &[], process: None },
    ..MINI
};

/// One module of tests per row, one test per scenario it goes through.
macro_rules! rows {
    ($($module:ident = $row:expr => [$($scenario:ident),* $(,)?];)*) => {$(
        mod $module {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() -> anyhow::Result<()> {
                    $row.$scenario().await
                }
            )*
        }
    )*};
}

rows! {
    qwen = QWEN => [
        opens_offers_and_streams, calls_a_host_tool, asks_and_a_refusal_holds_though_side_calls_say_allow,
        works_in_a_sandbox_without_asking, is_cancelled_mid_turn_and_answers_the_next, resumes_after_a_kill_9_and_loads_after_a_restart,
    ];
    gemini = GEMINI => [
        opens_offers_and_streams, calls_a_host_tool, asks_and_a_refusal_holds_though_side_calls_say_allow,
        works_in_a_sandbox_without_asking, is_cancelled_mid_turn_and_answers_the_next, resumes_after_a_kill_9_and_loads_after_a_restart,
    ];
    codex = CODEX => [
        opens_offers_and_streams, calls_a_host_tool, asks_and_a_refusal_holds_though_side_calls_say_allow,
        works_in_a_sandbox_without_asking, is_cancelled_mid_turn_and_answers_the_next, resumes_after_a_kill_9_and_loads_after_a_restart,
    ];
    copilot = COPILOT => [
        opens_offers_and_streams, calls_a_host_tool, asks_and_a_refusal_holds_though_side_calls_say_allow,
        works_in_a_sandbox_without_asking, is_cancelled_mid_turn_and_answers_the_next, resumes_after_a_kill_9_and_loads_after_a_restart,
    ];
    opencode = OPENCODE => [
        opens_offers_and_streams, calls_a_host_tool, asks_and_a_refusal_holds_though_side_calls_say_allow,
        works_in_a_sandbox_without_asking, is_cancelled_mid_turn_and_answers_the_next, resumes_after_a_kill_9_and_loads_after_a_restart,
    ];
    kilo = KILO => [
        opens_offers_and_streams, calls_a_host_tool, asks_and_a_refusal_holds_though_side_calls_say_allow,
        works_in_a_sandbox_without_asking, is_cancelled_mid_turn_and_answers_the_next, resumes_after_a_kill_9_and_loads_after_a_restart,
    ];
    // pi has no MCP client (pi-acp declares no MCP transport): no host tool.
    pi = PI => [
        opens_offers_and_streams, asks_and_a_refusal_holds_though_side_calls_say_allow,
        works_in_a_sandbox_without_asking, is_cancelled_mid_turn_and_answers_the_next, resumes_after_a_kill_9_and_loads_after_a_restart,
    ];
    mini = MINI => [
        opens_offers_and_streams, calls_a_host_tool, asks_and_a_refusal_holds_though_side_calls_say_allow,
        works_in_a_sandbox_without_asking, is_cancelled_mid_turn_and_answers_the_next, resumes_after_a_kill_9_and_loads_after_a_restart,
    ];
    mini_aborting = MINI_ABORTING => [asks_and_a_refusal_holds_though_side_calls_say_allow];
    mini_late_replay = MINI_LATE_REPLAY => [resumes_after_a_kill_9_and_loads_after_a_restart];
}
