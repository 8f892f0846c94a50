//! The accounts the backends bill to (seed 004's `probe()` account), on the root config under
//! `account` for the connections whose person holds `account:read`, and for nobody else: each
//! connection's root snapshot leaves the key out for a person without it, and a change is said
//! only to the root's watchers who hold it (kept out of the replay ring, so a reconnect past it
//! is answered with a snapshot cut for its person).

use ahp_types::actions::{RootConfigChangedAction, StateAction};
use ahp_types::common::JsonObject;
use ahp_types::state::{Snapshot, SnapshotState};
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::Value;

use super::Core;
use crate::users::Principal;

/// The root config key: `{ <provider>: <account> }`, one entry for each backend that said one.
pub const ACCOUNT_KEY: &str = "account";

/// The grant that reads it.
pub const ACCOUNT_GRANT: &str = "account:read";

impl Core {
    /// What `provider`'s probe said it bills to (`None`: it cannot say, which takes the place of
    /// what it said before). Told to the root's watchers who may read it, when it changed.
    pub fn account_said(&mut self, provider: &str, account: Option<Value>) {
        let Some(config) = self.ch.root.config.as_ref() else { return };
        let before = config.values.get(ACCOUNT_KEY).and_then(Value::as_object).cloned().unwrap_or_default();
        let mut accounts = before.clone();
        match account {
            Some(account) => accounts.insert(provider.to_owned(), account),
            None => accounts.remove(provider),
        };
        if accounts == before {
            return;
        }
        let mut change = JsonObject::new();
        change.insert(ACCOUNT_KEY.to_owned(), Value::Object(accounts));
        let action = StateAction::RootConfigChanged(RootConfigChangedAction { config: change, replace: None });
        let readers: Vec<_> = self
            .ch
            .subscribers_of(ROOT_RESOURCE_URI)
            .into_iter()
            .filter(|id| {
                let principal = self.ch.conn(*id).map_or(Principal::Nobody, |c| c.principal.clone());
                self.allows(&principal, ACCOUNT_GRANT)
            })
            .collect();
        self.apply_for(action, &readers);
    }

    /// The channel's snapshot as `principal` may see it: the root's without `account` for a
    /// person who does not hold `account:read`.
    pub fn snapshot_for(&self, principal: &Principal, uri: &str) -> Option<Snapshot> {
        let mut snapshot = self.ch.snapshot(uri)?;
        if !self.allows(principal, ACCOUNT_GRANT) {
            if let SnapshotState::Root(root) = &mut snapshot.state {
                if let Some(config) = root.config.as_mut() {
                    config.values.remove(ACCOUNT_KEY);
                    config.schema.properties.remove(ACCOUNT_KEY);
                }
            }
        }
        Some(snapshot)
    }
}
