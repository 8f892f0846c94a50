//! One repository's calls that more than one feature makes, and their typed models: its open pull
//! requests, one pull request, the check runs on a commit or branch, the checks branch protection
//! requires of a pull request, and its issues.

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::json;

use super::{ApiError, Client, Nodes, Page, Token};

/// Who GitHub says someone is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct User {
    pub login: String,
}

/// A pull request.
#[derive(Debug, Clone, Deserialize)]
pub struct PullRequest {
    pub number: u64,
    #[serde(default)]
    pub html_url: String,
    pub head: Head,
    /// The branch it would merge into.
    #[serde(default)]
    pub base: Option<Base>,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub user: Option<User>,
    /// What GitHub lists its author as to the repository: `OWNER`, `MEMBER`, `COLLABORATOR`,
    /// `CONTRIBUTOR`, `FIRST_TIME_CONTRIBUTOR`, `NONE`, …
    #[serde(default)]
    pub author_association: Option<String>,
    /// `clean` when GitHub would merge it now (checks and required reviews in).
    #[serde(default)]
    pub mergeable_state: Option<String>,
    #[serde(default)]
    pub draft: bool,
    /// When anything on it last changed (a push, a review, a comment, a label).
    #[serde(default)]
    pub updated_at: Option<String>,
}

/// The branch a pull request would merge into.
#[derive(Debug, Clone, Deserialize)]
pub struct Base {
    #[serde(rename = "ref")]
    pub branch: String,
}

/// A pull request's head: the branch and the commit it is at.
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
    #[serde(default)]
    pub html_url: Option<String>,
    /// The commit it ran on.
    #[serde(default)]
    pub head_sha: Option<String>,
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

/// An issue (GitHub lists a pull request among the issues too; [`Issue::is_pull_request`]).
#[derive(Debug, Clone, Deserialize)]
pub struct Issue {
    pub number: u64,
    #[serde(default)]
    pub html_url: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub user: Option<User>,
    #[serde(default)]
    pub author_association: Option<String>,
    #[serde(default)]
    pub labels: Vec<Label>,
    /// Present when the issue is a pull request.
    #[serde(default)]
    pub pull_request: Option<serde_json::Value>,
}

impl Issue {
    /// Whether it is a pull request GitHub listed among the issues.
    pub fn is_pull_request(&self) -> bool {
        self.pull_request.is_some()
    }
}

/// A label on an issue.
#[derive(Debug, Clone, Deserialize)]
pub struct Label {
    pub name: String,
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
    contexts: Page<RequiredContext>,
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

const REQUIRED: &str = "query($owner: String!, $name: String!, $number: Int!, $cursor: String) { repository(owner: $owner, name: $name) { pullRequest(number: $number) { commits(last: 1) { nodes { commit { statusCheckRollup { contexts(first: 100, after: $cursor) { nodes { __typename ... on CheckRun { databaseId isRequired(pullRequestNumber: $number) } } pageInfo { hasNextPage endCursor } } } } } } } } }";

/// One repository on one API.
pub struct Repository {
    client: Client,
    owner: String,
    name: String,
}

/// A name from a path (a branch, a label) as one segment of a URL or a query value.
pub fn escaped(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

impl Repository {
    /// `owner/name` on the API at `api`, acting with `token`.
    pub fn new(owner: &str, name: &str, api: &str, token: Token) -> Result<Self, ApiError> {
        Ok(Self { client: Client::new(api, token)?, owner: owner.to_owned(), name: name.to_owned() })
    }

    /// The client it asks through, for a feature's own calls.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The token it acts with.
    pub fn token(&self) -> &Token {
        self.client.token()
    }

    /// The owner (a user or an organization).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The repository's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `owner/name`.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// `/repos/owner/name`, the path its REST calls start with.
    pub fn path(&self) -> String {
        format!("/repos/{}/{}", self.owner, self.name)
    }

    /// A refusal of `404` under the repository says GitHub shows the token no such repository.
    fn no_repository(e: ApiError) -> ApiError {
        match e {
            ApiError::Refused { status: 404, message } => ApiError::NoRepository { message },
            other => other,
        }
    }

    /// One pull request (the list leaves out whether it is mergeable; this says).
    pub async fn pull(&self, number: u64) -> Result<PullRequest, ApiError> {
        self.client.get(&format!("{}/pulls/{number}", self.path())).await
    }

    /// The open pull requests, newest first, into `base` when given; read down the pages while
    /// `more` says a page may be followed by wanted ones.
    pub async fn open_pulls(
        &self,
        base: Option<&str>,
        more: impl Fn(&[PullRequest]) -> bool,
    ) -> Result<Vec<PullRequest>, ApiError> {
        let base = base.map(|b| format!("&base={}", escaped(b))).unwrap_or_default();
        let path = format!("{}/pulls?state=open&sort=created&direction=desc{base}", self.path());
        self.client.list_while(&path, |page: Vec<PullRequest>| page, more).await.map_err(Self::no_repository)
    }

    /// The open pull request whose head is `branch` of this repository, if there is one.
    pub async fn pull_of_branch(&self, branch: &str) -> Result<Option<PullRequest>, ApiError> {
        let head = escaped(&format!("{}:{branch}", self.owner));
        let listed: Vec<PullRequest> = self
            .client
            .get(&format!("{}/pulls?head={head}&state=open", self.path()))
            .await
            .map_err(Self::no_repository)?;
        match listed.first() {
            Some(pull) => Ok(Some(self.pull(pull.number).await?)),
            None => Ok(None),
        }
    }

    /// The check runs on a commit (or a branch's head, named by the branch), every page of them.
    pub async fn check_runs(&self, commit: &str) -> Result<Vec<CheckRun>, ApiError> {
        let path = format!("{}/commits/{}/check-runs", self.path(), escaped(commit));
        self.client.list(&path, |page: CheckRuns| page.check_runs).await
    }

    /// The ids of the head's check runs that branch protection requires for this pull request.
    pub async fn required_checks(&self, number: u64) -> Result<HashSet<u64>, ApiError> {
        let variables = json!({ "owner": self.owner, "name": self.name, "number": number });
        let contexts = self
            .client
            .connection(REQUIRED, variables, |data: RequiredData| {
                let pull = data.repository.and_then(|r| r.pull_request)?;
                pull.commits.nodes.into_iter().next().and_then(|n| n.commit.status_check_rollup).map(|r| r.contexts)
            })
            .await?;
        Ok(contexts.into_iter().filter(|c| c.is_required).filter_map(|c| c.database_id).collect())
    }

    /// The open issues (pull requests left out), newest first, carrying `label` when given; read
    /// down the pages while `more` says a page may be followed by wanted ones.
    pub async fn open_issues(
        &self,
        label: Option<&str>,
        more: impl Fn(&[Issue]) -> bool,
    ) -> Result<Vec<Issue>, ApiError> {
        let label = label.map(|l| format!("&labels={}", escaped(l))).unwrap_or_default();
        let path = format!("{}/issues?state=open&sort=created&direction=desc{label}", self.path());
        let listed = self.client.list_while(&path, |page: Vec<Issue>| page, more).await.map_err(Self::no_repository)?;
        Ok(listed.into_iter().filter(|i| !i.is_pull_request()).collect())
    }
}
