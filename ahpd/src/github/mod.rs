//! The one place ahpd talks to GitHub from, for every feature that does (Agent Merge, the
//! automations' GitHub triggers): the REST and GraphQL client on `reqwest` ([`Client`]), one
//! repository's calls both features make and their typed models (`repo.rs`), the token ahpd is
//! lent (`token.rs`), the repository a remote names with the API that serves it (`remote.rs`), and
//! how GitHub's words reach a model and whose are acted on by default (`quote.rs`).
//! What the config says of them (`agentMergeToken`, `agentMergeApiUrl`) is read here alone
//! ([`Access`]).
//!
//! A GET is conditional: the ETag of each URL's last answer is sent back (`If-None-Match`), and a
//! `304 Not Modified` (which GitHub does not count against the rate limit) answers the body kept
//! with it. A list is asked a hundred to a page and followed through its `Link` header's `next`
//! (a GraphQL connection through its `pageInfo`), so nothing past GitHub's first page is missed;
//! a caller that needs only the newest items stops early. A refusal carries GitHub's own words
//! (`message`, or a GraphQL error's), so a model or a person reads what GitHub said; a spent rate
//! limit, REST's (`403`/`429`) or GraphQL's (`200` with a `RATE_LIMITED` error), says when it
//! resets. The token goes in the `Authorization` header, to this API alone, and nowhere else.
//!
//! It decides nothing for a feature: what to ask, when, and what to do with the answer is the
//! feature's (it knows no host, no session, no store).

pub mod quote;
pub mod remote;
pub mod repo;
pub mod token;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use agent_runner::sync::lock;
use reqwest::header::{HeaderMap, ACCEPT, AUTHORIZATION, ETAG, IF_NONE_MATCH, LINK, RETRY_AFTER, USER_AGENT};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub use self::remote::Remote;
pub use self::repo::Repository;
pub use self::token::{Token, TokenSource};

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How many items a list is asked for at a time (GitHub's most; its default is 30).
const PER_PAGE: u32 = 100;

/// The most pages of one list followed (10 000 items): a bound, not a limit any caller meets.
const MOST_PAGES: usize = 100;

/// How long a spent rate limit is waited out when GitHub does not say (its advice: a minute).
const UNSAID_RESET: Duration = Duration::from_secs(60);

/// What the daemon's config says of reaching GitHub: where the token is read and which API is
/// asked. One setting for every feature, so a person lends ahpd one token.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// Where the token is read (`agentMergeToken`); `None`: the `gh` CLI's.
    pub token: Option<TokenSource>,
    /// The REST API's base URL (`agentMergeApiUrl`); `None`: the one the repository's host serves.
    pub api_url: Option<String>,
}

impl Access {
    /// What the config names.
    pub fn of(config: &crate::config::Config) -> Self {
        Self {
            token: TokenSource::of_config(&config.get("agentMergeToken")),
            api_url: config.string("agentMergeApiUrl"),
        }
    }

    /// The token for `host`, or the sentence saying what to set (`who` needs it: "Agent Merge").
    pub async fn token(&self, who: &str, host: &str, folder: &std::path::Path) -> Result<Token, String> {
        token::token(who, self.token.as_ref(), host, folder).await
    }
}

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
    /// The rate limit is spent until then.
    #[error("GitHub's rate limit is spent{0}")]
    RateLimited(Reset),
    /// The repository's pull requests answered `404`: GitHub shows the token no such repository.
    #[error("{message}")]
    NoRepository {
        /// GitHub's `message`.
        message: String,
    },
    /// The request did not get an answer, or the answer did not read.
    #[error("GitHub could not be reached: {0}")]
    Transport(String),
}

impl ApiError {
    /// An answer that did not come or did not read.
    pub fn transport(e: impl std::fmt::Display) -> Self {
        Self::Transport(e.to_string())
    }
}

/// When a spent rate limit resets, as GitHub said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reset {
    /// After this long (`Retry-After`, or GitHub said nothing).
    After(Duration),
    /// At this time, in seconds since the epoch (`x-ratelimit-reset`).
    At(u64),
}

impl std::fmt::Display for Reset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::After(wait) => write!(f, " for {} s", wait.as_secs()),
            Self::At(epoch) => {
                let at = jiff::Timestamp::from_second(i64::try_from(*epoch).unwrap_or(i64::MAX))
                    .map(|t| t.to_string())
                    .unwrap_or_else(|_| epoch.to_string());
                write!(f, " until {at}")
            }
        }
    }
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
    /// `RATE_LIMITED`, `NOT_FOUND`, `FORBIDDEN`, …
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

/// A GraphQL connection's nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nodes<T> {
    pub nodes: Vec<T>,
}

/// A page of a GraphQL connection.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    /// This page's nodes.
    pub nodes: Vec<T>,
    #[serde(default)]
    page_info: Option<PageInfo>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PageInfo {
    has_next_page: bool,
    #[serde(default)]
    end_cursor: Option<String>,
}

impl<T> Page<T> {
    /// The cursor of the page after this one, if there is one.
    fn next(&self) -> Option<String> {
        self.page_info.as_ref().filter(|p| p.has_next_page).and_then(|p| p.end_cursor.clone())
    }
}

/// One GitHub API, with the token it acts with.
pub struct Client {
    http: reqwest::Client,
    api: String,
    graphql: String,
    token: Token,
    /// Each GET URL's last answer, for a conditional ask.
    cache: Mutex<HashMap<String, Kept>>,
}

/// A GET's answer kept with its ETag: a `304` answers it again.
#[derive(Clone)]
struct Kept {
    etag: String,
    answer: Answer,
}

/// A successful answer: its body, and the next page's URL its `Link` header names.
#[derive(Clone)]
struct Answer {
    text: String,
    next: Option<String>,
}

impl Client {
    /// The API at `api` (its REST base URL), acting with `token`.
    pub fn new(api: &str, token: Token) -> Result<Self, ApiError> {
        let http = reqwest::Client::builder().timeout(REQUEST_TIMEOUT).build().map_err(ApiError::transport)?;
        let api = api.trim_end_matches('/');
        // github.com's GraphQL is at api.github.com/graphql; an Enterprise host's at /api/graphql.
        let graphql = match api.strip_suffix("/api/v3") {
            Some(host) => format!("{host}/api/graphql"),
            None => format!("{api}/graphql"),
        };
        Ok(Self { http, api: api.to_owned(), graphql, token, cache: Mutex::new(HashMap::new()) })
    }

    /// The token it acts with.
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The REST API's base URL.
    pub fn api(&self) -> &str {
        &self.api
    }

    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let bearer = format!("Bearer {}", self.token.secret());
        if let Ok(mut value) = reqwest::header::HeaderValue::from_str(&bearer) {
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        headers.insert(ACCEPT, reqwest::header::HeaderValue::from_static("application/vnd.github+json"));
        headers.insert(USER_AGENT, reqwest::header::HeaderValue::from_static("ahpd"));
        headers.insert("x-github-api-version", reqwest::header::HeaderValue::from_static("2022-11-28"));
        headers
    }

    /// Sends a request to `path` under the API (`/repos/…`); answers the body of a success, or
    /// GitHub's refusal.
    pub async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> Result<String, ApiError> {
        self.ask(method, &format!("{}{path}", self.api), body).await.map(|answer| answer.text)
    }

    /// Sends a request; answers a success with the next page it names, or GitHub's refusal.
    async fn ask(&self, method: Method, url: &str, body: Option<&Value>) -> Result<Answer, ApiError> {
        let cached = (method == Method::GET).then(|| lock(&self.cache).get(url).cloned()).flatten();
        let mut request = self.http.request(method.clone(), url).headers(self.headers());
        if let Some(kept) = &cached {
            request = request.header(IF_NONE_MATCH, &kept.etag);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(ApiError::transport)?;
        let status = response.status();
        if status == StatusCode::NOT_MODIFIED {
            if let Some(kept) = cached {
                return Ok(kept.answer);
            }
        }
        let headers = response.headers().clone();
        let text = response.text().await.map_err(ApiError::transport)?;
        if let Some(reset) = rate_limited(status, &headers) {
            return Err(ApiError::RateLimited(reset));
        }
        if !status.is_success() {
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| format!("GitHub answered {status}"));
            return Err(ApiError::Refused { status: status.as_u16(), message });
        }
        let answer = Answer { next: self.next_page(&headers), text };
        if method == Method::GET {
            if let Some(etag) = headers.get(ETAG).and_then(|v| v.to_str().ok()) {
                let mut cache = lock(&self.cache);
                cache.insert(url.to_owned(), Kept { etag: etag.to_owned(), answer: answer.clone() });
            }
        } else if url == self.graphql {
            graphql_rate_limited(&answer.text, &headers)?;
        }
        Ok(answer)
    }

    /// The `next` page a `Link` header names, when it is on this API (the token goes nowhere else).
    fn next_page(&self, headers: &HeaderMap) -> Option<String> {
        let next = next_link(headers.get(LINK)?.to_str().ok()?)?;
        let here = next.strip_prefix(&self.api).is_some_and(|rest| rest.starts_with('/'));
        if !here {
            tracing::warn!("GitHub named a next page off its API ({next}); not followed");
        }
        here.then_some(next)
    }

    /// A GET of `path` under the API, read as `T`.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        let text = self.send(Method::GET, path, None).await?;
        serde_json::from_str(&text).map_err(ApiError::transport)
    }

    /// Every item of a REST list: asked a hundred to a page, each page conditionally, following
    /// the `Link` header's `next`; `items` takes one page's items out of its answer.
    pub async fn list<P: DeserializeOwned, T>(
        &self,
        path: &str,
        items: impl Fn(P) -> Vec<T>,
    ) -> Result<Vec<T>, ApiError> {
        self.list_while(path, items, |_| true).await
    }

    /// The items of a REST list page by page, as [`Self::list`], until `more` says a page held
    /// the last item wanted (a list sorted newest first, read down to what was seen before).
    pub async fn list_while<P: DeserializeOwned, T>(
        &self,
        path: &str,
        items: impl Fn(P) -> Vec<T>,
        more: impl Fn(&[T]) -> bool,
    ) -> Result<Vec<T>, ApiError> {
        let joiner = if path.contains('?') { '&' } else { '?' };
        let mut url = Some(format!("{}{path}{joiner}per_page={PER_PAGE}", self.api));
        let mut all = Vec::new();
        for _ in 0..MOST_PAGES {
            let Some(asked) = url.take() else { break };
            let answer = self.ask(Method::GET, &asked, None).await?;
            let page = items(serde_json::from_str(&answer.text).map_err(ApiError::transport)?);
            let go_on = more(&page);
            all.extend(page);
            url = answer.next.filter(|_| go_on);
        }
        Ok(all)
    }

    /// A GraphQL query or mutation, its `data` read as `T`; an error GitHub listed is a refusal.
    pub async fn graphql<T: DeserializeOwned>(&self, query: &str, variables: Value) -> Result<T, ApiError> {
        let body = json!({ "query": query, "variables": variables });
        let text = self.ask(Method::POST, &self.graphql, Some(&body)).await?.text;
        let answer: GraphQl<T> = serde_json::from_str(&text).map_err(ApiError::transport)?;
        if let Some(error) = answer.errors.into_iter().next() {
            return Err(ApiError::Refused { status: 200, message: error.message });
        }
        answer.data.ok_or_else(|| ApiError::Transport("GitHub's GraphQL answer held no data".into()))
    }

    /// Every node of a GraphQL connection, a hundred at a time: `variables` (an object) are sent
    /// with each page's `cursor`, and `page` takes one answer's page out.
    pub async fn connection<D: DeserializeOwned, T>(
        &self,
        query: &str,
        variables: Value,
        page: impl Fn(D) -> Option<Page<T>>,
    ) -> Result<Vec<T>, ApiError> {
        let mut cursor: Option<String> = None;
        let mut all = Vec::new();
        for _ in 0..MOST_PAGES {
            let mut asked = variables.clone();
            asked["cursor"] = json!(cursor);
            let Some(found) = page(self.graphql(query, asked).await?) else { break };
            cursor = found.next();
            all.extend(found.nodes);
            if cursor.is_none() {
                break;
            }
        }
        Ok(all)
    }
}

/// The `rel="next"` URL of a `Link` header: `<https://…?page=2>; rel="next", <…>; rel="last"`.
fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (url, params) = part.trim().split_once(';')?;
        let next = params.split(';').any(|p| matches!(p.trim(), "rel=\"next\"" | "rel=next"));
        next.then(|| url.trim().trim_start_matches('<').trim_end_matches('>').to_owned())
    })
}

/// When a spent rate limit resets, when GitHub says it is spent: `403`/`429` with `Retry-After`,
/// or with `x-ratelimit-remaining: 0` (until `x-ratelimit-reset`).
fn rate_limited(status: StatusCode, headers: &HeaderMap) -> Option<Reset> {
    if status != StatusCode::FORBIDDEN && status != StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    if let Some(seconds) = header_number(headers, RETRY_AFTER.as_str()) {
        return Some(Reset::After(Duration::from_secs(seconds)));
    }
    (header_number(headers, "x-ratelimit-remaining") == Some(0)).then(|| reset_of(headers))
}

/// GraphQL's spent rate limit: `200` with a `RATE_LIMITED` error; it resets when
/// `x-ratelimit-reset` says (a minute when it says nothing).
fn graphql_rate_limited(text: &str, headers: &HeaderMap) -> Result<(), ApiError> {
    let Ok(answer) = serde_json::from_str::<GraphQl<Value>>(text) else { return Ok(()) };
    match answer.errors.iter().any(|e| e.kind.as_deref() == Some("RATE_LIMITED")) {
        true => Err(ApiError::RateLimited(reset_of(headers))),
        false => Ok(()),
    }
}

fn reset_of(headers: &HeaderMap) -> Reset {
    header_number(headers, "x-ratelimit-reset").map(Reset::At).unwrap_or(Reset::After(UNSAID_RESET))
}

fn header_number(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spent_rate_limit_says_when_it_resets() {
        let mut headers = HeaderMap::new();
        assert_eq!(rate_limited(StatusCode::FORBIDDEN, &headers), None, "a refusal of another kind");
        headers.insert(RETRY_AFTER, "7".parse().expect("a value"));
        assert_eq!(rate_limited(StatusCode::TOO_MANY_REQUESTS, &headers), Some(Reset::After(Duration::from_secs(7))));
        assert_eq!(rate_limited(StatusCode::BAD_GATEWAY, &headers), None);
        let mut spent = HeaderMap::new();
        spent.insert("x-ratelimit-remaining", "0".parse().expect("a value"));
        spent.insert("x-ratelimit-reset", "1700000000".parse().expect("a value"));
        assert_eq!(rate_limited(StatusCode::FORBIDDEN, &spent), Some(Reset::At(1_700_000_000)));
        let graphql = r#"{"errors":[{"type":"RATE_LIMITED","message":"API rate limit already exceeded"}]}"#;
        assert_eq!(graphql_rate_limited(graphql, &spent), Err(ApiError::RateLimited(Reset::At(1_700_000_000))));
        let unsaid = graphql_rate_limited(graphql, &HeaderMap::new());
        assert_eq!(unsaid, Err(ApiError::RateLimited(Reset::After(UNSAID_RESET))));
        assert_eq!(graphql_rate_limited(r#"{"errors":[{"type":"NOT_FOUND","message":"x"}]}"#, &spent), Ok(()));
    }

    #[test]
    fn the_next_page_is_read_from_the_link_header() {
        let link = "<https://api.github.com/repos/o/r/commits/s/check-runs?per_page=100&page=2>; rel=\"next\", <https://api.github.com/repos/o/r/commits/s/check-runs?per_page=100&page=3>; rel=\"last\"";
        assert_eq!(
            next_link(link).as_deref(),
            Some("https://api.github.com/repos/o/r/commits/s/check-runs?per_page=100&page=2")
        );
        assert_eq!(next_link("<https://x/?page=1>; rel=\"prev\""), None);
        let api = Client::new("https://api.github.com", Token::for_tests("t")).expect("a client");
        let mut headers = HeaderMap::new();
        headers.insert(LINK, link.parse().expect("a value"));
        assert!(api.next_page(&headers).is_some());
        headers.insert(LINK, "<https://elsewhere.example/steal?page=2>; rel=\"next\"".parse().expect("a value"));
        assert_eq!(api.next_page(&headers), None, "the token goes to the API alone");
    }

    #[test]
    fn an_enterprise_apis_graphql_is_beside_its_rest() {
        let remote = Remote { host: "ghe.example.com".into(), owner: "o".into(), repo: "r".into() };
        let token = Token::for_tests("t");
        let api = Client::new(&remote.api_base(None), token.clone()).expect("a client");
        assert_eq!(api.graphql, "https://ghe.example.com/api/graphql");
        let github = Remote { host: "github.com".into(), ..remote };
        let api = Client::new(&github.api_base(None), token).expect("a client");
        assert_eq!(api.graphql, "https://api.github.com/graphql");
    }
}
