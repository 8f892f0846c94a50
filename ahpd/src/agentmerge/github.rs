//! GitHub as Agent Merge asks it, through the one client ahpd has (`crate::github`): the pull
//! request of a branch, its head's check runs and the checks it requires (the shared
//! repository's calls), and Agent Merge's own: workflow runs, jobs and job logs, a rerun, a merge;
//! review threads, a reply and a resolve.

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::json;

pub use crate::github::repo::{CheckRun, PullRequest};
pub use crate::github::{ApiError, Nodes, Reset};
use crate::github::{Page, Remote, Repository, Token};

#[derive(Debug, Clone, Deserialize)]
struct WorkflowRuns {
    workflow_runs: Vec<WorkflowRun>,
}

/// A GitHub Actions workflow run.
#[derive(Debug, Clone, Deserialize)]
pub struct WorkflowRun {
    pub id: u64,
    #[serde(default)]
    pub name: Option<String>,
    pub status: String,
    #[serde(default)]
    pub conclusion: Option<String>,
    #[serde(default = "first_attempt")]
    pub run_attempt: u64,
    pub head_sha: String,
}

fn first_attempt() -> u64 {
    1
}

#[derive(Debug, Clone, Deserialize)]
struct Jobs {
    jobs: Vec<Job>,
}

/// One job of a workflow run.
#[derive(Debug, Clone, Deserialize)]
pub struct Job {
    pub id: u64,
    pub run_id: u64,
    pub name: String,
    pub status: String,
    #[serde(default)]
    pub conclusion: Option<String>,
    #[serde(default)]
    pub steps: Vec<Step>,
}

/// One step of a job.
#[derive(Debug, Clone, Deserialize)]
pub struct Step {
    pub name: String,
    pub number: u64,
    #[serde(default)]
    pub conclusion: Option<String>,
}

/// A merge's answer.
#[derive(Debug, Clone, Deserialize)]
pub struct Merged {
    pub merged: bool,
    #[serde(default)]
    pub message: String,
}

/// An unresolved review thread, as a repair turn is told it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewThread {
    pub id: String,
    pub is_resolved: bool,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub line: Option<u64>,
    pub comments: Nodes<Comment>,
}

/// A review comment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comment {
    pub id: String,
    pub body: String,
    #[serde(default)]
    pub author: Option<Author>,
    /// What GitHub lists its author as to the repository: `OWNER`, `MEMBER`, `COLLABORATOR`,
    /// `CONTRIBUTOR`, `FIRST_TIME_CONTRIBUTOR`, `NONE`, …
    #[serde(default, rename = "authorAssociation")]
    pub author_association: Option<String>,
    /// `PENDING` while it sits in its author's unsubmitted review.
    #[serde(default)]
    pub state: Option<String>,
}

/// Who wrote a comment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Author {
    pub login: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ThreadsData {
    repository: Option<RepositoryThreads>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RepositoryThreads {
    pull_request: Option<PullThreads>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PullThreads {
    review_threads: Page<ReviewThread>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReplyData {
    add_pull_request_review_thread_reply: ReplyPayload,
}

#[derive(Deserialize)]
struct ReplyPayload {
    comment: Comment,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResolveData {
    resolve_review_thread: ResolvePayload,
}

#[derive(Deserialize)]
struct ResolvePayload {
    thread: ResolvedThread,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResolvedThread {
    is_resolved: bool,
}

const THREADS: &str = "query($owner: String!, $name: String!, $number: Int!, $cursor: String) { repository(owner: $owner, name: $name) { pullRequest(number: $number) { reviewThreads(first: 100, after: $cursor) { nodes { id isResolved path line comments(first: 50) { nodes { id body author { login } authorAssociation state } } } pageInfo { hasNextPage endCursor } } } } }";
const REPLY: &str = "mutation($thread: ID!, $body: String!) { addPullRequestReviewThreadReply(input: {pullRequestReviewThreadId: $thread, body: $body}) { comment { id body authorAssociation state } } }";
const RESOLVE: &str =
    "mutation($thread: ID!) { resolveReviewThread(input: {threadId: $thread}) { thread { id isResolved } } }";

/// One repository's API as Agent Merge asks it, with the token it acts with.
pub struct GitHub {
    repo: Repository,
}

impl GitHub {
    /// The API of `remote`'s repository at `api` (its REST base URL).
    pub fn new(remote: &Remote, api: &str, token: Token) -> Result<Self, ApiError> {
        Ok(Self { repo: Repository::new(&remote.owner, &remote.repo, api, token)? })
    }

    /// The token it acts with.
    pub fn token(&self) -> &Token {
        self.repo.token()
    }

    /// The repository, as `owner/name`.
    pub fn full_name(&self) -> String {
        self.repo.full_name()
    }

    /// The open pull request whose head is `branch` of this repository, if there is one. A `404`
    /// here says GitHub shows the token no such repository.
    pub async fn pull_request_of(&self, branch: &str) -> Result<Option<PullRequest>, ApiError> {
        self.repo.pull_of_branch(branch).await
    }

    /// The check runs on a commit, every page of them.
    pub async fn check_runs(&self, sha: &str) -> Result<Vec<CheckRun>, ApiError> {
        self.repo.check_runs(sha).await
    }

    /// The ids of the head's check runs that branch protection requires for this pull request.
    pub async fn required_checks(&self, number: u64) -> Result<std::collections::HashSet<u64>, ApiError> {
        self.repo.required_checks(number).await
    }

    /// The workflow runs of a commit, every page of them.
    pub async fn workflow_runs(&self, sha: &str) -> Result<Vec<WorkflowRun>, ApiError> {
        let path = format!("{}/actions/runs?head_sha={sha}", self.repo.path());
        self.repo.client().list(&path, |page: WorkflowRuns| page.workflow_runs).await
    }

    /// One workflow run.
    pub async fn workflow_run(&self, run: u64) -> Result<WorkflowRun, ApiError> {
        self.repo.client().get(&format!("{}/actions/runs/{run}", self.repo.path())).await
    }

    /// The jobs of a workflow run's latest attempt, every page of them (a matrix has many).
    pub async fn jobs(&self, run: u64) -> Result<Vec<Job>, ApiError> {
        let path = format!("{}/actions/runs/{run}/jobs", self.repo.path());
        self.repo.client().list(&path, |page: Jobs| page.jobs).await
    }

    /// A job's log, as text (GitHub answers with a redirect to it, which is followed).
    pub async fn job_log(&self, job: u64) -> Result<String, ApiError> {
        self.repo.client().send(Method::GET, &format!("{}/actions/jobs/{job}/logs", self.repo.path()), None).await
    }

    /// Reruns a workflow run (its failed jobs only, or all of it).
    pub async fn rerun(&self, run: u64, failed_jobs_only: bool) -> Result<(), ApiError> {
        let what = if failed_jobs_only { "rerun-failed-jobs" } else { "rerun" };
        let path = format!("{}/actions/runs/{run}/{what}", self.repo.path());
        self.repo.client().send(Method::POST, &path, Some(&json!({}))).await.map(|_| ())
    }

    /// Merges a pull request at `sha` with `method` (`merge`, `squash`, `rebase`).
    pub async fn merge(&self, number: u64, sha: &str, method: &str) -> Result<Merged, ApiError> {
        let path = format!("{}/pulls/{number}/merge", self.repo.path());
        let body = json!({ "merge_method": method, "sha": sha });
        let text = self.repo.client().send(Method::PUT, &path, Some(&body)).await?;
        serde_json::from_str(&text).map_err(ApiError::transport)
    }

    /// The review threads of a pull request, every page of them.
    pub async fn review_threads(&self, number: u64) -> Result<Vec<ReviewThread>, ApiError> {
        let variables = json!({ "owner": self.repo.owner(), "name": self.repo.name(), "number": number });
        self.repo
            .client()
            .connection(THREADS, variables, |data: ThreadsData| {
                data.repository.and_then(|r| r.pull_request).map(|p| p.review_threads)
            })
            .await
    }

    /// Replies in a review thread; answers the comment (its `state` says `PENDING` when it landed
    /// in its author's unsubmitted review).
    pub async fn reply(&self, thread: &str, body: &str) -> Result<Comment, ApiError> {
        let data: ReplyData = self.repo.client().graphql(REPLY, json!({ "thread": thread, "body": body })).await?;
        Ok(data.add_pull_request_review_thread_reply.comment)
    }

    /// Resolves a review thread.
    pub async fn resolve(&self, thread: &str) -> Result<bool, ApiError> {
        let data: ResolveData = self.repo.client().graphql(RESOLVE, json!({ "thread": thread })).await?;
        Ok(data.resolve_review_thread.thread.is_resolved)
    }
}
