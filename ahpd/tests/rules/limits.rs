//! Limits against abuse, per connection (`maxFrameBytes`, `maxJsonDepth`,
//! `maxSubscriptionsPerConnection`, `maxSessionsPerMinute`): each refusal is -32600 with
//! `data: {limit, value}` naming the key, in a sentence saying what to do, and the connection
//! lives on. The minute is on the manual clock.

use std::time::Duration;

use serde_json::{json, Value};

use crate::world::{Client, Refusal, World, ROOT};

async fn limited(change: impl FnOnce(&mut ahpd::host::limits::Limits)) -> (World, Client) {
    let mut world = World::builder().agent("echo").config(|c| change(&mut c.limits)).start().await;
    let alice = world.connect("alice").await;
    (world, alice)
}

/// Checks an answer is the refusal of going over `key` (whose value is `value`); answers its
/// sentence.
fn over(answer: &Value, key: &str, value: u64) -> String {
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(answer["error"]["data"]["limit"], key, "{answer}");
    assert_eq!(answer["error"]["data"]["value"], value, "{answer}");
    answer["error"]["message"].as_str().unwrap_or_default().to_owned()
}

fn over_refusal(refusal: &Refusal, key: &str, value: u64) -> String {
    let answer = json!({ "error": { "code": refusal.code, "message": refusal.message, "data": refusal.data } });
    over(&answer, key, value)
}

async fn still_answers(world: &mut World, who: &Client) {
    world.ok(who, "ping", json!({ "channel": ROOT })).await;
}

#[tokio::test(start_paused = true)]
async fn a_message_over_the_size_limit_is_refused_unread_and_the_connection_lives_on() {
    let (mut world, alice) = limited(|l| l.max_frame_bytes = 2048).await;
    let padding = "x".repeat(4096);
    let text = json!({ "jsonrpc": "2.0", "id": 900, "method": "ping", "params": { "channel": ROOT, "pad": padding } })
        .to_string();
    let answer = world.raw_request(&alice, 900, &text).await;
    let said = over(&answer, "maxFrameBytes", 2048);
    assert_eq!(
        said,
        format!(
            "A message of {} bytes is over this host's limit of 2048 bytes (maxFrameBytes); it was not read",
            text.len()
        )
    );
    still_answers(&mut world, &alice).await;
}

#[tokio::test(start_paused = true)]
async fn a_message_nested_too_deep_is_refused_unread_under_its_own_id() {
    let (mut world, alice) = limited(|l| l.max_json_depth = 8).await;
    let deep = format!("{}1{}", "[".repeat(20), "]".repeat(20));
    let text = format!(r#"{{"jsonrpc":"2.0","id":901,"method":"ping","params":{{"channel":"{ROOT}","deep":{deep}}}}}"#);
    let answer = world.raw_request(&alice, 901, &text).await;
    let said = over(&answer, "maxJsonDepth", 8);
    assert_eq!(said, "A message nested deeper than this host's limit of 8 levels (maxJsonDepth) was not read");
    still_answers(&mut world, &alice).await;
}

#[tokio::test(start_paused = true)]
async fn a_message_just_inside_the_depth_limit_is_read() {
    let (mut world, alice) = limited(|l| l.max_json_depth = 8).await;
    // The request object and its params are two levels; six more make eight.
    let deep = format!("{}1{}", "[".repeat(6), "]".repeat(6));
    let text = format!(r#"{{"jsonrpc":"2.0","id":902,"method":"ping","params":{{"channel":"{ROOT}","deep":{deep}}}}}"#);
    let answer = world.raw_request(&alice, 902, &text).await;
    assert!(answer.get("error").is_none(), "{answer}");
}

#[tokio::test(start_paused = true)]
async fn a_subscription_past_the_limit_is_refused_naming_the_channel() {
    let (mut world, alice) = limited(|l| l.max_subscriptions = 3).await;
    let first = world.create_session(&alice, "echo").await; // the root, a session and its chat: three
    let second = world.next_session();
    world.ok(&alice, "createSession", json!({ "channel": second.uri, "provider": "echo" })).await;
    let refused = world.subscribe(&alice, &second.uri).await.expect_err("a fourth channel is refused");
    assert_eq!(
        over_refusal(&refused, "maxSubscriptionsPerConnection", 3),
        format!(
            "This connection watches 3 channels, this host's limit (maxSubscriptionsPerConnection); unsubscribe from one before subscribing to {}",
            second.uri
        )
    );
    // Watching a channel it holds again is no new subscription; letting one go makes room.
    world.subscribe(&alice, &first.chat).await.expect("a channel held already");
    world.unsubscribe(&alice, &first.chat);
    world.subscribe(&alice, &second.uri).await.expect("room once one was let go");
}

#[tokio::test(start_paused = true)]
async fn a_handshake_naming_more_channels_than_the_limit_is_refused() {
    let mut world = World::builder().agent("echo").config(|c| c.limits.max_subscriptions = 2).start().await;
    let alice = world.open("alice", ahpd::users::Principal::Root);
    let params = json!({
        "channel": ROOT,
        "protocolVersions": ["1.0.0"],
        "clientId": "alice",
        "initialSubscriptions": [ROOT, "ahp-session:/a", "ahp-session:/b"],
    });
    let refused = world.refused(&alice, "initialize", params).await;
    assert_eq!(
        over_refusal(&refused, "maxSubscriptionsPerConnection", 2),
        "initialize names 3 channels, over this host's limit of 2 subscriptions per connection (maxSubscriptionsPerConnection)"
    );
}

#[tokio::test(start_paused = true)]
async fn sessions_a_connection_creates_in_a_minute_are_limited_and_free_up_as_the_minute_slides() {
    let (mut world, alice) = limited(|l| l.max_sessions_per_minute = 2).await;
    world.create_session(&alice, "echo").await;
    world.create_session(&alice, "echo").await;
    let third = world.next_session();
    let create = json!({ "channel": third.uri, "provider": "echo" });
    let refused = world.refused(&alice, "createSession", create.clone()).await;
    assert_eq!(
        over_refusal(&refused, "maxSessionsPerMinute", 2),
        "This connection created 2 sessions in the last minute, this host's limit (maxSessionsPerMinute); the next one may be created in 60 s"
    );
    assert_eq!(refused.data.as_ref().map(|d| d["retryAfterMs"].clone()), Some(json!(60_000)));
    world.advance(Duration::from_secs(45)).await;
    let refused = world.refused(&alice, "createSession", create.clone()).await;
    assert!(refused.message.ends_with("the next one may be created in 15 s"), "{refused:?}");
    world.advance(Duration::from_secs(15)).await;
    world.ok(&alice, "createSession", create).await;
}

#[tokio::test(start_paused = true)]
async fn another_connection_has_a_minute_of_its_own() {
    let (mut world, alice) = limited(|l| l.max_sessions_per_minute = 1).await;
    world.create_session(&alice, "echo").await;
    let bob = world.connect("bob").await;
    world.create_session(&bob, "echo").await;
}

#[tokio::test(start_paused = true)]
async fn a_refused_create_is_not_counted_against_the_minute() {
    let (mut world, alice) = limited(|l| l.max_sessions_per_minute = 1).await;
    let refused = world.create_session_with(&alice, "nobody", json!({})).await.expect_err("no such provider");
    assert_ne!(refused.code, -32600, "refused for its provider, not the limit: {refused:?}");
    world.create_session(&alice, "echo").await;
}
