//! Two of this host's own three tools, both read-only: `ahp_resource` (a file under the session's
//! folders, or a resource a connected client publishes at `<scheme>://<clientId>/…`, read through
//! AHP's `resourceRead` sent to that client) and `ahp_terminals` (the terminals a person can see
//! that are the session's — its own, and those open in its folder — with their last lines). The
//! third, `schedule_wakeup`, is `wakeups.rs`.

use std::path::{Path, PathBuf};

use base64::Engine;
use schemars::JsonSchema;
use serde::Deserialize;

use super::session::NoArgs;
use super::{declare, Group, Tool, ToolCall, ToolResult};
use crate::fileuri::{path_of_file_uri, place, Placed};
use crate::host::facade::{self, path_of, ClientRequestError, CLIENT_REQUEST_TIMEOUT};
use crate::host::Host;

const RESOURCE: &str = "ahp_resource";
const TERMINALS: &str = "ahp_terminals";

/// The largest file `ahp_resource` reads.
const MAX_FILE: u64 = 8 << 20;

/// `ahp_resource`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadResource {
    /// The resource's URI, such as file:///path/to/file or virtual://<client>/<path>.
    pub uri: String,
}

/// The two readers (and `schedule_wakeup` after them).
pub fn tools() -> Vec<Tool> {
    vec![
        declare::<ReadResource>(
            Group::Own,
            RESOURCE,
            "Read a resource by URI: a file under this session's folders, or one a connected client publishes and this machine has no copy of - a plugin\u{2019}s virtual files, an editor\u{2019}s unsaved buffers. Addressed as <scheme>://<client>/<path>.",
        )
        .with(|info| info.titled("Read a resource this host serves").read_only())
        .runs(|cx, args| Box::pin(resource(cx.host, cx.call, args))),
        declare::<NoArgs>(
            Group::Own,
            TERMINALS,
            "The terminals this host has open for this session - its own, and those open in its folder - as uri, title, cwd and running on a line each, followed by each one's last lines of output. These are the terminals the person can see, which is not the same as a shell run from a tool.",
        )
        .with(|info| {
            let mut info = info.titled("Terminals on this host").read_only();
            info.definition.annotations.get_or_insert_with(super::empty_annotations).open_world_hint = Some(false);
            info
        })
        .answers(|cx, _| Ok(terminals(cx.host, cx.call))),
        super::wakeups::tool(),
    ]
}

/// How many of a terminal's last lines `ahp_terminals` shows.
const LAST_LINES: usize = 20;

/// The terminals open on this host that the calling session may see (its own, and those open in
/// its folder), as seed 000 has them — uri, title, cwd and running, a line each — each followed
/// by its last lines of output, escape sequences taken out.
fn terminals(host: &Host, call: &ToolCall) -> String {
    let core = host.lock();
    let session = call.session.as_deref();
    let folder = session.and_then(|s| core.session(s)).and_then(|m| m.working_directory.clone());
    let folder = folder.map(|f| std::fs::canonicalize(&f).unwrap_or(f));
    let mut out = Vec::new();
    for (uri, state) in core.listed_terminals() {
        let cwd = state.cwd.as_deref().and_then(path_of);
        let theirs = facade::claiming_session(state).is_some_and(|s| Some(s) == session);
        let in_folder = matches!((&cwd, &folder), (Some(cwd), Some(folder)) if cwd.starts_with(folder));
        if session.is_some() && !theirs && !in_folder {
            continue;
        }
        let running = if facade::is_running(state) { "running" } else { "exited" };
        let shown_cwd = cwd.map(|c| c.display().to_string()).unwrap_or_default();
        out.push(format!("{uri}\t{}\t{shown_cwd}\t{running}", state.title));
        out.extend(last_lines(&facade::output_of(state), LAST_LINES).into_iter().map(|line| format!("  {line}")));
    }
    if out.is_empty() {
        return "This host has no terminal open.".to_owned();
    }
    out.join("\n")
}

/// The last `n` lines a terminal shows, as text: escape sequences out, a line a carriage return
/// rewrote read as it ended, blank lines at the end dropped.
fn last_lines(output: &str, n: usize) -> Vec<String> {
    let mut lines: Vec<String> = output
        .split('\n')
        .map(|line| {
            let line = line.strip_suffix('\r').unwrap_or(line);
            let shown = line.rsplit('\r').next().unwrap_or(line);
            strip_ansi_escapes::strip_str(shown).trim_end().to_owned()
        })
        .collect();
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let skip = lines.len().saturating_sub(n);
    lines.split_off(skip)
}

async fn resource(host: &Host, call: &ToolCall, args: ReadResource) -> ToolResult {
    let uri = args.uri.trim().to_owned();
    let Some((scheme, rest)) = uri.split_once(':').filter(|(s, _)| valid_scheme(s)) else {
        return Err(format!(
            "Invalid {RESOURCE} input: uri must be an absolute URI including its scheme, such as 'file:///path/to/file'."
        ).into());
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme == "file" {
        return read_file(host, call, &uri).await;
    }
    if let Some(read) = super::computer::read(&uri).await {
        return read;
    }
    let authority = rest.strip_prefix("//").map(|r| r.split(['/', '?', '#']).next().unwrap_or(""));
    match authority {
        Some(client) if !client.is_empty() && !scheme.starts_with("ahp-") => read_published(host, client, &uri).await,
        _ => Err(format!(
            "{RESOURCE} reads files under this session's folders and resources a connected client publishes at <scheme>://<client>/<path>; {uri} is neither."
        ).into()),
    }
}

fn valid_scheme(scheme: &str) -> bool {
    let mut chars = scheme.chars();
    scheme.len() > 1
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

async fn read_file(host: &Host, call: &ToolCall, uri: &str) -> ToolResult {
    let Some(path) = path_of_file_uri(uri) else {
        return Err(format!("Invalid {RESOURCE} input: {uri} does not name an absolute path.").into());
    };
    let folders: Vec<PathBuf> = {
        let mut core = host.lock();
        match &call.session {
            Some(session) if host.ensure_loaded(&mut core, session) => {
                core.session(session).and_then(|m| m.working_directory.clone()).into_iter().collect()
            }
            _ => Vec::new(),
        }
    };
    if folders.is_empty() {
        return Err(format!("This session has no folder, so {RESOURCE} reads no files.").into());
    }
    let outside = || {
        let shown: Vec<String> = folders.iter().map(|f| f.display().to_string()).collect();
        format!("{uri} is outside this session's folders; {RESOURCE} reads files under {} only.", shown.join(", "))
    };
    let placed = {
        let folders = folders.clone();
        tokio::task::spawn_blocking(move || place(&path, &folders)).await.unwrap_or(Placed::Outside)
    };
    let real = match placed {
        Placed::Inside(real) => real,
        Placed::Missing => return Err(format!("There is no file at {uri}.").into()),
        Placed::Outside => return Err(outside().into()),
    };
    let meta = tokio::fs::metadata(&real).await.map_err(|e| format!("Could not read {uri}: {e}"))?;
    if meta.is_dir() {
        return list_dir(&real, uri).await;
    }
    if meta.len() > MAX_FILE {
        return Err(format!("{uri} is {} bytes, more than {RESOURCE} reads ({} bytes).", meta.len(), MAX_FILE).into());
    }
    let bytes = tokio::fs::read(&real).await.map_err(|e| format!("Could not read {uri}: {e}"))?;
    Ok(text_or_base64(uri, bytes, None))
}

/// Valid UTF-8 with no zero byte is text; anything else is said as base64.
fn text_or_base64(uri: &str, bytes: Vec<u8>, content_type: Option<&str>) -> String {
    if !bytes.contains(&0) {
        if let Ok(text) = String::from_utf8(bytes.clone()) {
            return text;
        }
    }
    let kind = content_type.map(|t| format!(", {t}")).unwrap_or_default();
    format!(
        "{uri} is binary ({} bytes{kind}); base64:\n{}",
        bytes.len(),
        base64::engine::general_purpose::STANDARD.encode(&bytes)
    )
}

async fn list_dir(dir: &Path, uri: &str) -> ToolResult {
    let mut entries = tokio::fs::read_dir(dir).await.map_err(|e| format!("Could not list {uri}: {e}"))?;
    let mut names: Vec<(bool, String)> = Vec::new();
    while let Ok(Some(entry)) = entries.next_entry().await {
        let is_dir = entry.file_type().await.is_ok_and(|t| t.is_dir());
        names.push((!is_dir, entry.file_name().to_string_lossy().into_owned()));
    }
    names.sort();
    if names.is_empty() {
        return Ok(format!("{uri} is an empty folder."));
    }
    let lines: Vec<String> =
        names.into_iter().map(|(file, name)| if file { name } else { format!("{name}/") }).collect();
    Ok(lines.join("\n"))
}

/// Reads a resource a connected client publishes, by asking that client.
async fn read_published(host: &Host, client: &str, uri: &str) -> ToolResult {
    match host.read_client_resource(client, uri).await {
        Ok(read) => match read.text {
            Some(text) => Ok(text),
            None => Ok(text_or_base64(uri, read.bytes, read.content_type.as_deref())),
        },
        Err(ClientRequestError::NotConnected) => {
            Err(format!("No connected client publishes {uri}: no client {client} is connected to this host.").into())
        }
        // The client's own refusal, as it said it: this host has no standing to soften it.
        Err(ClientRequestError::Refused(why)) => Err(format!("{client} could not read {uri}: {why}").into()),
        Err(ClientRequestError::Disconnected) => {
            Err(format!("{client} disconnected before answering for {uri}.").into())
        }
        Err(ClientRequestError::TimedOut) => {
            Err(format!("{client} did not answer for {uri} within {} s.", CLIENT_REQUEST_TIMEOUT.as_secs()).into())
        }
        Err(ClientRequestError::Undecodable(why)) => {
            Err(format!("{client} answered {uri} with base64 that does not decode: {why}").into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminals_last_lines_are_its_text() {
        let output = "$ make\r\n\x1b[32mok\x1b[0m\r\n50%\r100%\r\n$ \r\n\r\n";
        assert_eq!(last_lines(output, 20), ["$ make", "ok", "100%", "$"]);
        assert_eq!(last_lines(output, 2), ["100%", "$"]);
        assert!(last_lines("", 5).is_empty());
    }

    #[test]
    fn text_is_text_and_the_rest_is_base64() {
        assert_eq!(text_or_base64("u", b"hello".to_vec(), None), "hello");
        assert_eq!(
            text_or_base64("u", vec![0, 1], Some("image/png")),
            "u is binary (2 bytes, image/png); base64:\nAAE="
        );
    }
}
