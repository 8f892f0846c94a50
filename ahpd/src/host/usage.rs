//! Token usage, banked (seed 003, "Token usage is banked, not estimated"): what each turn's
//! backend reported it used (`chat/usage`, folded onto the turn) is added to its session's bank
//! when the turn ends, in the same store savepoint as the turn itself (`Core::keep_ending`), so no
//! stop of the process leaves a kept turn without its usage, and shown on the session's
//! state as `_meta.usage`. Nothing is estimated: a turn whose backend reported nothing adds
//! nothing. It is cumulative use, not how full any context window is; a turn a chat later drops
//! stays banked.
//!
//! The bank lives in the session's `_meta`, which the session's record keeps; a backend's own
//! `session/metaChanged` cannot replace it (see [`host_owned_meta`]).

use std::collections::BTreeMap;

use ahp_types::actions::{SessionMetaChangedAction, StateAction};
use ahp_types::common::JsonObject;
use ahp_types::state::UsageInfo;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Core;
use crate::store::SessionRecord;

/// The key of the bank on a session's `_meta`.
pub const META_KEY: &str = "usage";

/// What a session's backends reported they used, summed over its ended turns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UsageBank {
    /// Input tokens.
    pub input_tokens: i64,
    /// Output tokens.
    pub output_tokens: i64,
    /// Input tokens read from a prompt cache.
    pub cache_read_tokens: i64,
    /// How many turns reported usage.
    pub turns: i64,
    /// What the backends said the turns cost, by currency (`ahpd.cost` on a turn's usage).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub cost: BTreeMap<String, f64>,
}

impl UsageBank {
    /// The bank a session's `_meta` holds (empty when it holds none, or one it cannot read).
    pub fn of(meta: Option<&JsonObject>) -> Self {
        meta.and_then(|m| m.get(META_KEY)).and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or_default()
    }

    /// Adds what one turn reported; answers whether it reported anything.
    pub fn add(&mut self, usage: &UsageInfo) -> bool {
        let cost = usage
            .meta
            .as_ref()
            .and_then(|m| m.get("ahpd.cost"))
            .and_then(|c| Some((c.get("currency")?.as_str()?.to_owned(), c.get("amount")?.as_f64()?)));
        let tokens = [usage.input_tokens, usage.output_tokens, usage.cache_read_tokens];
        if tokens.iter().all(Option::is_none) && cost.is_none() {
            return false;
        }
        self.input_tokens += usage.input_tokens.unwrap_or(0);
        self.output_tokens += usage.output_tokens.unwrap_or(0);
        self.cache_read_tokens += usage.cache_read_tokens.unwrap_or(0);
        self.turns += 1;
        if let Some((currency, amount)) = cost {
            *self.cost.entry(currency).or_insert(0.0) += amount;
        }
        true
    }
}

/// The keys of a session's `_meta` that are the host's: a backend's `session/metaChanged` keeps
/// them as the host holds them.
pub fn host_owned_meta() -> [&'static str; 2] {
    [META_KEY, super::completions::COMMANDS_KEY]
}

/// A backend's `_meta` laid over the one the session holds: the keys it names replace those, the
/// rest stay, and the host's own keys stay as the host holds them.
pub fn merge_backend_meta(held: Option<&JsonObject>, said: Option<JsonObject>) -> JsonObject {
    let mut merged = held.cloned().unwrap_or_default();
    for (key, value) in said.unwrap_or_default() {
        if !host_owned_meta().contains(&key.as_str()) {
            merged.insert(key, value);
        }
    }
    merged
}

impl Core {
    /// `chat`'s session and its `_meta` with `usage` (what a turn of `chat` reported) added to
    /// its bank; `None` when the turn reported nothing.
    fn banked_meta(&self, chat: &str, usage: Option<&UsageInfo>) -> Option<(String, JsonObject)> {
        let usage = usage?;
        let session = self.chats.get(chat).map(|m| m.session.clone())?;
        let held = self.ch.sessions.get(&session).and_then(|s| s.meta.clone());
        let mut bank = UsageBank::of(held.as_ref());
        if !bank.add(usage) {
            return None;
        }
        let mut meta = held.unwrap_or_default();
        match serde_json::to_value(&bank) {
            Ok(value) => meta.insert(META_KEY.to_owned(), value),
            Err(e) => {
                tracing::error!("could not encode a session's usage: {e}");
                return None;
            }
        };
        Some((session, meta))
    }

    /// The record and summary of `chat`'s session with `usage` banked, for the turn's ending to
    /// write in its own savepoint before it is committed (the session's state takes the bank when
    /// [`Core::bank_usage`] follows the ending); `None` when the turn reported nothing.
    pub(super) fn banked_session(&self, chat: &str, usage: Option<&UsageInfo>) -> Option<(SessionRecord, Value)> {
        let (session, meta) = self.banked_meta(chat, usage)?;
        let mut record = self.session_record(&session)?;
        record.meta = Some(meta);
        let summary = serde_json::to_value(self.summary_of(&session)?).ok()?;
        Some((record, summary))
    }

    /// Adds the usage of a turn of `chat` that just ended to its session's bank.
    pub(super) fn bank_usage(&mut self, chat: &str, usage: Option<&UsageInfo>) {
        let Some((session, meta)) = self.banked_meta(chat, usage) else { return };
        let action = StateAction::SessionMetaChanged(SessionMetaChangedAction { meta: Some(meta) });
        self.apply(&session, action, None, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn usage(input: i64, output: i64, cost: Option<f64>) -> UsageInfo {
        UsageInfo {
            input_tokens: Some(input),
            output_tokens: Some(output),
            model: None,
            cache_read_tokens: None,
            meta: cost.map(|c| {
                let mut m = JsonObject::new();
                m.insert("ahpd.cost".into(), json!({"amount": c, "currency": "USD"}));
                m
            }),
        }
    }

    #[test]
    fn a_bank_sums_what_was_reported_and_nothing_else() {
        let mut bank = UsageBank::default();
        assert!(bank.add(&usage(25, 12, Some(0.5))));
        assert!(bank.add(&usage(30, 4, Some(0.25))));
        let empty =
            UsageInfo { input_tokens: None, output_tokens: None, model: None, cache_read_tokens: None, meta: None };
        assert!(!bank.add(&empty), "a turn that reported nothing adds nothing");
        assert_eq!((bank.input_tokens, bank.output_tokens, bank.turns), (55, 16, 2));
        assert_eq!(bank.cost.get("USD"), Some(&0.75));
        let mut meta = JsonObject::new();
        meta.insert(META_KEY.into(), serde_json::to_value(&bank).expect("encodes"));
        assert_eq!(UsageBank::of(Some(&meta)), bank, "read back from the session's _meta");
    }

    #[test]
    fn a_backend_cannot_replace_the_hosts_keys() {
        let mut held = JsonObject::new();
        held.insert(META_KEY.into(), json!({"inputTokens": 5}));
        held.insert("artifacts".into(), json!([]));
        let mut said = JsonObject::new();
        said.insert(META_KEY.into(), json!({"inputTokens": 0}));
        said.insert("git".into(), json!({"branch": "main"}));
        let merged = merge_backend_meta(Some(&held), Some(said));
        assert_eq!(merged[META_KEY], json!({"inputTokens": 5}));
        assert_eq!(merged["git"], json!({"branch": "main"}));
        assert_eq!(merged["artifacts"], json!([]));
    }
}
