//! The sessionless list: the tools a caller with no session (root, or a person) sees and calls on
//! `/mcp`, each as that caller is offered it. (A session's own offer, and rebuilding it when a live
//! key changes, is `Core::offered_tools` and `Host::offers_changed`.)

use super::{catalog, Caller, Group, ToolInfo};
use crate::host::Core;
use crate::users::Principal;

impl Core {
    /// The tools a caller with no session may see and call (`sessionless: true`), each as that
    /// caller is offered it: root sees every one, a person the ones whose grant they hold, and a
    /// host with no users directory answers every caller with all of them. `sessionTools: false`
    /// offers the session tools to nobody, here too.
    pub fn sessionless_tools(&self, caller: &Caller) -> Vec<ToolInfo> {
        catalog()
            .iter()
            .filter(|t| t.sessionless)
            .filter(|t| !t.advanced_permission || self.settings().advanced_tools)
            .filter(|t| t.group != Group::Session || self.settings().session_tools)
            .filter(|t| t.grant.is_none_or(|grant| caller_holds(self, caller, grant)))
            .filter_map(|t| t.tailored(self, None))
            .collect()
    }
}

/// Whether a caller with no session holds `grant`: root holds every one, a person what the users
/// directory grants them, and with no directory there is nobody to ask.
fn caller_holds(core: &Core, caller: &Caller, grant: &str) -> bool {
    let principal = match caller {
        Caller::Root => Principal::Root,
        Caller::Person(id) => Principal::Person(id.clone()),
        Caller::Turn(sender) => Principal::from_sender(sender.as_deref()),
    };
    core.allows(&principal, grant)
}
