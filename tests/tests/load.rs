//! The load run for 10 seconds (`scripts/load` runs it for 5 minutes): 20 clients connecting and
//! disconnecting at random on 50 streaming sessions; every folded state checked against its
//! snapshot. The memory numbers are printed, not judged: ten seconds on a debug build say little.

use std::time::Duration;

use tests::load::{run, LoadPlan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_clients_on_fifty_streaming_sessions_fold_what_the_host_holds() -> anyhow::Result<()> {
    let plan = LoadPlan { duration: Duration::from_secs(10), ..LoadPlan::default() };
    let report = run(&plan).await?;
    for line in report.lines(&plan) {
        println!("{line}");
    }
    assert!(report.connections >= plan.clients, "every client connected at least once");
    assert!(report.turns > 0 && report.actions > 0, "the sessions streamed");
    assert!(report.checks >= plan.sessions, "every chat was checked at the end");
    Ok(())
}
