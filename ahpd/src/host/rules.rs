//! The rules of the clients in a session (seed 000, "Instructions"): a client publishes plugins on
//! its `SessionActiveClient.customizations`; this host copies each one's rule files by asking that
//! client (`resourceList`, `resourceRead`), keeps the bodies of those whose frontmatter says
//! `alwaysApply: true`, and joins them to `Start.instructions` after the host tools' own. The copy
//! is the session's `customizations` (each plugin with its rules as children), so every client sees
//! what applies. A client's `session/customizationToggled` of a plugin or of one of its rules
//! turns its bodies off (or on again) on that copy. Rules are read when a chat starts, so a
//! change of what applies restarts the session's chats between turns.

use std::collections::BTreeMap;

use ahp_types::actions::{SessionCustomizationsChangedAction, StateAction};
use ahp_types::state::{
    ChildCustomization, ClientPluginCustomization, Customization, CustomizationEnablement, PluginCustomization,
    RuleCustomization,
};
use serde_json::{json, Value};

use super::{Core, Host};

/// A rule body longer than this is dropped (and the log names the rule).
pub const RULE_BODY_LIMIT: usize = 4096;
/// How deep into a plugin's folders the copy looks, and how many entries it reads at most: a
/// plugin is a handful of files, and a client must not make the host walk a whole disk.
const MAX_DEPTH: usize = 4;
const MAX_ENTRIES: usize = 256;

/// What was copied from one client in one session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CopiedRules {
    /// The plugins (URI and version token) the client published when the copy was made.
    pub sources: Vec<String>,
    /// The bodies that apply unless toggled off, in the order the plugins and their files were
    /// listed.
    pub bodies: Vec<RuleBody>,
    /// The copies, as the session's `customizations` show them.
    pub plugins: Vec<Customization>,
}

/// The body of one rule that applies, and where it is shown (its plugin's and its own id).
#[derive(Debug, Clone, PartialEq)]
pub struct RuleBody {
    /// The id of the plugin it came with.
    pub plugin: String,
    /// The rule's id (its file's URI).
    pub rule: String,
    /// What joins the instructions.
    pub text: String,
}

/// True for a file that may hold a rule: `.mdc` or `.instructions.md`.
fn is_rule_file(name: &str) -> bool {
    name.ends_with(".mdc") || name.ends_with(".instructions.md")
}

/// The body of a rule file whose frontmatter says `alwaysApply: true`, frontmatter left behind.
pub fn always_applied(text: &str) -> Option<String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n"))?;
    let end = rest.find("\n---")?;
    let (frontmatter, after) = rest.split_at(end);
    let applies = frontmatter.lines().any(|line| {
        let Some((key, value)) = line.split_once(':') else { return false };
        key.trim() == "alwaysApply" && value.trim().trim_matches(['"', '\'']) == "true"
    });
    if !applies {
        return None;
    }
    // Past the closing `---` and the rest of its line.
    let body = after.trim_start_matches('\n').strip_prefix("---").unwrap_or(after);
    let body = body.split_once('\n').map_or("", |(_, b)| b);
    Some(body.trim().to_owned())
}

/// The plugins each active client of `session` publishes.
fn published_plugins(core: &Core, session: &str) -> BTreeMap<String, Vec<ClientPluginCustomization>> {
    let Some(state) = core.ch.sessions.get(session) else { return BTreeMap::new() };
    state.active_clients.iter().map(|c| (c.client_id.clone(), c.customizations.clone().unwrap_or_default())).collect()
}

/// What tells one published plugin set from another: each plugin's URI and its version token
/// (a client bumps `nonce` when a plugin's files change).
fn sources_of(plugins: &[ClientPluginCustomization]) -> Vec<String> {
    plugins.iter().map(|p| format!("{} {}", p.uri, p.nonce.as_deref().unwrap_or_default())).collect()
}

/// A rule's name: its file name without the extension.
fn rule_name(uri: &str) -> String {
    let file = uri.rsplit('/').next().unwrap_or(uri);
    file.strip_suffix(".instructions.md").or_else(|| file.strip_suffix(".mdc")).unwrap_or(file).to_owned()
}

/// False when a client toggled off `body`'s plugin (as `client` published it) or the rule itself.
fn toggled_on(shown: &[Customization], client: &str, body: &RuleBody) -> bool {
    let plugin = shown.iter().find_map(|c| match c {
        Customization::Plugin(p) if p.id == body.plugin && p.client_id.as_deref() == Some(client) => Some(p),
        _ => None,
    });
    let Some(plugin) = plugin else { return true };
    let plugin_on = match plugin.enablement.as_deref().and_then(<[_]>::first) {
        Some(CustomizationEnablement::Global { enabled })
        | Some(CustomizationEnablement::Workspace { enabled, .. })
        | Some(CustomizationEnablement::Session { enabled }) => *enabled,
        Some(CustomizationEnablement::Unknown(_)) | None => true,
    };
    let rule_on = plugin.children.iter().flatten().all(|c| match c {
        ChildCustomization::Rule(r) if r.id == body.rule => r.enabled != Some(false),
        _ => true,
    });
    plugin_on && rule_on
}

impl Core {
    /// The client rules that join `session`'s instructions, clients in id order, less those a
    /// client toggled off (the rule, or its plugin) on the session's `customizations`.
    pub fn client_rule_bodies(&self, session: &str) -> Vec<String> {
        let shown = self.ch.sessions.get(session).and_then(|s| s.customizations.as_deref()).unwrap_or_default();
        self.client_rules
            .get(session)
            .map(|by_client| {
                by_client
                    .iter()
                    .flat_map(|(client, copied)| copied.bodies.iter().map(move |b| (client, b)))
                    .filter(|(client, body)| toggled_on(shown, client, body))
                    .map(|(_, body)| body.text.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Every started chat of `session` restarts between turns, so its next start reads what it is
/// started with again (the rules, the MCP servers).
pub(super) fn restart_live_chats(core: &mut Core, session: &str) {
    let chats: Vec<String> = core.backend_chats_of(session);
    for chat in chats {
        let Some(meta) = core.chats.get(&chat) else { continue };
        if meta.live.is_none() {
            continue; // Not started: its first start reads the rules anyway.
        }
        core.restart_between_turns(&chat);
    }
}

impl Host {
    /// The session's active clients changed: copy the rules of each client whose plugins moved,
    /// and forget those of a client that left.
    pub(super) fn refresh_client_rules(&self, core: &mut Core, session: &str) {
        let published = published_plugins(core, session);
        let copied = core.client_rules.get(session).cloned().unwrap_or_default();
        let gone: Vec<String> = copied.keys().filter(|c| !published.contains_key(*c)).cloned().collect();
        for client in gone {
            self.rules_copied(core, session, &client, CopiedRules::default());
        }
        for (client, plugins) in published {
            let sources = sources_of(&plugins);
            let known = copied.get(&client).map(|c| &c.sources);
            if known == Some(&sources) || (known.is_none() && sources.is_empty()) {
                continue;
            }
            let (host, session) = (self.clone(), session.to_owned());
            self.spawn("copy a client's rules", async move {
                let copy = host.copy_plugins(&client, &plugins).await;
                let mut core = host.lock();
                // The client may have moved on while this copy ran: only the latest set is kept.
                let now = published_plugins(&core, &session);
                if now.get(&client).map(|p| sources_of(p)) == Some(copy.sources.clone()) {
                    host.rules_copied(&mut core, &session, &client, copy);
                }
            });
        }
    }

    /// A client toggled a customization of `session` (already applied): when that changed which
    /// rules apply (`before`, as they were), each chat restarts between turns to carry the rest.
    pub(super) fn rules_toggled(&self, core: &mut Core, session: &str, before: &[String]) {
        if core.client_rule_bodies(session) == before {
            return;
        }
        tracing::info!(session, "a client toggled the session's rules; its chats restart between turns");
        restart_live_chats(core, session);
    }

    /// Keeps what was copied; when the bodies changed, each chat restarts (a busy one when its
    /// turn ends) so its next start carries them.
    fn rules_copied(&self, core: &mut Core, session: &str, client: &str, rules: CopiedRules) {
        let by_client = core.client_rules.entry(session.to_owned()).or_default();
        let before = by_client.get(client).cloned().unwrap_or_default();
        let changed = before.bodies != rules.bodies;
        let shown_changed = before.plugins != rules.plugins;
        if rules == CopiedRules::default() {
            by_client.remove(client);
        } else {
            by_client.insert(client.to_owned(), rules);
        }
        if shown_changed {
            let plugins: Vec<Customization> = by_client.values().flat_map(|c| c.plugins.clone()).collect();
            let customizations = [core.mcp_customizations(session), plugins].concat();
            let action =
                StateAction::SessionCustomizationsChanged(SessionCustomizationsChangedAction { customizations });
            core.apply(session, action, None, None);
        }
        if !changed {
            return;
        }
        tracing::info!(session, client, "the client's rules changed; the session's chats restart between turns");
        restart_live_chats(core, session);
    }

    /// Copies `plugins` from `client`: each with its rule files as children, and the bodies of
    /// those that apply.
    async fn copy_plugins(&self, client: &str, plugins: &[ClientPluginCustomization]) -> CopiedRules {
        let mut copy = CopiedRules { sources: sources_of(plugins), ..CopiedRules::default() };
        for plugin in plugins {
            let mut children = Vec::new();
            for file in self.rule_files(client, &plugin.uri).await {
                let Some(text) = self.read_from(client, &file).await else { continue };
                let body = always_applied(&text);
                let applies = match &body {
                    Some(body) if body.chars().count() > RULE_BODY_LIMIT => {
                        tracing::warn!(client, rule = file, "a rule over {RULE_BODY_LIMIT} characters was dropped");
                        false
                    }
                    Some(body) if !body.is_empty() => {
                        let rule = file.clone();
                        copy.bodies.push(RuleBody { plugin: plugin.id.clone(), rule, text: body.clone() });
                        true
                    }
                    _ => false,
                };
                children.push(ChildCustomization::Rule(RuleCustomization {
                    id: file.clone(),
                    name: rule_name(&file),
                    uri: file,
                    icons: None,
                    range: None,
                    meta: None,
                    enabled: Some(applies),
                    description: None,
                    always_apply: Some(body.is_some()),
                    globs: None,
                }));
            }
            copy.plugins.push(Customization::Plugin(PluginCustomization {
                id: plugin.id.clone(),
                uri: plugin.uri.clone(),
                name: plugin.name.clone(),
                icons: plugin.icons.clone(),
                range: plugin.range.clone(),
                meta: plugin.meta.clone(),
                client_id: Some(client.to_owned()),
                load: None,
                children: Some(children),
                enablement: None,
                version: None,
            }));
        }
        copy
    }

    /// The rule files under `plugin` (itself, when it names one), in listing order.
    async fn rule_files(&self, client: &str, plugin: &str) -> Vec<String> {
        if is_rule_file(plugin) {
            return vec![plugin.to_owned()];
        }
        let mut found = Vec::new();
        let mut folders = vec![(plugin.trim_end_matches('/').to_owned(), 0usize)];
        let mut seen = 0usize;
        while let Some((folder, depth)) = folders.pop() {
            let params = json!({ "channel": ahp_types::ROOT_RESOURCE_URI, "uri": folder });
            let entries = match self.request_client(client, "resourceList", params).await {
                Ok(answer) => answer.get("entries").and_then(Value::as_array).cloned().unwrap_or_default(),
                Err(e) => {
                    tracing::warn!(client, plugin, folder, "could not list the client's plugin: {e:?}");
                    continue;
                }
            };
            for entry in entries {
                seen += 1;
                if seen > MAX_ENTRIES {
                    tracing::warn!(
                        client,
                        plugin,
                        "the plugin has more than {MAX_ENTRIES} entries; the rest are not read"
                    );
                    return found;
                }
                let name = entry.get("name").and_then(Value::as_str).unwrap_or_default();
                if name.is_empty() || name.contains('/') || name == "." || name == ".." {
                    continue;
                }
                let uri = format!("{folder}/{name}");
                match entry.get("type").and_then(Value::as_str) {
                    Some("directory") if depth + 1 < MAX_DEPTH => folders.push((uri, depth + 1)),
                    Some("file") if is_rule_file(name) => found.push(uri),
                    _ => {}
                }
            }
        }
        found.sort();
        found
    }

    /// A text file a client publishes, or nothing (logged) when it cannot be read.
    async fn read_from(&self, client: &str, uri: &str) -> Option<String> {
        match self.read_client_resource(client, uri).await {
            Ok(read) => read.text.or_else(|| String::from_utf8(read.bytes).ok()),
            Err(e) => {
                tracing::warn!(client, rule = uri, "could not read the client's rule: {e:?}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_applies_unless_it_or_its_plugin_was_toggled_off() {
        let shown = |plugin_on: Option<bool>, rule_on: bool| -> Vec<Customization> {
            serde_json::from_value(json!([{
                "type": "plugin", "id": "team", "uri": "virtual://c1/team", "name": "Team", "clientId": "c1",
                "enablement": plugin_on.map(|on| json!([{"kind": "session", "enabled": on}])),
                "children": [{"type": "rule", "id": "r1", "uri": "virtual://c1/team/r1.mdc", "name": "r1",
                              "enabled": rule_on}]
            }]))
            .expect("a plugin")
        };
        let body = RuleBody { plugin: "team".into(), rule: "r1".into(), text: "Be brief.".into() };
        assert!(toggled_on(&shown(None, true), "c1", &body));
        assert!(toggled_on(&shown(Some(true), true), "c1", &body));
        assert!(!toggled_on(&shown(Some(false), true), "c1", &body), "its plugin is off");
        assert!(!toggled_on(&shown(None, false), "c1", &body), "the rule is off");
        assert!(toggled_on(&shown(Some(false), true), "c2", &body), "another client's plugin of that id");
        assert!(toggled_on(&[], "c1", &body), "not shown yet");
    }

    #[test]
    fn only_always_applied_rules_give_their_body_without_the_frontmatter() {
        let rule = "---\ndescription: x\nalwaysApply: true\n---\n\nUse tabs.\n";
        assert_eq!(always_applied(rule).as_deref(), Some("Use tabs."));
        assert_eq!(always_applied("---\nalwaysApply: false\n---\nNo.").as_deref(), None);
        assert_eq!(always_applied("---\nglobs: '*.rs'\n---\nNo.").as_deref(), None);
        assert_eq!(always_applied("No frontmatter at all.").as_deref(), None);
        assert_eq!(always_applied("---\r\nalwaysApply: \"true\"\r\n---\r\nQuoted.").as_deref(), Some("Quoted."));
    }

    #[test]
    fn rule_files_are_mdc_and_instructions_md() {
        assert!(is_rule_file("style.mdc"));
        assert!(is_rule_file("a.instructions.md"));
        assert!(!is_rule_file("README.md"));
    }
}
