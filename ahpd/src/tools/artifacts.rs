//! The reference host's three artifact tools, by name, schema and wording:
//! `add_artifact_or_reference`, `remove_artifact_or_reference`, `list_artifacts_and_references`.
//!
//! The list lives on the session's `_meta['agentHost/sessionArtifacts']`, which a client draws as
//! pills beside the chat input. It is written through the host's commit path
//! (`session/metaChanged` on the session channel) and kept with the session's record, so every
//! client of the session sees one list and it survives a restart. An entry is `{ id, type, label,
//! isArtifact, link?, uri?, commitHash?, isGitHub? }`; two entries are the same one when they point
//! at the same thing (link, else uri, else commit hash), and adding an artifact that the session
//! holds as a reference promotes that reference in place, keeping its id.

use ahp_types::actions::{SessionMetaChangedAction, StateAction};
use ahp_types::common::JsonObject;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::session::NoArgs;
use super::{declare, Group, Refusal, Tool, ToolCall, ToolInfo, ToolResult};
use crate::host::Host;

/// The `_meta` key the reference client reads the list from.
pub const META_KEY: &str = "agentHost/sessionArtifacts";

const ADD: &str = "add_artifact_or_reference";
const REMOVE: &str = "remove_artifact_or_reference";
const LIST: &str = "list_artifacts_and_references";

const TYPES: [&str; 6] = ["pullRequest", "issue", "commit", "website", "file", "resource"];

const CLASSIFICATION: &str = "An issue or pull request you create or attempt to fix, change, or unblock is an artifact; inspection or review alone makes it a reference.";

/// The instruction the reference host gives while these tools are offered: when registering is
/// worth a call.
const INSTRUCTION: &str = "Record notable artifacts and references with `add_artifact_or_reference` so they are surfaced next to the chat input. Registration is optional, not an inventory of everything saved; default to no registration. An issue or pull request you create or attempt to fix, change, or unblock is an artifact; inspection or review alone makes it a reference. Other artifacts are deliverables the user explicitly requested or standalone results the user is clearly likely to reopen, download, or reuse; references are existing resources the user will likely want to view. Batch related entries in one call when practical. Do not record routine files, scratch files, caches, logs, intermediate results, or configuration snapshots unless the user asked for them as deliverables; persistence or location outside the workspace is not an eligibility signal. Do not record incidental resources, commits you create unless the user asks, or sessions and chats created with session-management tools. Never create, copy, or relocate a file solely to have an artifact to register.";

/// One recorded artifact or reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Its id.
    pub id: String,
    /// `pullRequest`, `issue`, `commit`, `website`, `file` or `resource`.
    #[serde(rename = "type")]
    pub kind: String,
    /// What a person reads.
    pub label: String,
    /// A deliverable (`true`) or something to look at (`false`).
    pub is_artifact: bool,
    /// The web address of a pull request, issue, commit or website.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// The URI of a file or resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// A commit's hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_hash: Option<String>,
    /// A pull request or issue on GitHub, which the window draws with its mark.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_git_hub: Option<bool>,
}

impl Artifact {
    /// What makes two entries the same one: the thing they point at.
    fn value(&self) -> &str {
        self.link.as_deref().or(self.uri.as_deref()).or(self.commit_hash.as_deref()).unwrap_or("")
    }

    fn noun(&self) -> &'static str {
        if self.is_artifact {
            "artifact"
        } else {
            "reference"
        }
    }

    fn describe(&self) -> String {
        let value = self.value();
        let tail = if value.is_empty() { String::new() } else { format!(" \u{2014} {value}") };
        format!("{} ({}, {}) {}{tail}", self.id, self.kind, self.noun(), self.label)
    }
}

/// `add_artifact_or_reference`'s arguments, as its schema says them; the tool reads its input
/// itself (each entry in its own words, and the older single-entry shape too).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddArtifacts {
    /// Artifacts and references to record in this call. Batch related entries when practical.
    #[schemars(length(min = 1))]
    pub items: Vec<Entry>,
}

// One entry `add_artifact_or_reference` records (no description of its own in the schema).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The kind of artifact or reference. Use `resource` only when no other kind applies.
    #[serde(rename = "type")]
    #[schemars(extend("enum" = TYPES))]
    pub kind: String,
    /// Short label shown to the user.
    pub label: String,
    /// Required. `true` for an artifact, `false` for a reference. An issue or pull request you create or attempt to fix, change, or unblock is an artifact; inspection or review alone makes it a reference. Other artifacts are deliverables the user requested or standalone results they are clearly likely to reopen, download, or reuse, such as a report the user asked for. References are existing resources the user should look at because of this task.
    pub is_artifact: bool,
    /// URL of the pull request, issue, commit or website. Required for those kinds.
    pub link: Option<String>,
    /// Absolute URI including its scheme. For a local file, pass a file URI such as `file:///C:/path/to/file`, not a plain file system path such as `C:\path\to\file`. Required for the `file` and `resource` kinds.
    pub uri: Option<String>,
    /// The commit hash. Required for the `commit` kind.
    pub commit_hash: Option<String>,
}

/// `remove_artifact_or_reference`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RemoveArtifact {
    /// The id returned by `add_artifact_or_reference` or `list_artifacts_and_references`.
    pub id: String,
}

/// The three tools.
pub fn tools() -> Vec<Tool> {
    let add_description = format!(
        "Record one or more artifacts or references so they are surfaced next to the chat input. Use `items` and batch related entries in one call when practical. Registration is optional, not an inventory of everything saved; default to no registration. {CLASSIFICATION} Other artifacts are deliverables the user requested or standalone results they are clearly likely to reopen, download, or reuse, such as a report or plan the user asked for. References are noteworthy existing resources the user will likely want to view. Do not record routine files, scratch files, caches, logs, intermediate results, or configuration snapshots unless the user asked for them as deliverables; persistence or location outside the workspace is not an eligibility signal. Do not record incidental resources or sessions and chats created with session-management tools. Never create, copy, or relocate a file solely to have an artifact to register."
    );
    vec![
        // The add tool the instruction names is never deferred; removing and listing are, since
        // the model reaches them through the discovery that instruction points at.
        declare::<AddArtifacts>(Group::Artifact, ADD, &add_description)
            .with(|info| not_read_only(info.titled("Add Artifact or Reference").writes().instruction(INSTRUCTION)))
            .reads_its_input(|cx| Box::pin(std::future::ready(add(cx.host, cx.call)))),
        declare::<RemoveArtifact>(Group::Artifact, REMOVE, "Remove an artifact or reference from this session by id.")
            .with(|info| info.titled("Remove Artifact or Reference").destructive().deferred())
            .answers(|cx, args| remove(cx.host, cx.call, args)),
        declare::<NoArgs>(
            Group::Artifact,
            LIST,
            "List the artifacts and references recorded on this session, with their ids.",
        )
        .with(|info| info.titled("List Artifacts and References").read_only().deferred())
        .answers(|cx, _| list(cx.host, cx.call)),
    ]
}

/// Says `readOnlyHint: false`, as the reference does for the add tool.
fn not_read_only(mut info: ToolInfo) -> ToolInfo {
    let annotations = info.definition.annotations.get_or_insert_with(super::empty_annotations);
    annotations.read_only_hint = Some(false);
    info
}

fn calling_session(call: &ToolCall, tool: &str) -> Result<String, Refusal> {
    call.session
        .clone()
        .ok_or_else(|| format!("{tool} records on the session it is called from, and this call has none.").into())
}

fn add(host: &Host, call: &ToolCall) -> ToolResult {
    let session = calling_session(call, ADD)?;
    let wanted = parse_items(&call.input)?;
    if wanted
        .iter()
        .any(|a| a.uri.as_deref().is_some_and(|u| u.to_ascii_lowercase().starts_with("agent-host-session:")))
    {
        return Err(format!("Invalid {ADD} input: sessions and chats created with session-management tools must not be recorded as artifacts or references.").into());
    }
    let mut core = host.lock();
    let mut held = held(&core, &session);
    let mut said = Vec::new();
    for one in wanted {
        said.push(record(&mut held, one));
    }
    keep(host, &mut core, &session, &held)?;
    Ok(said.join("\n"))
}

/// Adds one entry to the list, or promotes the reference it matches, or finds it recorded.
fn record(held: &mut Vec<Artifact>, mut one: Artifact) -> String {
    match held.iter_mut().find(|other| other.value() == one.value()) {
        None => {
            one.id = crate::host::facade::new_id();
            let said = format!("Added {}: {}", one.noun(), one.id);
            held.push(one);
            said
        }
        Some(same) if !same.is_artifact && one.is_artifact => {
            one.id = same.id.clone();
            *same = one;
            format!("Promoted artifact: {}", same.id)
        }
        Some(same) => format!("Already recorded: {}", same.id),
    }
}

fn remove(host: &Host, call: &ToolCall, args: RemoveArtifact) -> ToolResult {
    let session = calling_session(call, REMOVE)?;
    let id = args.id;
    let mut core = host.lock();
    let mut held = held(&core, &session);
    let Some(at) = held.iter().position(|a| a.id == id) else {
        return Ok(format!("No artifact or reference with id {id}."));
    };
    let gone = held.remove(at);
    keep(host, &mut core, &session, &held)?;
    Ok(format!("Removed {}: {}", gone.noun(), gone.id))
}

fn list(host: &Host, call: &ToolCall) -> ToolResult {
    let session = calling_session(call, LIST)?;
    let mut core = host.lock();
    host.ensure_loaded(&mut core, &session);
    let held = held(&core, &session);
    if held.is_empty() {
        return Ok("No artifacts or references recorded for this session.".to_owned());
    }
    Ok(held.iter().map(Artifact::describe).collect::<Vec<_>>().join("\n"))
}

/// The session's recorded list; a malformed entry is left out rather than drawn wrong.
pub fn held(core: &crate::host::Core, session: &str) -> Vec<Artifact> {
    let list = core.session_state(session).and_then(|s| s.meta.as_ref()).and_then(|m| m.get(META_KEY));
    list.and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|raw| serde_json::from_value::<Artifact>(raw.clone()).ok())
                .filter(|a| TYPES.contains(&a.kind.as_str()))
                .collect()
        })
        .unwrap_or_default()
}

/// Writes the list onto the session's `_meta` through the commit path, which keeps it with the
/// session's record.
fn keep(host: &Host, core: &mut crate::host::Core, session: &str, held: &[Artifact]) -> Result<(), Refusal> {
    if !host.ensure_loaded(core, session) {
        return Err(format!("There is no session {session}.").into());
    }
    let mut meta: JsonObject = core.session_state(session).and_then(|s| s.meta.clone()).unwrap_or_default();
    let list = serde_json::to_value(held).map_err(|e| format!("could not encode the artifacts: {e}"))?;
    meta.insert(META_KEY.to_owned(), list);
    let action = StateAction::SessionMetaChanged(SessionMetaChangedAction { meta: Some(meta) });
    core.apply(session, action, None, None);
    Ok(())
}

/// The batch, or the older single-entry shape, which is still taken.
fn parse_items(input: &Value) -> Result<Vec<Artifact>, Refusal> {
    let Some(object) = input.as_object() else {
        return Err(format!("Invalid {ADD} input: expected an object.").into());
    };
    match object.get("items") {
        None => Ok(vec![parse_entry(input, None)?]),
        Some(Value::Array(items)) if !items.is_empty() => {
            items.iter().enumerate().map(|(n, item)| parse_entry(item, Some(&format!("items[{n}]")))).collect()
        }
        Some(_) => Err(format!("Invalid {ADD} input: items must be a non-empty array.").into()),
    }
}

fn parse_entry(raw: &Value, prefix: Option<&str>) -> Result<Artifact, Refusal> {
    let field = |name: &str| match prefix {
        Some(p) => format!("{p}.{name}"),
        None => name.to_owned(),
    };
    let Some(args) = raw.as_object() else {
        return Err(match prefix {
            Some(p) => format!("Invalid {ADD} input: {p} must be an object.").into(),
            None => format!("Invalid {ADD} input: expected an object.").into(),
        });
    };
    let kind = match args.get("type").and_then(Value::as_str) {
        Some(t) if TYPES.contains(&t) => t.to_owned(),
        _ => return Err(format!("Invalid {ADD} input: {} must be one of {}.", field("type"), TYPES.join(", ")).into()),
    };
    let Some(is_artifact) = args.get("isArtifact").and_then(Value::as_bool) else {
        return Err(format!(
            "Invalid {ADD} input: {} must be a boolean \u{2014} true for an artifact, false for a reference.",
            field("isArtifact")
        )
        .into());
    };
    let label = non_empty(args.get("label"), &field("label"))?;
    let mut one = Artifact {
        id: String::new(),
        kind: kind.clone(),
        label,
        is_artifact,
        link: None,
        uri: None,
        commit_hash: None,
        is_git_hub: None,
    };
    if matches!(kind.as_str(), "pullRequest" | "issue" | "website" | "commit") {
        one.link = Some(web_link(args.get("link"), &field("link"))?);
    }
    if matches!(kind.as_str(), "file" | "resource") {
        one.uri = Some(absolute_uri(args.get("uri"), &field("uri"))?);
    }
    if kind == "commit" {
        one.commit_hash = Some(non_empty(args.get("commitHash"), &field("commitHash"))?);
    }
    if matches!(kind.as_str(), "pullRequest" | "issue") {
        one.is_git_hub = one.link.as_deref().map(is_github_link);
    }
    Ok(one)
}

fn non_empty(value: Option<&Value>, field: &str) -> Result<String, Refusal> {
    match value {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        _ => Err(format!("Invalid {ADD} input: {field} must be a non-empty string.").into()),
    }
}

/// The scheme of an absolute URI (`https` of `https://…`), when it has one.
fn scheme_of(uri: &str) -> Option<&str> {
    let (scheme, _) = uri.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic() && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .then_some(scheme)
}

/// The host part of a URL with an authority (`github.com` of `https://me@github.com:443/x`).
fn host_of(link: &str) -> Option<String> {
    let rest = link.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map(|(_, h)| h).unwrap_or(authority);
    let host = host.split(':').next().unwrap_or("");
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// A link opens outside, in whatever the desktop hands the scheme to, so only the web is allowed.
fn web_link(value: Option<&Value>, field: &str) -> Result<String, Refusal> {
    let link = non_empty(value, field)?;
    let Some(scheme) = scheme_of(&link) else {
        return Err(format!("Invalid {ADD} input: {field} must be an absolute http(s) URL.").into());
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(format!("Invalid {ADD} input: {field} must be an http(s) URL, but was '{scheme}:'.").into());
    }
    if host_of(&link).is_none() {
        return Err(format!("Invalid {ADD} input: {field} must be an absolute http(s) URL.").into());
    }
    Ok(link)
}

/// A URI a client can parse: with a scheme, and not a drive letter pretending to be one.
fn absolute_uri(value: Option<&Value>, field: &str) -> Result<String, Refusal> {
    let uri = non_empty(value, field)?;
    match scheme_of(&uri) {
        Some(scheme) if scheme.len() > 1 => Ok(uri),
        _ => Err(format!("Invalid {ADD} input: {field} must be an absolute URI including its scheme, such as 'file:///path/to/file' \u{2014} not a plain file system path.").into()),
    }
}

/// Whether a pull request or issue link is GitHub's.
fn is_github_link(link: &str) -> bool {
    host_of(link).is_some_and(|h| {
        h == "github.com" || h == "www.github.com" || h.ends_with(".github.com") || h.starts_with("github.")
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn reference(link: &str) -> Artifact {
        parse_entry(&json!({ "type": "issue", "label": "An issue", "isArtifact": false, "link": link }), None)
            .expect("valid")
    }

    #[test]
    fn a_reference_that_becomes_an_artifact_is_promoted_in_place() {
        let mut held = Vec::new();
        let said = record(&mut held, reference("https://github.com/o/r/issues/1"));
        let id = held[0].id.clone();
        assert_eq!(said, format!("Added reference: {id}"));
        let mut artifact = reference("https://github.com/o/r/issues/1");
        artifact.is_artifact = true;
        assert_eq!(record(&mut held, artifact), format!("Promoted artifact: {id}"));
        assert_eq!(held.len(), 1);
        assert!(held[0].is_artifact);
        assert_eq!(record(&mut held, reference("https://github.com/o/r/issues/1")), format!("Already recorded: {id}"));
        assert!(held[0].is_artifact, "an artifact is never downgraded");
    }

    #[test]
    fn links_and_uris_are_checked_in_the_reference_hosts_words() {
        let bad = |entry: Value| parse_entry(&entry, Some("items[0]")).expect_err("refused");
        assert_eq!(
            bad(json!({ "type": "issue", "label": "x", "isArtifact": true, "link": "ftp://example.com/x" })),
            "Invalid add_artifact_or_reference input: items[0].link must be an http(s) URL, but was 'ftp:'."
        );
        assert_eq!(
            bad(json!({ "type": "file", "label": "x", "isArtifact": true, "uri": "C:\\x" })),
            "Invalid add_artifact_or_reference input: items[0].uri must be an absolute URI including its scheme, such as 'file:///path/to/file' \u{2014} not a plain file system path."
        );
        assert!(is_github_link("https://github.com/o/r/pull/2"));
        assert!(!is_github_link("https://gitlab.com/o/r/pull/2"));
    }

    #[test]
    fn the_add_tool_carries_the_instruction_and_is_not_deferred() {
        let tools = tools();
        assert_eq!(tools[0].info.instruction, Some(INSTRUCTION));
        assert_eq!(tools.iter().map(|t| t.info.defer_loading).collect::<Vec<_>>(), vec![false, true, true]);
    }
}
