//! The listener: one port serving the AHP WebSocket upgrade at `/`, the web window (`crate::web`) at
//! `/` for a browser and under `/ui/`, each session's tools endpoint under `/ahp-mcp`, and the
//! sessionless tools at `/mcp`,
//! with the door checks a developer's machine needs — the connection token, and refusing web pages
//! and rebound host names — and the `--stdio` transport for a host nested inside another (served in process, or bridged to
//! the daemon already running on the data folder).

pub mod bridge;
pub mod stdio;
pub mod ws;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::host::Host;
use crate::tools::Caller;

/// The door's settings.
#[derive(Debug, Clone)]
pub struct DoorPolicy {
    /// The connection token, when one is required.
    pub token: Option<String>,
    /// The address the listener is bound to.
    pub bound: IpAddr,
    /// Host names (beyond loopback and the bound address) a request may name.
    pub allowed_hosts: Vec<String>,
    /// Origins (exact, e.g. `https://example.com`) a browser page may connect from.
    pub allowed_origins: Vec<String>,
    /// Frames over this many bytes close the connection (the WebSocket's own limit); frames over
    /// `maxFrameBytes` but under this are answered with an error and not read.
    pub hard_frame_bytes: usize,
    /// How many WebSocket connections may be open at once (`maxConnections`).
    pub max_connections: usize,
}

#[derive(Clone)]
struct AppState {
    host: Host,
    door: Arc<DoorPolicy>,
    /// One permit per open connection, held until it closes.
    connections: Arc<tokio::sync::Semaphore>,
}

/// The router for the daemon's one listener. `cancel` stops the tools endpoints' MCP server.
pub fn router(host: Host, door: DoorPolicy, cancel: CancellationToken) -> Router {
    use crate::mcp;
    let tools_server = mcp::service(host.clone(), cancel);
    let door = Arc::new(door);
    // The rebinding and web-page checks run first (the outer layer), before any token is read.
    let tools = Router::new()
        .route(
            "/ahp-mcp/{id}",
            mcp_post(tools_server.clone())
                .get(mcp::session_stream)
                .route_layer(axum::middleware::from_fn_with_state(host.clone(), mcp::session_door))
                .route_layer(axum::middleware::from_fn_with_state(door.clone(), tools_door))
                .fallback(mcp::other_method),
        )
        .with_state(host.clone());
    let connections = Arc::new(tokio::sync::Semaphore::new(door.max_connections));
    let state = AppState { host, door, connections };
    Router::new()
        .route("/", get(upgrade))
        .route("/ui/door", get(door_check))
        .route("/ui/{*file}", get(crate::web::asset))
        .route("/favicon.ico", get(crate::web::favicon))
        // An automation's webhook: its own secret, not the connection token.
        .route("/hooks/{id}", axum::routing::post(hook))
        .route(
            "/mcp",
            mcp_post(tools_server)
                .get(sessionless_stream)
                .route_layer(axum::middleware::from_fn_with_state(state.clone(), sessionless_door))
                .fallback(mcp::other_method),
        )
        .fallback(not_found)
        .with_state(state)
        .merge(tools)
        .layer(axum::middleware::map_response(|response: Response| async move { crate::web::secure(response) }))
}

/// A tools endpoint's POST: rmcp's server, behind the check that a body is one message. The GET
/// (the event stream) is added beside it, and the door in front of both puts who is calling in the
/// request's extensions.
fn mcp_post<S: Clone + Send + Sync + 'static>(server: crate::mcp::Server) -> axum::routing::MethodRouter<S> {
    axum::routing::post_service(server).layer(axum::middleware::from_fn(crate::mcp::one_message))
}

/// `POST /hooks/<id>`: starts a run of the automation's webhook trigger (`docs/automations.md`):
/// 202 with the run, 401 without the trigger's secret.
async fn hook(
    State(app): State<AppState>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let delivery = header("idempotency-key").or_else(|| header("x-github-delivery"));
    match crate::automations::events::webhook(&app.host, &id, header("authorization"), delivery) {
        Ok(run) => (StatusCode::ACCEPTED, axum::Json(serde_json::json!({ "run": run }))).into_response(),
        Err(refused) => {
            let status = StatusCode::from_u16(refused.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, format!("{}\n", refused.why)).into_response()
        }
    }
}

/// `GET /ui/door`: whether the token the page holds (as a Bearer) lets it in: 204, or 401 with the
/// reason. A browser cannot read why a WebSocket upgrade failed; the page asks here to tell a
/// refusal from a daemon that is down or restarting.
async fn door_check(
    State(app): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Response {
    if let Err((status, why)) = check_web(&app.door, &headers) {
        return (status, format!("{why}\n")).into_response();
    }
    match admit(&app, &headers, &query) {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(why) => (StatusCode::UNAUTHORIZED, why).into_response(),
    }
}

/// The door of `/mcp`: a caller [`sessionless_caller`] lets in goes on carrying
/// [`crate::mcp::Door::Sessionless`]; anyone else is refused in the endpoint's shape.
async fn sessionless_door(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match sessionless_caller(&app, request.headers(), peer) {
        Ok(caller) => {
            request.extensions_mut().insert(crate::mcp::Door::Sessionless(caller));
            next.run(request).await
        }
        Err((status, why)) => crate::mcp::door_refusal(status, why),
    }
}

/// In front of `/ahp-mcp/<id>`'s own door: a rebound host name or a web page is refused there as
/// at `/` and `/mcp`, whatever token it carries.
async fn tools_door(
    State(door): State<Arc<DoorPolicy>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match check_web(&door, request.headers()) {
        Ok(()) => next.run(request).await,
        Err((status, why)) => crate::mcp::door_refusal(status, why),
    }
}

/// The checks every door makes of a request that may come from a browser, before its token: a
/// `Host` that is not this daemon's (DNS rebinding) and an `Origin` not allowed (a web page).
fn check_web(door: &DoorPolicy, headers: &HeaderMap) -> Result<(), (StatusCode, String)> {
    check_host(door, headers)
        .and_then(|()| check_origin(door, headers))
        .map_err(|why| (StatusCode::FORBIDDEN, why.trim_end().to_owned()))
}

/// `GET /mcp`, past its door: the event stream that says when the sessionless tools change.
async fn sessionless_stream(State(app): State<AppState>) -> Response {
    crate::mcp::sessionless_stream(&app.host)
}

/// Who may use `/mcp`: a caller presenting the daemon's connection token as a Bearer (root) or,
/// under a users directory, a person's own token (that person); on a daemon with no token and no
/// directory, a caller on this machine. A web page or a rebound host name is refused as at the
/// WebSocket door.
fn sessionless_caller(app: &AppState, headers: &HeaderMap, peer: SocketAddr) -> Result<Caller, (StatusCode, String)> {
    use crate::users::Principal;
    let door = &app.door;
    check_web(door, headers)?;
    let refused = |why: &str| Err((StatusCode::UNAUTHORIZED, why.to_owned()));
    let offered = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    match app.host.person_of_token(offered) {
        Some(Ok(Principal::Root)) => return Ok(Caller::Root),
        Some(Ok(Principal::Person(id))) => return Ok(Caller::Person(id)),
        Some(Ok(Principal::Nobody)) => {
            return refused("Refused: /mcp needs a token: this daemon's connection token, or your own as a person.")
        }
        Some(Err(())) => return refused("Refused: wrong connection token."),
        None => {}
    }
    match (&door.token, offered) {
        (Some(expected), Some(token)) if constant_time_eq(token.as_bytes(), expected.as_bytes()) => Ok(Caller::Root),
        (Some(_), Some(_)) => refused("Refused: wrong connection token."),
        (Some(_), None) => refused("Refused: /mcp needs this daemon's connection token as Authorization: Bearer."),
        (None, _) if peer.ip().is_loopback() => Ok(Caller::Root),
        (None, _) => {
            refused("Refused: this daemon has no connection token, so /mcp answers only callers on this machine.")
        }
    }
}

async fn not_found(uri: axum::http::Uri) -> Response {
    if uri.path().starts_with(crate::mcp::PREFIX) {
        return crate::mcp::unknown_path(uri).await;
    }
    (StatusCode::NOT_FOUND, "Nothing here: ahpd serves AHP over a WebSocket at /\n").into_response()
}

async fn upgrade(
    State(app): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<std::collections::HashMap<String, String>>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    if let Err((status, why)) = check_web(&app.door, &headers) {
        return (status, format!("{why}\n")).into_response();
    }
    if ws.is_err() && crate::web::wants_page(&headers) {
        // The page holds no secret; only a token that is offered and wrong gets the refusal.
        if offered_token(&headers, &query).is_some() {
            if let Err(why) = admit(&app, &headers, &query) {
                return crate::web::refusal(&why);
            }
        }
        return crate::web::page();
    }
    let principal = match admit(&app, &headers, &query) {
        Ok(principal) => principal,
        Err(why) => return (StatusCode::UNAUTHORIZED, why).into_response(),
    };
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => {
            return (StatusCode::UPGRADE_REQUIRED, format!("ahpd speaks AHP over a WebSocket here: {rejection}\n"))
                .into_response()
        }
    };
    // The connections already open are not touched: the one past the limit is refused.
    let Ok(permit) = app.connections.clone().try_acquire_owned() else {
        let why = format!(
            "Refused: this daemon serves at most {} connections at once (maxConnections); close one, or raise the limit.\n",
            app.door.max_connections
        );
        return (StatusCode::SERVICE_UNAVAILABLE, why).into_response();
    };
    let (host, door) = (app.host.clone(), app.door.clone());
    ws.max_message_size(door.hard_frame_bytes).max_frame_size(door.hard_frame_bytes).on_upgrade(
        move |socket| async move {
            ws::serve(host, socket, principal).await;
            drop(permit);
        },
    )
}

/// Who a connection is: with no users directory, whoever passes the token check is root; with
/// one, the deployment's token is root and a person's own token is that person.
fn admit(
    app: &AppState,
    headers: &HeaderMap,
    query: &std::collections::HashMap<String, String>,
) -> Result<crate::users::Principal, String> {
    use crate::users::Principal;
    let offered = offered_token(headers, query);
    let person = app.host.person_of_token(offered.as_deref());
    match person {
        None => check_token(&app.door, headers, query).map(|()| Principal::Root),
        Some(Ok(principal)) => Ok(principal),
        Some(Err(())) => Err("Refused: wrong connection token.\n".to_owned()),
    }
}

fn offered_token(headers: &HeaderMap, query: &std::collections::HashMap<String, String>) -> Option<String> {
    let bearer = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|s| s.trim().to_owned());
    query.get("tkn").or_else(|| query.get("token")).cloned().or(bearer)
}

/// Refuses a `Host` that is neither loopback, the bound address, nor explicitly allowed: a page
/// on a rebound DNS name must not reach the daemon.
pub fn check_host(door: &DoorPolicy, headers: &HeaderMap) -> Result<(), String> {
    let Some(value) = headers.get(axum::http::header::HOST).and_then(|v| v.to_str().ok()) else {
        return Ok(());
    };
    let name = host_name(value);
    let loopback = matches!(name.as_str(), "localhost" | "127.0.0.1" | "::1") || name.ends_with(".localhost");
    let literal: Option<IpAddr> = name.parse().ok();
    let bound = literal.is_some_and(|ip| ip == door.bound || (door.bound.is_unspecified() && literal.is_some()));
    let allowed = door.allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(&name));
    if loopback || bound || allowed || literal.is_some_and(|ip| ip.is_loopback()) {
        Ok(())
    } else {
        Err(format!("Refused: the Host {value} is not this daemon's address. Add it to allowedHosts if it is yours.\n"))
    }
}

/// `example.com:80` → `example.com`; `[::1]:80` → `::1`.
fn host_name(value: &str) -> String {
    let value = value.trim();
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("").to_ascii_lowercase();
    }
    value
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(value, |(h, _)| h)
        .to_ascii_lowercase()
}

/// Refuses a browser page that was not explicitly allowed: a page a developer visits must never
/// be able to drive their agents. The daemon's own page (the origin the request's checked `Host`
/// names) is its own and always allowed.
pub fn check_origin(door: &DoorPolicy, headers: &HeaderMap) -> Result<(), String> {
    let Some(origin) = headers.get(axum::http::header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("");
    if door.allowed_origins.iter().any(|o| o == origin) || same_origin(door, headers, origin) {
        Ok(())
    } else {
        Err(format!("Refused: a web page at {origin} may not connect. Add it to allowedOrigins if you trust it.\n"))
    }
}

/// True when `origin` is this daemon's own (`http://` and the `Host` the request named), and that
/// `Host` passes [`check_host`]: a page served by this daemon, not one on a rebound name.
fn same_origin(door: &DoorPolicy, headers: &HeaderMap, origin: &str) -> bool {
    let Some(host) = headers.get(axum::http::header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    check_host(door, headers).is_ok()
        && origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")).is_some_and(|o| o == host)
}

/// Accepts the token as `?tkn=`, `?token=` or `Authorization: Bearer`.
pub fn check_token(
    door: &DoorPolicy,
    headers: &HeaderMap,
    query: &std::collections::HashMap<String, String>,
) -> Result<(), String> {
    let Some(expected) = &door.token else {
        return Ok(());
    };
    let bearer = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let offered = query.get("tkn").or_else(|| query.get("token")).map(String::as_str).or(bearer);
    match offered {
        Some(token) if constant_time_eq(token.as_bytes(), expected.as_bytes()) => Ok(()),
        Some(_) => Err("Refused: wrong connection token.\n".to_owned()),
        None => {
            Err("Refused: this daemon needs its connection token (?tkn=... or Authorization: Bearer ...).\n".to_owned())
        }
    }
}

pub use crate::users::constant_time_eq;

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn door() -> DoorPolicy {
        DoorPolicy {
            token: Some("s3cret".into()),
            bound: "127.0.0.1".parse().expect("ip"),
            allowed_hosts: vec!["devbox".into()],
            allowed_origins: vec!["https://ok.example".into()],
            hard_frame_bytes: 4096,
            max_connections: 8,
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).expect("header"));
        }
        h
    }

    #[test]
    fn host_header_must_be_ours() {
        let d = door();
        assert!(check_host(&d, &headers(&[("host", "127.0.0.1:9187")])).is_ok());
        assert!(check_host(&d, &headers(&[("host", "localhost:9187")])).is_ok());
        assert!(check_host(&d, &headers(&[("host", "[::1]:9187")])).is_ok());
        assert!(check_host(&d, &headers(&[("host", "devbox:9187")])).is_ok());
        assert!(check_host(&d, &headers(&[("host", "evil.example:9187")])).is_err());
    }

    #[test]
    fn web_pages_need_permission() {
        let d = door();
        assert!(check_origin(&d, &headers(&[])).is_ok());
        assert!(check_origin(&d, &headers(&[("origin", "https://ok.example")])).is_ok());
        assert!(check_origin(&d, &headers(&[("origin", "https://evil.example")])).is_err());
    }

    #[test]
    fn the_daemons_own_page_is_same_origin() {
        let d = door();
        let own = headers(&[("host", "127.0.0.1:9187"), ("origin", "http://127.0.0.1:9187")]);
        assert!(check_origin(&d, &own).is_ok());
        let other_port = headers(&[("host", "127.0.0.1:9187"), ("origin", "http://127.0.0.1:8080")]);
        assert!(check_origin(&d, &other_port).is_err(), "another page on this machine is not ours");
        let rebound = headers(&[("host", "evil.example:9187"), ("origin", "http://evil.example:9187")]);
        assert!(check_origin(&d, &rebound).is_err(), "a rebound name is not ours even when it matches");
    }

    #[test]
    fn token_in_query_or_header() {
        let d = door();
        let mut q = std::collections::HashMap::new();
        assert!(check_token(&d, &headers(&[]), &q).is_err());
        q.insert("tkn".to_owned(), "s3cret".to_owned());
        assert!(check_token(&d, &headers(&[]), &q).is_ok());
        q.insert("tkn".to_owned(), "nope".to_owned());
        assert!(check_token(&d, &headers(&[]), &q).is_err());
        assert!(check_token(&d, &headers(&[("authorization", "Bearer s3cret")]), &Default::default()).is_ok());
    }
}
