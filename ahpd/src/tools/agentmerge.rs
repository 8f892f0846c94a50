//! VS Code's four Agent Merge tools, in its names and words: `setAgentMergeEnabled`,
//! `readAgentMergeCI`, `replyToAgentMergeReviewThread` and `rerunAgentMergeWorkflow`.
//!
//! Their declarations live here; what they do is the Agent Merge feature's (`agentmerge/`),
//! reached through `host::facade::AgentMerge`, which reads each call's input with VS Code's own
//! parser and words: `setAgentMergeEnabled` turns Agent Merge on, off or different for the
//! calling chat's folder, keeps it, and answers the configuration in force; the other three act
//! only inside a repair turn Agent Merge started, for what that turn was asked to fix, and refuse
//! otherwise in VS Code's words.

use schemars::JsonSchema;
use serde::Deserialize;

use super::table::Running;
use super::{declare, Cx, Group, Tool};
use crate::host::facade::{AgentMerge, Pending, ToolCall};
use crate::host::Host;

const SET: &str = "setAgentMergeEnabled";
const READ_CI: &str = "readAgentMergeCI";
const REPLY: &str = "replyToAgentMergeReviewThread";
const RERUN: &str = "rerunAgentMergeWorkflow";

/// `setAgentMergeEnabled`'s arguments, as its schema says them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetAgentMerge {
    /// Whether Agent Merge should monitor and act on the pull request for this chat's folder. Pass true to update options while keeping it enabled.
    pub enabled: bool,
    /// Whether to address new pull request review comments. Omit to preserve the current option.
    pub address_reviews: Option<bool>,
    /// Whether to fix failing CI checks. Omit to preserve the current option.
    #[serde(rename = "fixCI")]
    pub fix_ci: Option<bool>,
    /// Whether to resolve merge conflicts and update a behind branch. Omit to preserve the current option.
    pub resolve_conflicts: Option<bool>,
    /// When to merge automatically once ready: always, only while unchanged by Agent Merge, or never. Omit to preserve the current option.
    #[schemars(extend("enum" = ["always", "ifUnchanged", "never"]))]
    pub merge_pull_request: Option<String>,
}

/// `readAgentMergeCI`'s arguments, as its schema says them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadAgentMergeCi {
    /// Diagnostic operation. Defaults to summary.
    #[schemars(extend("enum" = ["summary", "tail", "range", "search"]))]
    pub mode: Option<String>,
    /// Host-owned job evidence ID returned by a summary.
    pub evidence_id: Option<String>,
    /// Select one authorized failed job in summary mode, including to reacquire expired or evicted evidence.
    pub job_id: Option<String>,
    /// Continuation returned by this tool. Pass alone; expired or stale cursors fail explicitly.
    pub cursor: Option<String>,
    /// First line for range or search, inclusive. Defaults to 1.
    #[schemars(range(min = 1))]
    pub start_line: Option<i64>,
    /// First column of a range, for continuing a long line. Defaults to 1.
    #[schemars(range(min = 1))]
    pub start_column: Option<i64>,
    /// Last range line, inclusive. At most 200 lines per requested range.
    #[schemars(range(min = 1))]
    pub end_line: Option<i64>,
    /// Number of tail lines. Defaults to 100; response budget may return fewer.
    #[schemars(range(min = 1, max = 200))]
    pub line_count: Option<i64>,
    /// Case-insensitive literal search text, not a regular expression.
    #[schemars(length(min = 1, max = 200))]
    pub query: Option<String>,
    /// Lines surrounding each search match. Defaults to 2.
    #[schemars(range(min = 0, max = 5))]
    pub context_lines: Option<i64>,
}

/// `replyToAgentMergeReviewThread`'s arguments, as its schema says them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplyToThread {
    /// GraphQL node ID of an authorized unresolved review thread.
    pub thread_id: String,
    /// Concise reply describing how the feedback was addressed.
    pub body: String,
    /// Whether to resolve the thread after posting the reply. Defaults to true.
    pub resolve: Option<bool>,
}

/// `rerunAgentMergeWorkflow`'s arguments, as its schema says them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RerunWorkflow {
    /// GitHub Actions workflow run ID.
    pub run_id: String,
    /// Whether to rerun only failed jobs. Defaults to true.
    pub failed_jobs_only: Option<bool>,
}

/// What one of the four asks of the feature.
type Ask = for<'a> fn(&'a dyn AgentMerge, &'a Host, &'a ToolCall) -> Pending<'a, Result<String, String>>;

/// Runs a call through the Agent Merge feature, which reads its input.
fn through_feature(cx: Cx<'_>, ask: Ask) -> Running<'_> {
    Box::pin(async move {
        let Some(feature) = cx.host.agent_merge() else {
            return Err("Agent Merge is not available on this host.".into());
        };
        ask(feature.as_ref(), cx.host, cx.call).await.map_err(Into::into)
    })
}

/// The four tools.
pub fn tools() -> Vec<Tool> {
    vec![
        declare::<SetAgentMerge>(
            Group::AgentMerge,
            SET,
            "Enable, disable, or configure Agent Merge for the current chat's folder when the user asks to start, stop, or configure Agent Merge, keep a pull request green, or merge it when ready; other folders are unchanged. Not for one-off pull request inspection or repair. This does not change the global Agent Merge setting or GitHub auto-merge. Enablement and supplied options persist for this folder. Only change options the user requests. Enabling monitoring alone does not enable automatic merging: for an explicit \"merge when green\" request, set mergePullRequest to \"always\", or \"ifUnchanged\" if the user wants to review agent-made changes first. Use the returned effective configuration when explaining what will happen. Initial enablement captures the current Git branch and returns target.branchName; autonomous work starts after the current turn ends. Calling again updates the configuration even when already enabled without changing the target; omitted options stay unchanged. The current tool-approval policy applies.",
        )
        .with(|info| info.titled("Configure Agent Merge").writes().deferred().not_read_only())
        .reads_its_input(|cx| through_feature(cx, |f, host, call| f.configure(host, call))),
        declare::<ReadAgentMergeCi>(
            Group::AgentMerge,
            READ_CI,
            "Read CI diagnostics for failed required checks authorized for the active Agent Merge turn. Defaults to a bounded summary of checks, annotations, jobs, failed steps, and failure excerpts. Use a returned evidenceId for a line-numbered tail, range, or literal search with context; pass a returned cursor alone to continue. Responses are capped at 48 KB and job downloads at 16 MiB/30 seconds. Summary pages also respect cache capacity; inspect a page before continuing. Cached evidence expires five minutes after its last summary or on eviction; use summary with jobId to reacquire just that job. Evidence is scoped to this turn, pull request head, workflow attempt, and job. A tail is the real end only when complete is true; a download limit is terminal, not evidence that the unseen log succeeded. Concurrent reads are queued, with waiting included in the three-minute call limit. Follow the returned operations rather than repeating the summary or using other GitHub tools.",
        )
        .with(|info| info.titled("Read Agent Merge CI").read_only().deferred())
        .reads_its_input(|cx| through_feature(cx, |f, host, call| f.read_ci(host, call))),
        declare::<ReplyToThread>(
            Group::AgentMerge,
            REPLY,
            "Reply to an unresolved review thread authorized for the active Agent Merge turn and optionally resolve it.",
        )
        .with(|info| info.titled("Reply to Agent Merge Review Thread").writes().deferred().not_read_only())
        .reads_its_input(|cx| through_feature(cx, |f, host, call| f.reply(host, call))),
        declare::<RerunWorkflow>(
            Group::AgentMerge,
            RERUN,
            "Rerun a GitHub Actions workflow associated with a failed required check in the active Agent Merge turn. If its current attempt is still running, Agent Merge defers the rerun until it finishes, provided CI repair remains enabled and the pull request head is unchanged. Continue other actionable work; do not poll or repeat a deferred request.",
        )
        .with(|info| info.titled("Rerun Agent Merge Workflow").writes().deferred().not_read_only())
        .reads_its_input(|cx| through_feature(cx, |f, host, call| f.rerun(host, call))),
    ]
}
