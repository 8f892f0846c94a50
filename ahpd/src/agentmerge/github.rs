//! GitHub's REST and GraphQL APIs as Agent Merge uses them, on `reqwest` with typed models: the
//! pull request of a branch, its head's check runs, workflow runs, jobs and job logs, a rerun, a
//! merge; review threads, a reply and a resolve.
//!
//! A GET is conditional: the ETag of each URL's last answer is sent back (`If-None-Match`), and a
//! `304 Not Modified` (which GitHub does not count against the rate limit) answers the body kept
//! with it. A refusal carries GitHub's own words (`message`, or a GraphQL error's), so a model or
//! a person reads what GitHub said. The token goes in the `Authorization` header and nowhere else.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::{HeaderMap, ACCEPT, AUTHORIZATION, ETAG, IF_NONE_MATCH, RETRY_AFTER, USER_AGENT};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::remote::Remote;
use super::token::Token;

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What went wrong asking GitHub.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// GitHub answered with a refusal, in its words.
    #[error("{message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// GitHub's `message`.
        message: String,
    },
    /// The rate limit is spent: try again after this long.
    #[error("GitHub's rate limit is spent; trying again in {} s", .0.as_secs())]
    RateLimited(Duration),
    /// The request did not get an answer, or the answer did not read.
    #[error("GitHub could not be reached: {0}")]
    Transport(String),
}

impl ApiError {
    fn transport(e: impl std::fmt::Display) -> Self {
        Self::Transport(e.to_string())
    }
}

/// A pull request.
#[derive(Debug, Clone, Deserialize)]
pub struct PullRequest {
    pub number: u64,
    #[serde(default)]
    pub html_url: String,
    pub head: Head,
    /// `clean` when GitHub would merge it now (checks and required reviews in).
    #[serde(default)]
    pub mergeable_state: Option<String>,
    #[serde(default)]
    pub draft: bool,
}

/// A pull request's head.
#[derive(Debug, Clone, Deserialize)]
pub struct Head {
    pub sha: String,
    #[serde(rename = "ref")]
    pub branch: String,
}

#[derive(Debug, Clone, Deserialize)]
struct CheckRuns {
    check_runs: Vec<CheckRun>,
}

/// A check run on a commit.
#[derive(Debug, Clone, Deserialize)]
pub struct CheckRun {
    pub id: u64,
    pub name: String,
    pub status: String,
    #[serde(default)]
    pub conclusion: Option<String>,
    #[serde(default)]
    pub output: Option<CheckOutput>,
}

/// What a check run said about itself.
#[derive(Debug, Clone, Deserialize)]
pub struct CheckOutput {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub summary: Option<String>,
}

impl CheckRun {
    /// Finished, and not in a way that lets a merge through.
    pub fn failed(&self) -> bool {
        self.status == "completed"
            && matches!(self.conclusion.as_deref(), Some("failure" | "timed_out" | "cancelled" | "action_required"))
    }

    /// Finished in a way that lets a merge through.
    pub fn passed(&self) -> bool {
        self.status == "completed" && matches!(self.conclusion.as_deref(), Some("success" | "neutral" | "skipped"))
    }
}

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

/// A GraphQL connection's nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nodes<T> {
    pub nodes: Vec<T>,
}

/// A review comment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comment {
    pub id: String,
    pub body: String,
    #[serde(default)]
    pub author: Option<Author>,
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
struct GraphQl<T> {
    data: Option<T>,
    #[serde(default)]
    errors: Vec<GraphQlError>,
}

#[derive(Deserialize)]
struct GraphQlError {
    message: String,
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
    review_threads: Nodes<ReviewThread>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequiredData {
    repository: Option<RequiredRepository>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequiredRepository {
    pull_request: Option<RequiredPull>,
}

#[derive(Deserialize)]
struct RequiredPull {
    commits: Nodes<RequiredCommitNode>,
}

#[derive(Deserialize)]
struct RequiredCommitNode {
    commit: RequiredCommit,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequiredCommit {
    status_check_rollup: Option<RequiredRollup>,
}

#[derive(Deserialize)]
struct RequiredRollup {
    contexts: Nodes<RequiredContext>,
}

/// A check run or a commit status in the head's rollup (a status has neither field).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequiredContext {
    #[serde(default)]
    database_id: Option<u64>,
    #[serde(default)]
    is_required: bool,
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

const THREADS: &str = "query($owner: String!, $name: String!, $number: Int!) { repository(owner: $owner, name: $name) { pullRequest(number: $number) { reviewThreads(first: 100) { nodes { id isResolved path line comments(first: 50) { nodes { id body author { login } state } } } } } } }";
const REQUIRED: &str = "query($owner: String!, $name: String!, $number: Int!) { repository(owner: $owner, name: $name) { pullRequest(number: $number) { commits(last: 1) { nodes { commit { statusCheckRollup { contexts(first: 100) { nodes { __typename ... on CheckRun { databaseId isRequired(pullRequestNumber: $number) } } } } } } } } } }";
const REPLY: &str = "mutation($thread: ID!, $body: String!) { addPullRequestReviewThreadReply(input: {pullRequestReviewThreadId: $thread, body: $body}) { comment { id body state } } }";
const RESOLVE: &str =
    "mutation($thread: ID!) { resolveReviewThread(input: {threadId: $thread}) { thread { id isResolved } } }";

/// One repository's API, with the token it acts with.
pub struct GitHub {
    http: reqwest::Client,
    api: String,
    graphql: String,
    repo: String,
    owner: String,
    name: String,
    token: Token,
    /// Each GET URL's last ETag and body.
    cache: Mutex<HashMap<String, (String, String)>>,
}

impl GitHub {
    /// The API of `remote`'s repository at `api` (its REST base URL).
    pub fn new(remote: &Remote, api: &str, token: Token) -> Result<Self, ApiError> {
        let http = reqwest::Client::builder().timeout(REQUEST_TIMEOUT).build().map_err(ApiError::transport)?;
        // github.com's GraphQL is at api.github.com/graphql; an Enterprise host's at /api/graphql.
        let graphql = match api.strip_suffix("/api/v3") {
            Some(host) => format!("{host}/api/graphql"),
            None => format!("{api}/graphql"),
        };
        Ok(Self {
            http,
            api: api.to_owned(),
            graphql,
            repo: format!("/repos/{}", remote.full_name()),
            owner: remote.owner.clone(),
            name: remote.repo.clone(),
            token,
            cache: Mutex::new(HashMap::new()),
        })
    }

    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let bearer = format!("Bearer {}", self.token.secret());
        if let Ok(mut value) = reqwest::header::HeaderValue::from_str(&bearer) {
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        headers.insert(ACCEPT, reqwest::header::HeaderValue::from_static("application/vnd.github+json"));
        headers.insert(USER_AGENT, reqwest::header::HeaderValue::from_static("ahpd-agent-merge"));
        headers.insert("x-github-api-version", reqwest::header::HeaderValue::from_static("2022-11-28"));
        headers
    }

    /// Sends a request; answers the body of a success, or GitHub's refusal.
    async fn send(&self, method: Method, url: &str, body: Option<&Value>) -> Result<String, ApiError> {
        let cached = (method == Method::GET)
            .then(|| self.cache.lock().unwrap_or_else(|p| p.into_inner()).get(url).cloned())
            .flatten();
        let mut request = self.http.request(method.clone(), url).headers(self.headers());
        if let Some((etag, _)) = &cached {
            request = request.header(IF_NONE_MATCH, etag);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(ApiError::transport)?;
        let status = response.status();
        if status == StatusCode::NOT_MODIFIED {
            if let Some((_, body)) = cached {
                return Ok(body);
            }
        }
        let headers = response.headers().clone();
        let text = response.text().await.map_err(ApiError::transport)?;
        if let Some(limited) = rate_limited(status, &headers) {
            return Err(ApiError::RateLimited(limited));
        }
        if !status.is_success() {
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| format!("GitHub answered {status}"));
            return Err(ApiError::Refused { status: status.as_u16(), message });
        }
        if method == Method::GET {
            if let Some(etag) = headers.get(ETAG).and_then(|v| v.to_str().ok()) {
                let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                cache.insert(url.to_owned(), (etag.to_owned(), text.clone()));
            }
        }
        Ok(text)
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        let text = self.send(Method::GET, &format!("{}{path}", self.api), None).await?;
        serde_json::from_str(&text).map_err(ApiError::transport)
    }

    async fn graphql<T: DeserializeOwned>(&self, query: &str, variables: Value) -> Result<T, ApiError> {
        let body = json!({ "query": query, "variables": variables });
        let text = self.send(Method::POST, &self.graphql, Some(&body)).await?;
        let answer: GraphQl<T> = serde_json::from_str(&text).map_err(ApiError::transport)?;
        if let Some(error) = answer.errors.into_iter().next() {
            return Err(ApiError::Refused { status: 200, message: error.message });
        }
        answer.data.ok_or_else(|| ApiError::Transport("GitHub's GraphQL answer held no data".into()))
    }

    /// The open pull request whose head is `branch` of this repository, if there is one.
    pub async fn pull_request_of(&self, branch: &str) -> Result<Option<PullRequest>, ApiError> {
        let head =
            url::form_urlencoded::byte_serialize(format!("{}:{branch}", self.owner).as_bytes()).collect::<String>();
        let listed: Vec<PullRequest> = self.get(&format!("{}/pulls?head={head}&state=open", self.repo)).await?;
        match listed.first() {
            // The list leaves out whether it is mergeable; the pull request itself says.
            Some(pull) => Ok(Some(self.get(&format!("{}/pulls/{}", self.repo, pull.number)).await?)),
            None => Ok(None),
        }
    }

    /// The check runs on a commit.
    pub async fn check_runs(&self, sha: &str) -> Result<Vec<CheckRun>, ApiError> {
        Ok(self.get::<CheckRuns>(&format!("{}/commits/{sha}/check-runs", self.repo)).await?.check_runs)
    }

    /// The workflow runs of a commit.
    pub async fn workflow_runs(&self, sha: &str) -> Result<Vec<WorkflowRun>, ApiError> {
        Ok(self.get::<WorkflowRuns>(&format!("{}/actions/runs?head_sha={sha}", self.repo)).await?.workflow_runs)
    }

    /// One workflow run.
    pub async fn workflow_run(&self, run: u64) -> Result<WorkflowRun, ApiError> {
        self.get(&format!("{}/actions/runs/{run}", self.repo)).await
    }

    /// The jobs of a workflow run's latest attempt.
    pub async fn jobs(&self, run: u64) -> Result<Vec<Job>, ApiError> {
        Ok(self.get::<Jobs>(&format!("{}/actions/runs/{run}/jobs", self.repo)).await?.jobs)
    }

    /// A job's log, as text (GitHub answers with a redirect to it, which is followed).
    pub async fn job_log(&self, job: u64) -> Result<String, ApiError> {
        self.send(Method::GET, &format!("{}{}/actions/jobs/{job}/logs", self.api, self.repo), None).await
    }

    /// Reruns a workflow run (its failed jobs only, or all of it).
    pub async fn rerun(&self, run: u64, failed_jobs_only: bool) -> Result<(), ApiError> {
        let what = if failed_jobs_only { "rerun-failed-jobs" } else { "rerun" };
        let url = format!("{}{}/actions/runs/{run}/{what}", self.api, self.repo);
        self.send(Method::POST, &url, Some(&json!({}))).await.map(|_| ())
    }

    /// Merges a pull request at `sha` with `method` (`merge`, `squash`, `rebase`).
    pub async fn merge(&self, number: u64, sha: &str, method: &str) -> Result<Merged, ApiError> {
        let url = format!("{}{}/pulls/{number}/merge", self.api, self.repo);
        let text = self.send(Method::PUT, &url, Some(&json!({ "merge_method": method, "sha": sha }))).await?;
        serde_json::from_str(&text).map_err(ApiError::transport)
    }

    /// The review threads of a pull request.
    pub async fn review_threads(&self, number: u64) -> Result<Vec<ReviewThread>, ApiError> {
        let data: ThreadsData =
            self.graphql(THREADS, json!({ "owner": self.owner, "name": self.name, "number": number })).await?;
        Ok(data.repository.and_then(|r| r.pull_request).map(|p| p.review_threads.nodes).unwrap_or_default())
    }

    /// The ids of the head's check runs that branch protection requires for this pull request.
    pub async fn required_checks(&self, number: u64) -> Result<std::collections::HashSet<u64>, ApiError> {
        let data: RequiredData =
            self.graphql(REQUIRED, json!({ "owner": self.owner, "name": self.name, "number": number })).await?;
        let nodes = data
            .repository
            .and_then(|r| r.pull_request)
            .map(|p| p.commits.nodes)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|n| n.commit.status_check_rollup)
            .flat_map(|r| r.contexts.nodes);
        Ok(nodes.filter(|c| c.is_required).filter_map(|c| c.database_id).collect())
    }

    /// Replies in a review thread; answers the comment (its `state` says `PENDING` when it landed
    /// in its author's unsubmitted review).
    pub async fn reply(&self, thread: &str, body: &str) -> Result<Comment, ApiError> {
        let data: ReplyData = self.graphql(REPLY, json!({ "thread": thread, "body": body })).await?;
        Ok(data.add_pull_request_review_thread_reply.comment)
    }

    /// Resolves a review thread.
    pub async fn resolve(&self, thread: &str) -> Result<bool, ApiError> {
        let data: ResolveData = self.graphql(RESOLVE, json!({ "thread": thread })).await?;
        Ok(data.resolve_review_thread.thread.is_resolved)
    }
}

/// How long to wait when GitHub says the rate limit is spent (`Retry-After`, or
/// `x-ratelimit-remaining: 0` until `x-ratelimit-reset`).
fn rate_limited(status: StatusCode, headers: &HeaderMap) -> Option<Duration> {
    if status != StatusCode::FORBIDDEN && status != StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    let number = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if let Some(seconds) = number(RETRY_AFTER.as_str()) {
        return Some(Duration::from_secs(seconds));
    }
    if number("x-ratelimit-remaining") == Some(0) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
        let reset = number("x-ratelimit-reset").unwrap_or(now + 60);
        return Some(Duration::from_secs(reset.saturating_sub(now).max(1)));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spent_rate_limit_says_how_long_to_wait() {
        let mut headers = HeaderMap::new();
        assert_eq!(rate_limited(StatusCode::FORBIDDEN, &headers), None, "a refusal of another kind");
        headers.insert(RETRY_AFTER, "7".parse().expect("a value"));
        assert_eq!(rate_limited(StatusCode::TOO_MANY_REQUESTS, &headers), Some(Duration::from_secs(7)));
        assert_eq!(rate_limited(StatusCode::BAD_GATEWAY, &headers), None);
        let mut spent = HeaderMap::new();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("now").as_secs();
        spent.insert("x-ratelimit-remaining", "0".parse().expect("a value"));
        spent.insert("x-ratelimit-reset", (now + 120).to_string().parse().expect("a value"));
        let wait = rate_limited(StatusCode::FORBIDDEN, &spent).expect("limited");
        assert!((Duration::from_secs(118)..=Duration::from_secs(120)).contains(&wait), "{wait:?}");
    }

    #[test]
    fn an_enterprise_apis_graphql_is_beside_its_rest() {
        let remote = Remote { host: "ghe.example.com".into(), owner: "o".into(), repo: "r".into() };
        let token = Token::for_tests("t");
        let api = GitHub::new(&remote, &remote.api_base(None), token.clone()).expect("a client");
        assert_eq!(api.graphql, "https://ghe.example.com/api/graphql");
        let github = Remote { host: "github.com".into(), ..remote };
        let api = GitHub::new(&github, &github.api_base(None), token).expect("a client");
        assert_eq!(api.graphql, "https://api.github.com/graphql");
    }
}
