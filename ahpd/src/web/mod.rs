//! The web window: a single-page AHP client (plain ES modules and CSS under `ahpd/web/`) embedded
//! in the binary at build time and served by the daemon's own listener — the page at `/` for a
//! browser, its files under `/ui/`, and a refusal page for a wrong token.
//!
//! **Invariant:** nothing here touches the host. The page speaks AHP over the same WebSocket as any
//! other client; this module only hands out bytes, each response with a strict
//! Content-Security-Policy (scripts, styles and connections from this origin alone; nothing framed,
//! no forms, no plugins) and no referrer, so the token can reach no third party.

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Where the page's files are served.
pub const PREFIX: &str = "/ui/";

/// One embedded file.
struct Asset {
    name: &'static str,
    mime: &'static str,
    body: &'static str,
}

/// A vendored ES module served at `/ui/vendor/{path}`, the path it has under `ahpd/web/vendor/`.
macro_rules! vendored_module {
    ($path:literal) => {
        Asset { name: concat!("vendor/", $path), mime: JS, body: include_str!(concat!("../../web/vendor/", $path)) }
    };
}

/// The page's files, read into the binary when it is built.
const ASSETS: &[Asset] = &[
    Asset { name: "app.js", mime: JS, body: include_str!("../../web/app.js") },
    Asset { name: "rpc.js", mime: JS, body: include_str!("../../web/rpc.js") },
    Asset { name: "reducer.js", mime: JS, body: include_str!("../../web/reducer.js") },
    Asset { name: "markdown.js", mime: JS, body: include_str!("../../web/markdown.js") },
    Asset { name: "chat.js", mime: JS, body: include_str!("../../web/chat.js") },
    Asset { name: "dom.js", mime: JS, body: include_str!("../../web/dom.js") },
    Asset { name: "attempts.js", mime: JS, body: include_str!("../../web/attempts.js") },
    Asset { name: "changes.js", mime: JS, body: include_str!("../../web/changes.js") },
    Asset { name: "diff.js", mime: JS, body: include_str!("../../web/diff.js") },
    Asset { name: "changes.css", mime: CSS, body: include_str!("../../web/changes.css") },
    Asset { name: "style.css", mime: CSS, body: include_str!("../../web/style.css") },
    Asset { name: "terminal.js", mime: JS, body: include_str!("../../web/terminal.js") },
    Asset { name: "attention.js", mime: JS, body: include_str!("../../web/attention.js") },
    Asset { name: "shortcuts.js", mime: JS, body: include_str!("../../web/shortcuts.js") },
    Asset { name: "kept.js", mime: JS, body: include_str!("../../web/kept.js") },
    Asset { name: "automations.js", mime: JS, body: include_str!("../../web/automations.js") },
    // Vendored, pinned and minified (ahpd/web/vendor/README.md says which and whence); loaded the
    // first time a terminal opens.
    Asset { name: "xterm.mjs", mime: JS, body: include_str!("../../web/vendor/xterm.mjs") },
    Asset { name: "xterm-addon-fit.mjs", mime: JS, body: include_str!("../../web/vendor/xterm-addon-fit.mjs") },
    Asset { name: "xterm.css", mime: CSS, body: include_str!("../../web/vendor/xterm.css") },
    // jsdiff's ES modules as its package ships them (vendored and pinned the same way), the few
    // `diff.js` imports, at the paths they import each other by.
    vendored_module!("jsdiff/diff/base.js"),
    vendored_module!("jsdiff/diff/array.js"),
    vendored_module!("jsdiff/diff/word.js"),
    vendored_module!("jsdiff/util/string.js"),
];

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

const INDEX: &str = include_str!("../../web/index.html");

/// The page's policy: its own scripts, styles and connections (the WebSocket included), nothing
/// else — no inline script, no plugin, no frame, no form, no image from anywhere. `data:` images
/// are the tab's icon, drawn by the page on a canvas (the page never loads an image a reply names);
/// `blob:` images are the pictures a tool returned, which the page read itself through
/// `resourceRead` and made a blob of (`kept.js`).
const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
     img-src 'self' data: blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The policy of every other response: nothing may run or load.
pub const STRICT_POLICY: &str = "default-src 'none'; style-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// True when a plain GET at `/` comes from a browser that wants a page (not a WebSocket upgrade).
pub fn wants_page(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|accept| accept.contains("text/html"))
}

/// The page itself. It holds no secret: the token travels in the address the person opened, and
/// the page takes it from there.
pub fn page() -> Response {
    with_headers(StatusCode::OK, "text/html; charset=utf-8", INDEX.to_owned(), PAGE_POLICY)
}

/// A clear page for a token that is wrong or missing: what happened and how to get the right
/// address. Nothing on it runs.
pub fn refusal(why: &str) -> Response {
    let body = REFUSAL.replace("{why}", &escape(why.trim()));
    with_headers(StatusCode::UNAUTHORIZED, "text/html; charset=utf-8", body, STRICT_POLICY)
}

const REFUSAL: &str = r#"<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>ahpd: refused</title><link rel="stylesheet" href="/ui/style.css"></head>
<body class="refused"><main class="refusal" id="refusal">
<h1>This daemon did not let you in</h1>
<p class="why">{why}</p>
<p>Open the address <code>ahpd connect</code> prints (or the one the daemon printed when it started):
it carries the right token.</p>
</main></body></html>
"#;

/// `GET /ui/{*file}`: one of the page's files (a vendored module's by its path under `/ui/`).
pub async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(asset) => with_headers(StatusCode::OK, asset.mime, asset.body.to_owned(), STRICT_POLICY),
        None => with_headers(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            format!("No {name} here.\n"),
            STRICT_POLICY,
        ),
    }
}

/// `GET /favicon.ico`: nothing, quietly (browsers ask for it on every page).
pub async fn favicon() -> Response {
    with_headers(StatusCode::NO_CONTENT, "image/x-icon", String::new(), STRICT_POLICY)
}

/// Adds the policy (and its companions) to a response that has none of its own.
pub fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(STRICT_POLICY));
    }
    headers.entry(header::X_CONTENT_TYPE_OPTIONS).or_insert(HeaderValue::from_static("nosniff"));
    headers.entry(header::REFERRER_POLICY).or_insert(HeaderValue::from_static("no-referrer"));
    response
}

fn with_headers(status: StatusCode, mime: &'static str, body: String, policy: &'static str) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(mime));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(policy));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    secure(response)
}

/// Text made safe to put inside HTML.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The address of the page for a daemon listening at `ws_url` (`ws://host:port`), with its token
/// when it has one.
pub fn page_url(ws_url: &str, token: Option<&str>) -> String {
    let http = match ws_url.strip_prefix("wss://") {
        Some(rest) => format!("https://{rest}"),
        None => format!("http://{}", ws_url.strip_prefix("ws://").unwrap_or(ws_url)),
    };
    let base = format!("{}/", http.trim_end_matches('/'));
    match token {
        Some(token) => format!("{base}?tkn={}", percent_encode(token)),
        None => base,
    }
}

/// Percent-encodes everything but the unreserved characters (a token is usually hex already).
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_url_carries_the_token_encoded() {
        assert_eq!(page_url("ws://127.0.0.1:9187", None), "http://127.0.0.1:9187/");
        assert_eq!(page_url("ws://127.0.0.1:9187", Some("ab c/")), "http://127.0.0.1:9187/?tkn=ab%20c%2F");
        assert_eq!(page_url("wss://box:1", Some("t")), "https://box:1/?tkn=t");
    }

    #[test]
    fn the_refusal_page_escapes_what_it_is_told() {
        let response = refusal("<script>alert(1)</script>");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert!(response.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .expect("ascii")
            .contains("default-src 'none'"));
    }

    #[test]
    fn escape_leaves_no_markup() {
        assert_eq!(escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
    }

    #[test]
    fn every_asset_is_there_and_the_page_names_only_its_own() {
        for asset in ASSETS {
            assert!(!asset.body.is_empty(), "{} is empty", asset.name);
        }
        assert!(INDEX.contains("/ui/app.js") && !INDEX.contains("http"), "the page loads nothing from elsewhere");
    }

    /// A module's relative import, resolved against the module's own path under `/ui/`.
    fn resolve(from: &str, relative: &str) -> String {
        let mut parts: Vec<&str> = from.split('/').collect();
        parts.pop();
        for step in relative.split('/') {
            match step {
                "." => {}
                ".." => {
                    parts.pop();
                }
                name => parts.push(name),
            }
        }
        parts.join("/")
    }

    #[test]
    fn every_module_a_script_imports_is_served() {
        let mut checked = 0;
        for asset in ASSETS.iter().filter(|a| a.mime == JS) {
            for quote in ["'", "\""] {
                for opening in ["from ", "import(", "new URL("] {
                    let pattern = format!("{opening}{quote}.");
                    for (at, _) in asset.body.match_indices(&pattern) {
                        let rest = &asset.body[at + pattern.len() - 1..];
                        let Some(end) = rest.find(quote) else { continue };
                        let target = resolve(asset.name, &rest[..end]);
                        assert!(
                            ASSETS.iter().any(|a| a.name == target),
                            "{} imports {target}, which is not served",
                            asset.name
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked >= 6, "the page's own imports and the vendored modules' were read ({checked})");
    }

    #[test]
    fn only_a_browser_asking_for_html_gets_the_page() {
        let mut headers = HeaderMap::new();
        assert!(!wants_page(&headers));
        headers.insert(header::ACCEPT, HeaderValue::from_static("text/html,application/xhtml+xml"));
        assert!(wants_page(&headers));
    }
}
