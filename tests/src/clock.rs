//! The manual clock of a daemon started with `AHPD_TEST_CLOCK=manual`: every test that moves it
//! does so here, through `ahpd/test/advanceClock` on a connection of its own (the official client
//! or a raw socket), rather than spelling out the request.

use anyhow::{anyhow, Context};
use serde_json::{json, Value};

use crate::raw::RawSocket;
use crate::TestClient;

/// The request's params: move the clock `ms` milliseconds forward.
fn params(ms: u64) -> Value {
    json!({ "channel": "ahp-root://", "ms": ms })
}

/// Moves the daemon's manual clock `ms` milliseconds forward through `client`; answers its time
/// now (milliseconds since the epoch). A daemon on wall time refuses it, and so does a person
/// without `config:write`: that is the error.
pub async fn advance(client: &TestClient, ms: u64) -> anyhow::Result<u64> {
    let moved = client.request("ahpd/test/advanceClock", params(ms)).await.map_err(|e| anyhow!("advanceClock: {e}"))?;
    moved["now"].as_u64().with_context(|| format!("advanceClock answered no time: {moved}"))
}

/// The same through a raw socket, as request `id`; answers the daemon's time now.
pub async fn advance_raw(socket: &mut RawSocket, id: u64, ms: u64) -> anyhow::Result<u64> {
    let moved = socket.call(id, "ahpd/test/advanceClock", params(ms)).await?;
    anyhow::ensure!(moved.get("error").is_none(), "advanceClock: {moved}");
    moved["result"]["now"].as_u64().with_context(|| format!("advanceClock answered no time: {moved}"))
}
