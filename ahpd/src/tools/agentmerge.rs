//! VS Code's four Agent Merge tools, in its names and words: `setAgentMergeEnabled`,
//! `readAgentMergeCI`, `replyToAgentMergeReviewThread` and `rerunAgentMergeWorkflow`.
//!
//! Their definitions live here; what they do is the Agent Merge feature's (`agentmerge/`), reached
//! through `host::facade::AgentMerge`: `setAgentMergeEnabled` turns Agent Merge on, off or
//! different for the calling chat's folder, keeps it, and answers the configuration in force; the
//! other three act only inside a repair turn Agent Merge started, for what that turn was asked to
//! fix, and refuse otherwise in VS Code's words.

use serde_json::json;

use super::{Group, ToolCall, ToolInfo, ToolResult};
use crate::host::Host;

const SET: &str = "setAgentMergeEnabled";
const READ_CI: &str = "readAgentMergeCI";
const REPLY: &str = "replyToAgentMergeReviewThread";
const RERUN: &str = "rerunAgentMergeWorkflow";

const MERGE_VALUES: [&str; 3] = ["always", "ifUnchanged", "never"];

/// The four tools.
pub fn tools() -> Vec<ToolInfo> {
    let set = ToolInfo::new(
        Group::AgentMerge,
        SET,
        "Enable, disable, or configure Agent Merge for the current chat's folder when the user asks to start, stop, or configure Agent Merge, keep a pull request green, or merge it when ready; other folders are unchanged. Not for one-off pull request inspection or repair. This does not change the global Agent Merge setting or GitHub auto-merge. Enablement and supplied options persist for this folder. Only change options the user requests. Enabling monitoring alone does not enable automatic merging: for an explicit \"merge when green\" request, set mergePullRequest to \"always\", or \"ifUnchanged\" if the user wants to review agent-made changes first. Use the returned effective configuration when explaining what will happen. Initial enablement captures the current Git branch and returns target.branchName; autonomous work starts after the current turn ends. Calling again updates the configuration even when already enabled without changing the target; omitted options stay unchanged. The current tool-approval policy applies.",
        json!({
            "type": "object",
            "properties": {
                "enabled": { "type": "boolean", "description": "Whether Agent Merge should monitor and act on the pull request for this chat's folder. Pass true to update options while keeping it enabled." },
                "addressReviews": { "type": "boolean", "description": "Whether to address new pull request review comments. Omit to preserve the current option." },
                "fixCI": { "type": "boolean", "description": "Whether to fix failing CI checks. Omit to preserve the current option." },
                "resolveConflicts": { "type": "boolean", "description": "Whether to resolve merge conflicts and update a behind branch. Omit to preserve the current option." },
                "mergePullRequest": { "type": "string", "enum": MERGE_VALUES, "description": "When to merge automatically once ready: always, only while unchanged by Agent Merge, or never. Omit to preserve the current option." },
            },
            "required": ["enabled"],
        }),
    )
    .titled("Configure Agent Merge")
    .writes()
    .deferred()
    .not_read_only();
    let reply = ToolInfo::new(
        Group::AgentMerge,
        REPLY,
        "Reply to an unresolved review thread authorized for the active Agent Merge turn and optionally resolve it.",
        json!({
            "type": "object",
            "properties": {
                "threadId": { "type": "string", "description": "GraphQL node ID of an authorized unresolved review thread." },
                "body": { "type": "string", "description": "Concise reply describing how the feedback was addressed." },
                "resolve": { "type": "boolean", "description": "Whether to resolve the thread after posting the reply. Defaults to true." },
            },
            "required": ["threadId", "body"],
        }),
    )
    .titled("Reply to Agent Merge Review Thread")
    .writes()
    .deferred()
    .not_read_only();
    let rerun = ToolInfo::new(
        Group::AgentMerge,
        RERUN,
        "Rerun a GitHub Actions workflow associated with a failed required check in the active Agent Merge turn. If its current attempt is still running, Agent Merge defers the rerun until it finishes, provided CI repair remains enabled and the pull request head is unchanged. Continue other actionable work; do not poll or repeat a deferred request.",
        json!({
            "type": "object",
            "properties": {
                "runId": { "type": "string", "description": "GitHub Actions workflow run ID." },
                "failedJobsOnly": { "type": "boolean", "description": "Whether to rerun only failed jobs. Defaults to true." },
            },
            "required": ["runId"],
        }),
    )
    .titled("Rerun Agent Merge Workflow")
    .writes()
    .deferred()
    .not_read_only();
    vec![
        set,
        ToolInfo::new(
            Group::AgentMerge,
            READ_CI,
            "Read CI diagnostics for failed required checks authorized for the active Agent Merge turn. Defaults to a bounded summary of checks, annotations, jobs, failed steps, and failure excerpts. Use a returned evidenceId for a line-numbered tail, range, or literal search with context; pass a returned cursor alone to continue. Responses are capped at 48 KB and job downloads at 16 MiB/30 seconds. Summary pages also respect cache capacity; inspect a page before continuing. Cached evidence expires five minutes after its last summary or on eviction; use summary with jobId to reacquire just that job. Evidence is scoped to this turn, pull request head, workflow attempt, and job. A tail is the real end only when complete is true; a download limit is terminal, not evidence that the unseen log succeeded. Concurrent reads are queued, with waiting included in the three-minute call limit. Follow the returned operations rather than repeating the summary or using other GitHub tools.",
            json!({
                "type": "object",
                "properties": {
                    "mode": { "type": "string", "enum": ["summary", "tail", "range", "search"], "description": "Diagnostic operation. Defaults to summary." },
                    "evidenceId": { "type": "string", "description": "Host-owned job evidence ID returned by a summary." },
                    "jobId": { "type": "string", "description": "Select one authorized failed job in summary mode, including to reacquire expired or evicted evidence." },
                    "cursor": { "type": "string", "description": "Continuation returned by this tool. Pass alone; expired or stale cursors fail explicitly." },
                    "startLine": { "type": "integer", "minimum": 1, "description": "First line for range or search, inclusive. Defaults to 1." },
                    "startColumn": { "type": "integer", "minimum": 1, "description": "First column of a range, for continuing a long line. Defaults to 1." },
                    "endLine": { "type": "integer", "minimum": 1, "description": "Last range line, inclusive. At most 200 lines per requested range." },
                    "lineCount": { "type": "integer", "minimum": 1, "maximum": 200, "description": "Number of tail lines. Defaults to 100; response budget may return fewer." },
                    "query": { "type": "string", "minLength": 1, "maxLength": 200, "description": "Case-insensitive literal search text, not a regular expression." },
                    "contextLines": { "type": "integer", "minimum": 0, "maximum": 5, "description": "Lines surrounding each search match. Defaults to 2." },
                },
            }),
        )
        .titled("Read Agent Merge CI")
        .read_only()
        .deferred(),
        reply,
        rerun,
    ]
}

/// Runs one of the four through the Agent Merge feature; `None` for another tool's name.
pub async fn run(host: &Host, name: &str, call: &ToolCall) -> Option<ToolResult> {
    if ![SET, READ_CI, REPLY, RERUN].contains(&name) {
        return None;
    }
    let Some(feature) = host.agent_merge() else {
        return Some(Err("Agent Merge is not available on this host.".into()));
    };
    let answer = match name {
        SET => feature.configure(host, call).await,
        READ_CI => feature.read_ci(host, call).await,
        REPLY => feature.reply(host, call).await,
        _ => feature.rerun(host, call).await,
    };
    Some(answer.map_err(Into::into))
}
