//! A client's plugins for the clients' rules tests: the team plugin a client serves through
//! `resourceList`/`resourceRead` (one rule always applied, one scoped, one too long), and the
//! action that publishes a client's plugins on a session.

use ahp::ResourceRequestHandlers;
use ahp_types::actions::{SessionActiveClientSetAction, StateAction};
use ahp_types::commands::{ContentEncoding, DirectoryEntry, ResourceListResult, ResourceReadResult};
use ahp_types::messages::JsonRpcError;
use ahp_types::state::SessionActiveClient;
use serde_json::{json, Value};

use crate::TestClient;

/// The words of the rule that is always applied.
pub const ALWAYS_RULE: &str = "Answer like a pirate (RULE-ALWAYS).";

/// The plugin at `virtual://c1/team`: `rules/always.mdc` (always applied), `rules/scoped.mdc`
/// (not), `rules/long.instructions.md` (always applied, but too long to copy).
pub fn team_plugin() -> ResourceRequestHandlers {
    fn not_found(uri: &str) -> JsonRpcError {
        JsonRpcError { code: -32008, message: format!("There is nothing at {uri}"), data: None }
    }
    ResourceRequestHandlers::new()
        .on_resource_list(|params| async move {
            let entries: &[(&str, &str)] = match params.uri.as_str() {
                "virtual://c1/team" => &[("rules", "directory"), ("README.md", "file")],
                "virtual://c1/team/rules" => {
                    &[("always.mdc", "file"), ("scoped.mdc", "file"), ("long.instructions.md", "file")]
                }
                _ => return Err(not_found(&params.uri)),
            };
            let entries = entries.iter().map(|(n, t)| DirectoryEntry { name: (*n).into(), r#type: (*t).into() });
            Ok(ResourceListResult { entries: entries.collect() })
        })
        .on_resource_read(|params| async move {
            let data = match params.uri.rsplit('/').next() {
                Some("always.mdc") => {
                    "---\ndescription: house style\nalwaysApply: true\n---\n\nAnswer like a pirate (RULE-ALWAYS).\n"
                        .to_owned()
                }
                Some("scoped.mdc") => "---\nglobs: '*.rs'\nalwaysApply: false\n---\nRULE-SCOPED\n".to_owned(),
                Some("long.instructions.md") => format!("---\nalwaysApply: true\n---\nRULE-LONG {}", "x".repeat(5000)),
                _ => return Err(not_found(&params.uri)),
            };
            Ok(ResourceReadResult { data, encoding: ContentEncoding::Utf8, content_type: None })
        })
}

/// Publishes `plugins` as `client`'s customizations on `session` (as an active client with no tools).
pub async fn publish_plugins(client: &TestClient, session: &str, plugins: Value) -> anyhow::Result<()> {
    let active: SessionActiveClient = serde_json::from_value(json!({
        "clientId": client.client_id, "tools": [], "customizations": plugins
    }))?;
    client
        .dispatch(session, StateAction::SessionActiveClientSet(SessionActiveClientSetAction { active_client: active }))
        .await?;
    Ok(())
}
