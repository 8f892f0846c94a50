//! A scripted GitHub API on 127.0.0.1 for the tests of what asks GitHub (Agent Merge, the
//! automations' GitHub triggers): REST and the GraphQL they use.
//!
//! A test scripts one repository's pull requests, issues, check runs, workflow runs, jobs, job
//! logs and review threads ([`Script`]), points the daemon's `agentMergeApiUrl` at [`MockGitHub::api_url`],
//! and reads back every request in the order it came ([`MockGitHub::requests`]), each with what it
//! sent and how it was answered. Every GET is answered with an `ETag`, and one that sends the
//! same tag back gets `304 Not Modified`. A merge or a rerun does what GitHub does to the script (a
//! merged pull request is closed; a rerun starts the run's next attempt).
//!
//! It lists as GitHub does: open pull requests (by `head`, or all of them, into `base`) and open
//! issues (pull requests among them, with `labels` and `since`), newest first with
//! `sort=created&direction=desc`. It pages as GitHub does: a REST list (pull requests, issues,
//! check runs, workflow runs, jobs) 30 to a page unless
//! `per_page` asks up to 100, `page` choosing one, with a `Link` header naming the `next`, `last`,
//! `first` and `prev` pages; a GraphQL connection by `first` and `after`, with its `pageInfo`. A
//! token it was not told to accept is refused as GitHub refuses a revoked one (`401 Bad
//! credentials`), a repository it lists as missing answers `404`, and a spent GraphQL rate limit
//! answers `200` with a `RATE_LIMITED` error and the `x-ratelimit-*` headers.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use agent_runner::sync::lock;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// One request the mock received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path and query.
    pub path: String,
    /// The `If-None-Match` it sent.
    pub if_none_match: Option<String>,
    /// The `Authorization` header it sent.
    pub authorization: Option<String>,
    /// Its JSON body (`null` when none).
    pub body: Value,
    /// The status it was answered with.
    pub status: u16,
}

impl Recorded {
    /// A GraphQL request's operation, by the field it asks (`reviewThreads`,
    /// `addPullRequestReviewThreadReply`, `resolveReviewThread`, `statusCheckRollup`).
    pub fn graphql_operation(&self) -> Option<&'static str> {
        let query = self.body.get("query")?.as_str()?;
        ["addPullRequestReviewThreadReply", "resolveReviewThread", "reviewThreads"]
            .into_iter()
            .find(|op| query.contains(op))
    }
}

/// What the repository holds; the test changes it as the story goes.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// Open pull requests: `{number, head: {sha, ref}, base: {ref}, mergeable_state, html_url,
    /// title, body, user: {login}, author_association}`.
    pub pulls: Vec<Value>,
    /// Open issues: `{number, title, body, html_url, user: {login}, author_association, labels:
    /// [{name}], updated_at}`; the issues list shows the pull requests among them, as GitHub does.
    pub issues: Vec<Value>,
    /// Check runs by commit.
    pub check_runs: HashMap<String, Vec<Value>>,
    /// Workflow runs by commit.
    pub runs: HashMap<String, Vec<Value>>,
    /// Jobs by workflow run.
    pub jobs: HashMap<u64, Vec<Value>>,
    /// Logs by job.
    pub logs: HashMap<u64, String>,
    /// Review threads (GraphQL shape: `{id, isResolved, path, line, comments: {nodes}}`).
    pub threads: Vec<Value>,
    /// The person behind the token has a pending review: a reply lands in it (state `PENDING`).
    pub pending_review: bool,
    /// What a merge is answered with, when not a success: (status, GitHub's message).
    pub merge_refusal: Option<(u16, String)>,
    /// The merges asked for: (pull request, body).
    pub merges: Vec<(u64, Value)>,
    /// The reruns asked for: (run, failed jobs only).
    pub reruns: Vec<(u64, bool)>,
    /// While set, every request is answered with this (status, message, `Retry-After` seconds).
    pub outage: Option<(u16, String, Option<u64>)>,
    /// When set, only these tokens are taken; any other is refused `401 Bad credentials`.
    pub accepted_tokens: Option<Vec<String>>,
    /// Repositories (`owner/repo`) GitHub shows nobody: everything under them answers `404`.
    pub missing_repos: Vec<String>,
    /// While set, GraphQL's rate limit is spent until this time (seconds since the epoch).
    pub graphql_spent_until: Option<u64>,
    /// When GraphQL's rate limit resets (seconds since the epoch), as `rateLimit.resetAt` says.
    pub graphql_reset: Option<u64>,
}

struct Shared {
    script: Mutex<Script>,
    requests: Mutex<Vec<Recorded>>,
    arrived: Notify,
    /// Whether job logs are answered (a test may hold them back, to overlap the reads of one).
    logs_open: tokio::sync::watch::Sender<bool>,
    /// How many requests for a job log wait, held back.
    logs_waiting: std::sync::atomic::AtomicUsize,
    /// The base URL its `Link` headers name.
    base: Mutex<String>,
}

/// The running mock; stops serving when dropped.
pub struct MockGitHub {
    port: u16,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl Drop for MockGitHub {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl MockGitHub {
    /// Listens on 127.0.0.1 on a free port and serves `script` until dropped.
    pub async fn start(script: Script) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            script: Mutex::new(script),
            requests: Mutex::new(Vec::new()),
            arrived: Notify::new(),
            logs_open: tokio::sync::watch::Sender::new(true),
            logs_waiting: std::sync::atomic::AtomicUsize::new(0),
            base: Mutex::new(format!("http://127.0.0.1:{port}")),
        });
        let serving = shared.clone();
        let app = axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let shared = serving.clone();
            async move {
                if uri.path().ends_with("/logs") {
                    use std::sync::atomic::Ordering::SeqCst;
                    shared.logs_waiting.fetch_add(1, SeqCst);
                    shared.arrived.notify_waiters();
                    let mut open = shared.logs_open.subscribe();
                    let _ = open.wait_for(|open| *open).await;
                    shared.logs_waiting.fetch_sub(1, SeqCst);
                }
                answer(&shared, method, uri, headers, body)
            }
        });
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { port, shared, server })
    }

    /// The REST base URL (`agentMergeApiUrl`); GraphQL is at `<it>/graphql`.
    pub fn api_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Changes the script.
    pub fn script(&self, change: impl FnOnce(&mut Script)) {
        change(&mut lock(&self.shared.script));
    }

    /// Reads the script.
    pub fn read<T>(&self, read: impl FnOnce(&Script) -> T) -> T {
        read(&lock(&self.shared.script))
    }

    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).clone()
    }

    /// How many requests came whose path starts with `prefix` (`/repos/owner/repo`, `/graphql`).
    pub fn count(&self, prefix: &str) -> usize {
        lock(&self.shared.requests).iter().filter(|r| r.path.starts_with(prefix)).count()
    }

    /// Waits until the requests so far satisfy `done`.
    pub async fn until(&self, done: impl Fn(&[Recorded]) -> bool) -> Vec<Recorded> {
        loop {
            let arrived = self.shared.arrived.notified();
            {
                let requests = lock(&self.shared.requests);
                if done(&requests) {
                    return requests.clone();
                }
            }
            arrived.await;
        }
    }

    /// Waits for `n` more requests whose path starts with `prefix`.
    pub async fn until_more(&self, prefix: &str, n: usize) {
        let want = self.count(prefix) + n;
        self.until(|all| all.iter().filter(|r| r.path.starts_with(prefix)).count() >= want).await;
    }

    /// Holds every job log's answer back until [`Self::answer_logs`] (a request for one is
    /// recorded once it is answered).
    pub fn hold_logs(&self) {
        self.shared.logs_open.send_replace(false);
    }

    /// Answers the job logs held back, and every one asked for after.
    pub fn answer_logs(&self) {
        self.shared.logs_open.send_replace(true);
    }

    /// How many requests for a job log are held back now.
    pub fn logs_waiting(&self) -> usize {
        self.shared.logs_waiting.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until at least `n` requests for a job log are held back.
    pub async fn until_logs_waiting(&self, n: usize) {
        loop {
            let arrived = self.shared.arrived.notified();
            if self.logs_waiting() >= n {
                return;
            }
            arrived.await;
        }
    }
}

/// What one request is answered with.
struct Reply {
    status: StatusCode,
    text: String,
    is_json: bool,
    headers: Vec<(&'static str, String)>,
}

impl Reply {
    fn json(status: StatusCode, value: Value) -> Self {
        Self { status, text: value.to_string(), is_json: true, headers: Vec::new() }
    }
}

fn etag_of(body: &str) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut hasher);
    format!("\"{:016x}\"", hasher.finish())
}

fn answer(shared: &Shared, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let path = uri.path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default();
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let authorization = header("authorization");
    let base = lock(&shared.base).clone();
    let reply = {
        let mut script = lock(&shared.script);
        let token = authorization.as_deref().and_then(|a| a.strip_prefix("Bearer ")).unwrap_or("");
        let repo: Vec<&str> = uri.path().trim_start_matches('/').split('/').collect();
        let missing = matches!(repo.as_slice(), ["repos", owner, name, ..] if script.missing_repos.contains(&format!("{owner}/{name}")));
        if let Some((status, message, retry)) = script.outage.clone() {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut reply = Reply::json(status, json!({ "message": message }));
            reply.headers.extend(retry.map(|seconds| ("retry-after", seconds.to_string())));
            reply
        } else if script.accepted_tokens.as_ref().is_some_and(|accepted| !accepted.iter().any(|t| t == token)) {
            Reply::json(
                StatusCode::UNAUTHORIZED,
                json!({ "message": "Bad credentials", "documentation_url": "https://docs.github.com/rest" }),
            )
        } else if missing {
            Reply::json(
                StatusCode::NOT_FOUND,
                json!({ "message": "Not Found", "documentation_url": "https://docs.github.com/rest" }),
            )
        } else {
            let query = uri.query().unwrap_or("");
            route(&mut script, &method, uri.path(), query, &json, &base)
        }
    };
    let if_none_match = header("if-none-match");
    let etag = etag_of(&reply.text);
    let not_modified =
        method == Method::GET && reply.status == StatusCode::OK && if_none_match.as_deref() == Some(&etag);
    let status = if not_modified { StatusCode::NOT_MODIFIED } else { reply.status };
    lock(&shared.requests).push(Recorded {
        method: method.to_string(),
        path,
        if_none_match,
        authorization,
        body: json,
        status: status.as_u16(),
    });
    shared.arrived.notify_waiters();
    let mut response = if not_modified {
        (StatusCode::NOT_MODIFIED, [("etag", etag)]).into_response()
    } else {
        let content_type = if reply.is_json { "application/json" } else { "text/plain" };
        (status, [("etag", etag), ("content-type", content_type.to_owned())], reply.text).into_response()
    };
    for (name, value) in reply.headers {
        if let Ok(value) = value.parse() {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

fn not_found() -> Reply {
    Reply::json(StatusCode::NOT_FOUND, json!({ "message": "Not Found" }))
}

fn ok(value: Value) -> Reply {
    Reply::json(StatusCode::OK, value)
}

/// One page of a REST list, as GitHub serves it: `per_page` (30 unless asked, at most 100) items
/// from `page` (1 unless asked), under `field` beside `total_count` (or a bare array, as the pull
/// requests and issues are listed, when `field` is empty), with a `Link` header naming the pages
/// around it.
fn page_of(items: &[Value], field: &str, base: &str, path: &str, query: &str) -> Reply {
    let param = |name: &str| query.split('&').find_map(|kv| kv.strip_prefix(&format!("{name}=")));
    let per_page = param("per_page").and_then(|n| n.parse::<usize>().ok()).unwrap_or(30).clamp(1, 100);
    let page = param("page").and_then(|n| n.parse::<usize>().ok()).unwrap_or(1).max(1);
    let last = items.len().div_ceil(per_page).max(1);
    let shown: Vec<Value> = items.iter().skip((page - 1) * per_page).take(per_page).cloned().collect();
    let mut reply = match field {
        "" => ok(Value::Array(shown)),
        field => ok(json!({ "total_count": items.len(), field: shown })),
    };
    let others: Vec<&str> = query.split('&').filter(|kv| !kv.is_empty() && !kv.starts_with("page=")).collect();
    let url = |n: usize| {
        let mut query = others.clone();
        let page = format!("page={n}");
        query.push(&page);
        format!("<{base}{path}?{}>", query.join("&"))
    };
    let mut links = Vec::new();
    if page < last {
        links.push(format!("{}; rel=\"next\"", url(page + 1)));
        links.push(format!("{}; rel=\"last\"", url(last)));
    }
    if page > 1 {
        links.push(format!("{}; rel=\"first\"", url(1)));
        links.push(format!("{}; rel=\"prev\"", url(page - 1)));
    }
    if !links.is_empty() {
        reply.headers.push(("link", links.join(", ")));
    }
    reply
}

/// Answers one request from the script.
fn route(script: &mut Script, method: &Method, path: &str, query: &str, body: &Value, base_url: &str) -> Reply {
    if path == "/graphql" {
        return graphql(script, body);
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let param = |name: &str| {
        url::form_urlencoded::parse(query.as_bytes()).find(|(key, _)| key == name).map(|(_, value)| value.into_owned())
    };
    match (method.as_str(), parts.as_slice()) {
        ("GET", ["repos", owner, _repo, "pulls"]) => {
            let head = param("head");
            let base = param("base");
            let mut open: Vec<Value> = script
                .pulls
                .iter()
                .filter(|p| {
                    head.as_ref().is_none_or(|h| &format!("{owner}:{}", p["head"]["ref"].as_str().unwrap_or("")) == h)
                })
                .filter(|p| base.as_ref().is_none_or(|b| p["base"]["ref"].as_str() == Some(b.as_str())))
                .cloned()
                .collect();
            newest_first(&mut open, query);
            page_of(&open, "", base_url, path, query)
        }
        ("GET", ["repos", _, _, "issues"]) => {
            let pulls = script.pulls.iter().map(|p| {
                let mut issue = p.clone();
                issue["pull_request"] = json!({ "html_url": p["html_url"] });
                issue["labels"] = p.get("labels").cloned().unwrap_or(json!([]));
                issue
            });
            let wanted: Vec<String> =
                param("labels").map(|l| l.split(',').map(str::to_owned).collect()).unwrap_or_default();
            let since = param("since");
            let mut open: Vec<Value> = script
                .issues
                .iter()
                .cloned()
                .chain(pulls)
                .filter(|i| {
                    let labels: Vec<&str> =
                        i["labels"].as_array().into_iter().flatten().filter_map(|l| l["name"].as_str()).collect();
                    wanted.iter().all(|w| labels.contains(&w.as_str()))
                })
                .filter(|i| since.as_ref().is_none_or(|s| i["updated_at"].as_str().is_some_and(|u| u >= s.as_str())))
                .collect();
            newest_first(&mut open, query);
            page_of(&open, "", base_url, path, query)
        }
        ("GET", ["repos", _, _, "pulls", number]) => {
            match script.pulls.iter().find(|p| p["number"].as_u64() == number.parse().ok()) {
                Some(pull) => ok(pull.clone()),
                None => not_found(),
            }
        }
        ("PUT", ["repos", _, _, "pulls", number, "merge"]) => {
            let number: u64 = number.parse().unwrap_or(0);
            script.merges.push((number, body.clone()));
            if let Some((status, message)) = &script.merge_refusal {
                let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::METHOD_NOT_ALLOWED);
                return Reply::json(status, json!({ "message": message }));
            }
            script.pulls.retain(|p| p["number"].as_u64() != Some(number));
            ok(json!({ "sha": body["sha"], "merged": true, "message": "Pull Request successfully merged" }))
        }
        ("GET", ["repos", _, _, "commits", sha, "check-runs"]) => {
            let runs = script.check_runs.get(*sha).cloned().unwrap_or_default();
            page_of(&runs, "check_runs", base_url, path, query)
        }
        ("GET", ["repos", _, _, "actions", "runs"]) => {
            let runs = script.runs.get(&param("head_sha").unwrap_or_default()).cloned().unwrap_or_default();
            page_of(&runs, "workflow_runs", base_url, path, query)
        }
        ("GET", ["repos", _, _, "actions", "runs", run]) => {
            match script.runs.values().flatten().find(|r| r["id"].as_u64() == run.parse().ok()) {
                Some(found) => ok(found.clone()),
                None => not_found(),
            }
        }
        ("GET", ["repos", _, _, "actions", "runs", run, "jobs"]) => {
            let jobs = script.jobs.get(&run.parse().unwrap_or(0)).cloned().unwrap_or_default();
            page_of(&jobs, "jobs", base_url, path, query)
        }
        ("GET", ["repos", _, _, "actions", "jobs", job, "logs"]) => match script.logs.get(&job.parse().unwrap_or(0)) {
            Some(log) => Reply { status: StatusCode::OK, text: log.clone(), is_json: false, headers: Vec::new() },
            None => not_found(),
        },
        ("POST", ["repos", _, _, "actions", "runs", run, what]) if what.starts_with("rerun") => {
            let run: u64 = run.parse().unwrap_or(0);
            let running =
                script.runs.values().flatten().any(|r| r["id"].as_u64() == Some(run) && r["status"] != "completed");
            if running {
                return Reply::json(StatusCode::FORBIDDEN, json!({ "message": "This workflow is already running" }));
            }
            script.reruns.push((run, *what == "rerun-failed-jobs"));
            for found in script.runs.values_mut().flatten().filter(|r| r["id"].as_u64() == Some(run)) {
                let attempt = found["run_attempt"].as_u64().unwrap_or(1) + 1;
                found["run_attempt"] = json!(attempt);
                found["status"] = json!("queued");
                found["conclusion"] = Value::Null;
            }
            Reply::json(StatusCode::CREATED, json!({}))
        }
        _ => not_found(),
    }
}

/// Sorts a list newest first (by number, as creation orders them) when the query asks
/// `direction=desc` (GitHub's default for `sort=created`, and for no sort at all).
fn newest_first(items: &mut [Value], query: &str) {
    if !query.split('&').any(|kv| kv == "direction=asc") {
        items.sort_by_key(|i| std::cmp::Reverse(i["number"].as_u64().unwrap_or(0)));
    }
}

/// One page of a GraphQL connection: `first` nodes after the cursor `after` (a node's place).
fn connection(nodes: &[Value], first: u64, after: &Value) -> Value {
    let from =
        after.as_str().and_then(|c| c.strip_prefix("cursor:")).and_then(|n| n.parse::<usize>().ok()).unwrap_or(0);
    let first = usize::try_from(first.clamp(1, 100)).unwrap_or(100);
    let shown: Vec<Value> = nodes.iter().skip(from).take(first).cloned().collect();
    let end = from + shown.len();
    json!({ "nodes": shown, "pageInfo": { "hasNextPage": end < nodes.len(), "endCursor": format!("cursor:{end}") } })
}

/// The `first: N` a query asks of the connection named `field`.
fn first_of(query: &str, field: &str) -> u64 {
    query
        .split_once(&format!("{field}(first: "))
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(100)
}

fn epoch_iso(seconds: u64) -> String {
    jiff::Timestamp::from_second(i64::try_from(seconds).unwrap_or(0)).map(|t| t.to_string()).unwrap_or_default()
}

fn graphql(script: &mut Script, body: &Value) -> Reply {
    let query = body["query"].as_str().unwrap_or("");
    let vars = &body["variables"];
    if let Some(until) = script.graphql_spent_until {
        let mut reply = ok(json!({ "errors": [{ "type": "RATE_LIMITED", "code": "graphql_rate_limit",
            "message": "API rate limit already exceeded for user ID 1." }] }));
        reply.headers.push(("x-ratelimit-limit", "5000".to_owned()));
        reply.headers.push(("x-ratelimit-remaining", "0".to_owned()));
        reply.headers.push(("x-ratelimit-reset", until.to_string()));
        reply.headers.push(("x-ratelimit-resource", "graphql".to_owned()));
        return reply;
    }
    let mut reply = graphql_data(script, query, vars);
    if query.contains("rateLimit") {
        if let (Some(reset), Some(data)) = (script.graphql_reset, reply.get_mut("data").and_then(Value::as_object_mut))
        {
            data.insert("rateLimit".into(), json!({ "remaining": 4999, "resetAt": epoch_iso(reset) }));
        }
    }
    ok(reply)
}

fn graphql_data(script: &mut Script, query: &str, vars: &Value) -> Value {
    if query.contains("addPullRequestReviewThreadReply") {
        let thread = vars["thread"].as_str().unwrap_or("");
        let state = if script.pending_review { "PENDING" } else { "SUBMITTED" };
        let Some(found) = script.threads.iter_mut().find(|t| t["id"] == thread) else {
            return json!({ "data": null, "errors": [{ "type": "NOT_FOUND", "message": format!("Could not resolve to a node with the global id of '{thread}'") }] });
        };
        let comment = json!({ "id": format!("C_reply_{thread}"), "body": vars["body"], "state": state,
                              "author": { "login": "agent" }, "authorAssociation": "OWNER" });
        if let Some(nodes) = found["comments"]["nodes"].as_array_mut() {
            nodes.push(comment.clone());
        }
        return json!({ "data": { "addPullRequestReviewThreadReply": { "comment": comment } } });
    }
    if query.contains("resolveReviewThread") {
        let thread = vars["thread"].as_str().unwrap_or("");
        let Some(found) = script.threads.iter_mut().find(|t| t["id"] == thread) else {
            return json!({ "data": null, "errors": [{ "type": "NOT_FOUND", "message": format!("Could not resolve to a node with the global id of '{thread}'") }] });
        };
        found["isResolved"] = json!(true);
        return json!({ "data": { "resolveReviewThread": { "thread": { "id": thread, "isResolved": true } } } });
    }
    if query.contains("statusCheckRollup") {
        // A check run is required unless the script says `"required": false`.
        let number = vars["number"].as_u64().unwrap_or(0);
        let head = script.pulls.iter().find(|p| p["number"].as_u64() == Some(number)).map(|p| p["head"]["sha"].clone());
        let runs = head.and_then(|sha| script.check_runs.get(sha.as_str().unwrap_or("")).cloned()).unwrap_or_default();
        let contexts: Vec<Value> = runs
            .iter()
            .map(|r| json!({ "__typename": "CheckRun", "databaseId": r["id"], "isRequired": r["required"] != false }))
            .collect();
        let page = connection(&contexts, first_of(query, "contexts"), &vars["cursor"]);
        let commit = json!({ "commit": { "statusCheckRollup": { "contexts": page } } });
        return json!({ "data": { "repository": { "pullRequest": { "commits": { "nodes": [commit] } } } } });
    }
    if query.contains("reviewThreads") {
        let number = vars["number"].as_u64().unwrap_or(0);
        let exists = script.pulls.iter().any(|p| p["number"].as_u64() == Some(number));
        let page = connection(&script.threads, first_of(query, "reviewThreads"), &vars["cursor"]);
        let pull = exists.then(|| json!({ "reviewThreads": page }));
        return json!({ "data": { "repository": { "pullRequest": pull } } });
    }
    json!({ "data": null, "errors": [{ "message": "unknown query" }] })
}
