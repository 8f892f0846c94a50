//! Fuzzes the worker-protocol peer reading garbage: whatever bytes the other side writes, the
//! `Peer` routes what is a frame, stops at what is not, says why it stopped, and fails the request
//! it was waiting on rather than hang.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use agent_runner::rpc::Peer;
use libfuzzer_sys::fuzz_target;
use tokio::io::AsyncWriteExt;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime"))
}

fuzz_target!(|data: &[u8]| {
    runtime().block_on(async {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(ours);
        let (_their_read, mut their_write) = tokio::io::split(theirs);
        let mut io = Peer::start(read, write);
        let waiting = {
            let peer = io.peer.clone();
            tokio::spawn(async move { peer.request_value("agent/probe", serde_json::json!({})).await })
        };
        let bytes = data.to_vec();
        let writer = tokio::spawn(async move {
            let _ = their_write.write_all(&bytes).await;
            let _ = their_write.shutdown().await;
        });
        // Requests the garbage made are dropped unanswered (the peer answers them with an error).
        let drain = tokio::spawn(async move { while io.incoming.recv().await.is_some() {} });
        let ended = tokio::time::timeout(Duration::from_secs(5), io.peer.ended()).await;
        assert!(ended.is_ok(), "the peer never noticed its input ended");
        let answer = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert!(answer.is_ok(), "a request waited for ever on a peer whose input ended");
        let _ = writer.await;
        drop(io.peer);
        drain.abort();
    });
});
