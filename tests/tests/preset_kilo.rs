//! The `kilo` ACP preset run for real: `kilo acp` (npm `@kilocode/cli`, a fork of opencode,
//! installed by `scripts/deps/opencode.sh`) through the daemon and the official client against the
//! scripted Chat Completions mock; the scenarios are tests::opencode_family's. Without the program
//! (`$AHPD_KILO_BIN`, else the test cache) each test says it skipped and passes.

use tests::installed::kilo_bin;
use tests::opencode_family::Family;

fn kilo() -> Option<Family> {
    Family::installed("kilo", kilo_bin(), &["code", "ask", "debug", "orchestrator", "plan"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kilo_opens_with_its_offers_and_streams_a_turn() -> anyhow::Result<()> {
    let Some(kilo) = kilo() else { return Ok(()) };
    kilo.opens_with_its_offers_and_streams_a_turn().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kilo_calls_a_host_tool_through_ahp_mcp() -> anyhow::Result<()> {
    let Some(kilo) = kilo() else { return Ok(()) };
    kilo.calls_a_host_tool_through_ahp_mcp().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kilo_asks_the_client_before_a_command() -> anyhow::Result<()> {
    let Some(kilo) = kilo() else { return Ok(()) };
    kilo.asks_the_client_before_a_command().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kilo_is_cancelled_mid_turn_and_answers_the_next() -> anyhow::Result<()> {
    let Some(kilo) = kilo() else { return Ok(()) };
    kilo.is_cancelled_mid_turn_and_answers_the_next().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kilo_resumes_a_turn_cut_by_a_kill_9_and_loads_after_a_restart() -> anyhow::Result<()> {
    let Some(kilo) = kilo() else { return Ok(()) };
    kilo.resumes_a_turn_cut_by_a_kill_9_and_loads_after_a_restart().await
}
