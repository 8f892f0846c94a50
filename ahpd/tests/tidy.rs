//! Tidy tests: rules of the code's shape that no compiler checks, read from the source tree.
//!
//! - The host does not know its features: nothing under `host/` names a tool module or the
//!   worktrees feature or the terminals or Agent Merge (they are registered with the host where it
//!   is built, outside `host/`).
//! - The features reach the host through its facade: under `tools/`, `worktrees/`, `terminals/`
//!   and `agentmerge/`, `crate::host::` names only `facade`, `Host` and `Core`; and no feature
//!   names another.
//! - One write path: nothing but `host/write.rs` calls the channels' `commit`.

use std::path::{Path, PathBuf};

/// The host's features: each a folder under `ahpd/src` that reaches the host through its facade.
const FEATURES: [&str; 5] = ["tools", "worktrees", "terminals", "agentmerge", "remotes"];

/// Every `.rs` file under `dir`, with its path relative to `ahpd/src`.
fn sources(dir: &str) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    let mut folders = vec![root.join(dir)];
    while let Some(folder) = folders.pop() {
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(&folder).expect("a source folder").map(|e| e.expect("an entry").path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                let relative = path.strip_prefix(&root).expect("under src").display().to_string();
                found.push((relative, code_of(&text)));
            }
        }
    }
    found
}

/// The text with its comments taken out (what follows `//` on each line), so prose may name
/// anything.
fn code_of(text: &str) -> String {
    text.lines().map(|line| line.split_once("//").map_or(line, |(code, _)| code)).collect::<Vec<_>>().join("\n")
}

/// Where `needle` occurs in each file, as `file:line: the line`.
fn occurrences(files: &[(String, String)], needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (file, code) in files {
        for (n, line) in code.lines().enumerate() {
            if line.contains(needle) {
                found.push(format!("{file}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn the_host_names_no_feature_module() {
    let host = sources("host");
    assert!(host.len() > 20, "the host's files were not found: {host:?}");
    let mut named = Vec::new();
    for feature in FEATURES {
        for prefix in ["crate::", "super::", "super::super::"] {
            named.extend(occurrences(&host, &format!("{prefix}{feature}")));
        }
    }
    assert!(
        named.is_empty(),
        "host/ names a feature's module; the host knows its tools only through host::facade::Tools, \
         its worktrees through host::facade::Workspaces and its terminals through \
         host::facade::Terminals, registered where the host is built (daemon.rs, bare.rs):\n{}",
        named.join("\n")
    );
}

#[test]
fn the_features_reach_the_host_through_its_facade() {
    let features: Vec<(&str, Vec<(String, String)>)> = FEATURES.iter().map(|f| (*f, sources(f))).collect();
    for (feature, files) in &features {
        assert!(files.len() > 3, "the {feature} feature's files were not found");
    }
    let allowed = ["facade", "Host", "Core"];
    let mut reached = Vec::new();
    for (feature, files) in &features {
        for other in FEATURES.iter().filter(|other| *other != feature) {
            reached.extend(occurrences(files, &format!("crate::{other}")));
        }
    }
    for (file, code) in features.iter().flat_map(|(_, files)| files) {
        for (n, line) in code.lines().enumerate() {
            let mut rest = line;
            while let Some(at) = rest.find("crate::host::") {
                rest = &rest[at + "crate::host::".len()..];
                let names: Vec<&str> = match rest.strip_prefix('{') {
                    Some(group) => group.split('}').next().unwrap_or("").split(',').map(str::trim).collect(),
                    None => vec![rest.split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap_or("")],
                };
                for name in names.into_iter().filter(|n| !n.is_empty()) {
                    let first = name.split("::").next().unwrap_or(name);
                    if !allowed.contains(&first) {
                        reached.push(format!("{file}:{}: crate::host::{name}", n + 1));
                    }
                }
            }
        }
    }
    assert!(
        reached.is_empty(),
        "a feature reaches past the host's facade, or into the other feature (expose what it needs on host::facade):\n{}",
        reached.join("\n")
    );
}

#[test]
fn only_the_write_path_commits() {
    let all = sources("");
    let commits: Vec<String> = occurrences(&all, ".commit(")
        .into_iter()
        // A SQLite transaction's commit, not the channels'.
        .filter(|at| !(at.starts_with("store/") && at.contains("tx.commit()")))
        .collect();
    let outside: Vec<&String> = commits.iter().filter(|at| !at.starts_with("host/write.rs:")).collect();
    assert!(!commits.is_empty(), "the write path's commit was not found");
    assert!(
        outside.is_empty(),
        "only host/write.rs (Core::apply) may call the channels' commit; apply the action through \
         Core::apply instead:\n{}",
        outside.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
    );
}
