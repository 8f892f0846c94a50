//! A scripted GitHub API on 127.0.0.1 for Agent Merge's tests (REST and the GraphQL it uses).
//!
//! A test scripts one repository's pull requests, check runs, workflow runs, jobs, job logs and
//! review threads ([`Script`]), points the daemon's `agentMergeApiUrl` at [`MockGitHub::api_url`],
//! and reads back every request in the order it came ([`MockGitHub::requests`]), each with what it
//! sent and how it was answered. Every GET is answered with an `ETag`, and one that sends the
//! same tag back gets `304 Not Modified`. A merge or a rerun does what GitHub does to the script (a
//! merged pull request is closed; a rerun starts the run's next attempt).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

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
    /// Open pull requests: `{number, head: {sha, ref}, mergeable_state, html_url}`.
    pub pulls: Vec<Value>,
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
}

struct Shared {
    script: Mutex<Script>,
    requests: Mutex<Vec<Recorded>>,
    arrived: Notify,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
        let shared =
            Arc::new(Shared { script: Mutex::new(script), requests: Mutex::new(Vec::new()), arrived: Notify::new() });
        let serving = shared.clone();
        let app = axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let shared = serving.clone();
            async move { answer(&shared, method, uri, headers, body) }
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
    let (status, text, is_json, retry_after) = {
        let mut script = lock(&shared.script);
        match script.outage.clone() {
            Some((status, message, retry)) => {
                let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
                (status, json!({ "message": message }).to_string(), true, retry)
            }
            None => {
                let (status, text, is_json) = route(&mut script, &method, uri.path(), uri.query().unwrap_or(""), &json);
                (status, text, is_json, None)
            }
        }
    };
    let if_none_match = header("if-none-match");
    let etag = etag_of(&text);
    let not_modified = method == Method::GET && status == StatusCode::OK && if_none_match.as_deref() == Some(&etag);
    let status = if not_modified { StatusCode::NOT_MODIFIED } else { status };
    lock(&shared.requests).push(Recorded {
        method: method.to_string(),
        path,
        if_none_match,
        authorization: header("authorization"),
        body: json,
        status: status.as_u16(),
    });
    shared.arrived.notify_waiters();
    if not_modified {
        return (StatusCode::NOT_MODIFIED, [("etag", etag)]).into_response();
    }
    let content_type = if is_json { "application/json" } else { "text/plain" };
    let mut response = (status, [("etag", etag), ("content-type", content_type.to_owned())], text).into_response();
    if let Some(seconds) = retry_after {
        if let Ok(value) = seconds.to_string().parse() {
            response.headers_mut().insert("retry-after", value);
        }
    }
    response
}

fn not_found() -> (StatusCode, String, bool) {
    (StatusCode::NOT_FOUND, json!({ "message": "Not Found" }).to_string(), true)
}

fn ok(value: Value) -> (StatusCode, String, bool) {
    (StatusCode::OK, value.to_string(), true)
}

/// Answers one request from the script.
fn route(script: &mut Script, method: &Method, path: &str, query: &str, body: &Value) -> (StatusCode, String, bool) {
    if path == "/graphql" {
        return graphql(script, body);
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let param = |name: &str| {
        query.split('&').find_map(|kv| kv.strip_prefix(&format!("{name}="))).map(|v| v.replace("%3A", ":"))
    };
    match (method.as_str(), parts.as_slice()) {
        ("GET", ["repos", owner, _repo, "pulls"]) => {
            let head = param("head").unwrap_or_default();
            let open: Vec<Value> = script
                .pulls
                .iter()
                .filter(|p| format!("{owner}:{}", p["head"]["ref"].as_str().unwrap_or("")) == head)
                .cloned()
                .collect();
            ok(Value::Array(open))
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
                return (status, json!({ "message": message }).to_string(), true);
            }
            script.pulls.retain(|p| p["number"].as_u64() != Some(number));
            ok(json!({ "sha": body["sha"], "merged": true, "message": "Pull Request successfully merged" }))
        }
        ("GET", ["repos", _, _, "commits", sha, "check-runs"]) => {
            let runs = script.check_runs.get(*sha).cloned().unwrap_or_default();
            ok(json!({ "total_count": runs.len(), "check_runs": runs }))
        }
        ("GET", ["repos", _, _, "actions", "runs"]) => {
            let runs = script.runs.get(&param("head_sha").unwrap_or_default()).cloned().unwrap_or_default();
            ok(json!({ "total_count": runs.len(), "workflow_runs": runs }))
        }
        ("GET", ["repos", _, _, "actions", "runs", run]) => {
            match script.runs.values().flatten().find(|r| r["id"].as_u64() == run.parse().ok()) {
                Some(found) => ok(found.clone()),
                None => not_found(),
            }
        }
        ("GET", ["repos", _, _, "actions", "runs", run, "jobs"]) => {
            let jobs = script.jobs.get(&run.parse().unwrap_or(0)).cloned().unwrap_or_default();
            ok(json!({ "total_count": jobs.len(), "jobs": jobs }))
        }
        ("GET", ["repos", _, _, "actions", "jobs", job, "logs"]) => match script.logs.get(&job.parse().unwrap_or(0)) {
            Some(log) => (StatusCode::OK, log.clone(), false),
            None => not_found(),
        },
        ("POST", ["repos", _, _, "actions", "runs", run, what]) if what.starts_with("rerun") => {
            let run: u64 = run.parse().unwrap_or(0);
            let running =
                script.runs.values().flatten().any(|r| r["id"].as_u64() == Some(run) && r["status"] != "completed");
            if running {
                return (
                    StatusCode::FORBIDDEN,
                    json!({ "message": "This workflow is already running" }).to_string(),
                    true,
                );
            }
            script.reruns.push((run, *what == "rerun-failed-jobs"));
            for found in script.runs.values_mut().flatten().filter(|r| r["id"].as_u64() == Some(run)) {
                let attempt = found["run_attempt"].as_u64().unwrap_or(1) + 1;
                found["run_attempt"] = json!(attempt);
                found["status"] = json!("queued");
                found["conclusion"] = Value::Null;
            }
            (StatusCode::CREATED, "{}".to_owned(), true)
        }
        _ => not_found(),
    }
}

fn graphql(script: &mut Script, body: &Value) -> (StatusCode, String, bool) {
    let query = body["query"].as_str().unwrap_or("");
    let vars = &body["variables"];
    if query.contains("addPullRequestReviewThreadReply") {
        let thread = vars["thread"].as_str().unwrap_or("");
        let state = if script.pending_review { "PENDING" } else { "SUBMITTED" };
        let Some(found) = script.threads.iter_mut().find(|t| t["id"] == thread) else {
            return ok(
                json!({ "data": null, "errors": [{ "message": format!("Could not resolve to a node with the global id of '{thread}'") }] }),
            );
        };
        let comment = json!({ "id": format!("C_reply_{thread}"), "body": vars["body"], "state": state, "author": { "login": "agent" } });
        if let Some(nodes) = found["comments"]["nodes"].as_array_mut() {
            nodes.push(comment.clone());
        }
        return ok(json!({ "data": { "addPullRequestReviewThreadReply": { "comment": comment } } }));
    }
    if query.contains("resolveReviewThread") {
        let thread = vars["thread"].as_str().unwrap_or("");
        let Some(found) = script.threads.iter_mut().find(|t| t["id"] == thread) else {
            return ok(
                json!({ "data": null, "errors": [{ "message": format!("Could not resolve to a node with the global id of '{thread}'") }] }),
            );
        };
        found["isResolved"] = json!(true);
        return ok(json!({ "data": { "resolveReviewThread": { "thread": { "id": thread, "isResolved": true } } } }));
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
        let commit = json!({ "commit": { "statusCheckRollup": { "contexts": { "nodes": contexts } } } });
        return ok(json!({ "data": { "repository": { "pullRequest": { "commits": { "nodes": [commit] } } } } }));
    }
    if query.contains("reviewThreads") {
        let number = vars["number"].as_u64().unwrap_or(0);
        let exists = script.pulls.iter().any(|p| p["number"].as_u64() == Some(number));
        let pull = exists.then(|| json!({ "reviewThreads": { "nodes": script.threads } }));
        return ok(json!({ "data": { "repository": { "pullRequest": pull } } }));
    }
    ok(json!({ "data": null, "errors": [{ "message": "unknown query" }] }))
}
