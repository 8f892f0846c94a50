//! The `opencode` ACP preset run for real: `opencode acp` (npm `opencode-ai`, installed by
//! `scripts/deps/opencode.sh`) through the daemon and the official client against the scripted
//! Chat Completions mock; the scenarios are tests::opencode_family's. Without the program
//! (`$AHPD_OPENCODE_BIN`, else the test cache) each test says it skipped and passes.

use tests::installed::opencode_bin;
use tests::opencode_family::Family;

fn opencode() -> Option<Family> {
    Family::installed("opencode", opencode_bin(), &["build", "plan"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_opens_with_its_offers_and_streams_a_turn() -> anyhow::Result<()> {
    let Some(opencode) = opencode() else { return Ok(()) };
    opencode.opens_with_its_offers_and_streams_a_turn().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_calls_a_host_tool_through_ahp_mcp() -> anyhow::Result<()> {
    let Some(opencode) = opencode() else { return Ok(()) };
    opencode.calls_a_host_tool_through_ahp_mcp().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_asks_the_client_before_a_command() -> anyhow::Result<()> {
    let Some(opencode) = opencode() else { return Ok(()) };
    opencode.asks_the_client_before_a_command().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_is_cancelled_mid_turn_and_answers_the_next() -> anyhow::Result<()> {
    let Some(opencode) = opencode() else { return Ok(()) };
    opencode.is_cancelled_mid_turn_and_answers_the_next().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_resumes_a_turn_cut_by_a_kill_9_and_loads_after_a_restart() -> anyhow::Result<()> {
    let Some(opencode) = opencode() else { return Ok(()) };
    opencode.resumes_a_turn_cut_by_a_kill_9_and_loads_after_a_restart().await
}
