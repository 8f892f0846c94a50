//! The sessionless list: the tools a caller with no session (root, or a person) sees and calls on
//! `/mcp`, each as that caller is offered it. (A session's own offer, and rebuilding it when a live
//! key changes, is `Core::offered_tools` and `Host::offers_changed`.)

use super::{catalog, Caller, Group, ToolInfo};
use crate::host::Core;

impl Core {
    /// The tools a caller with no session may see and call (`sessionless: true`), each as that
    /// caller is offered it: root sees every one, a person the ones whose grant they hold, and a
    /// host with no users directory answers every caller with all of them. `sessionTools: false`
    /// offers the session tools to nobody, here too.
    pub fn sessionless_tools(&self, caller: &Caller) -> Vec<ToolInfo> {
        catalog()
            .iter()
            .map(|t| &t.info)
            .filter(|t| t.sessionless)
            .filter(|t| !t.advanced_permission || self.settings().advanced_tools)
            .filter(|t| t.group != Group::Session || self.settings().session_tools)
            .filter(|t| t.listing_grant().is_none_or(|grant| self.allows(&caller.principal(), grant)))
            .filter_map(|t| t.tailored(self, None))
            .collect()
    }
}
