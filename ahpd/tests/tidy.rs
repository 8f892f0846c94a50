//! Tidy tests: rules of the code's shape that no compiler checks, read from the source tree.
//!
//! - The host does not know its features: nothing under `host/` names a tool module or the
//!   worktrees feature or the terminals or Agent Merge or the remotes or the kept content or the
//!   automations (they
//!   are registered with the host where it is built, outside `host/`), nor the GitHub client the
//!   features share (`github/`): the host never asks GitHub.
//! - The features reach the host through its facade: under `tools/`, `worktrees/`, `terminals/`,
//!   `agentmerge/`, `remotes/`, `automations/` and in `kept.rs`, `crate::host::` names only `facade`, `Host` and
//!   `Core`; and no feature names another.
//! - One write path: nothing but `host/write.rs` calls the channels' `commit`.
//! - The host stands in layers (`HOST_LAYERS`: channels, house, connections, catalogue,
//!   persistence, turn engine, surface): a file of `host/` names files of its own layer or below,
//!   never above, every file stands in one, and none holds over 15% of `host/`. The test prints the
//!   layers' sizes and the imports between them (`cargo nextest run -p ahpd --test tidy
//!   --no-capture`).
//! - One poison-tolerant lock: nothing in the workspace but `agent_runner::sync::lock` takes a
//!   poisoned mutex's guard by hand.

use std::path::{Path, PathBuf};

/// The host's features: each a folder (or one file, `<name>.rs`) under `ahpd/src` that reaches
/// the host through its facade.
const FEATURES: [&str; 7] = ["tools", "worktrees", "terminals", "agentmerge", "remotes", "kept", "automations"];

/// Every `.rs` file under `dir` (or the file `dir.rs` where no such folder is), with its path
/// relative to `ahpd/src`.
fn sources(dir: &str) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let file = root.join(format!("{dir}.rs"));
    if !dir.is_empty() && !root.join(dir).is_dir() && file.is_file() {
        let text = std::fs::read_to_string(&file).expect("a source file");
        return vec![(format!("{dir}.rs"), code_of(&text))];
    }
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

/// Every `.rs` file of the workspace's crates (the folders beside `ahpd` holding a `Cargo.toml`,
/// `target` and `node_modules` left out), with its path relative to the workspace.
fn workspace_sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let mut found = Vec::new();
    let mut folders: Vec<PathBuf> = std::fs::read_dir(root)
        .expect("the workspace folder")
        .map(|e| e.expect("an entry").path())
        .filter(|path| path.join("Cargo.toml").is_file())
        .collect();
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("a source folder") {
            let path = entry.expect("an entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() && !matches!(name, "target" | "node_modules" | ".git") {
                folders.push(path);
            } else if name.ends_with(".rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                let relative = path.strip_prefix(root).expect("under the workspace").display().to_string();
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
    for feature in FEATURES.iter().chain(&["github"]) {
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
        assert!(!files.is_empty(), "the {feature} feature's files were not found");
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

#[test]
fn one_poison_tolerant_lock() {
    let all = workspace_sources();
    assert!(all.iter().any(|(file, _)| file == "agent-runner/src/sync.rs"), "agent-runner's sync.rs was not found");
    let by_hand: Vec<String> = occurrences(&all, "into_inner")
        .into_iter()
        .filter(|at| at.contains("lock()") || at.contains("Poison"))
        .filter(|at| !at.starts_with("agent-runner/src/sync.rs:"))
        .collect();
    assert!(
        by_hand.is_empty(),
        "a mutex poisoned by a panic is taken by hand; lock it with agent_runner::sync::lock, the one \
         place that decides a poisoned lock is served on:\n{}",
        by_hand.join("\n")
    );
}

/// The host's layers, from the ground up, each with what it is and its files (a folder by its
/// name and `/`). A file names files of its own layer or of layers below it, never above.
const HOST_LAYERS: [(&str, &str, &[&str]); 7] = [
    (
        "channels",
        "the channels' states and their numbering, replay and fan-out, the errors a request is answered, the limits a connection meets, what waits on a person",
        &["core.rs", "ring.rs", "errors.rs", "limits.rs", "endpoints.rs", "questions.rs"],
    ),
    (
        "house",
        "the host and its core, what they are configured with, the ports they ask the world beside them through, and the state they hold with its own upkeep",
        &["mod.rs", "config.rs", "ports.rs", "driver.rs", "deltas.rs", "budget.rs", "rules.rs"],
    ),
    ("connections", "one connection's JSON-RPC: its frames, its answers, what the host asks a client", &["requests.rs"]),
    (
        "catalogue",
        "sessions and chats as a catalogue, the agents' offers, the accounts, the root config, the grants",
        &[
            "catalog.rs",
            "status.rs",
            "account.rs",
            "rootconfig.rs",
            "grants.rs",
            "foreign.rs",
            "offer.rs",
            "mcpservers.rs",
            "remembered.rs",
        ],
    ),
    ("persistence", "what is written when, loading and unloading sessions", &["persist.rs", "unload.rs"]),
    (
        "turn engine",
        "delivering a message, starting and ending turns, what a turn does and asks, the one write path",
        &[
            "turns.rs",
            "deliver.rs",
            "edits.rs",
            "held.rs",
            "clients.rs",
            "subagents.rs",
            "mirrors.rs",
            "attachments.rs",
            "completions.rs",
            "usage.rs",
            "terminal_channels.rs",
            "write.rs",
        ],
    ),
    (
        "surface",
        "the protocol a client speaks (its actions and commands) and the facade the features call",
        &["actions.rs", "commands/", "facade.rs"],
    ),
];

/// The code of a file without its tests (a `#[cfg(test)]` module is at the end of a file here).
fn without_tests(code: &str) -> &str {
    code.find("#[cfg(test)]").map_or(code, |at| &code[..at])
}

/// The names a path names after `prefix` at each place it occurs: `a` for `prefix::a::b`, and each
/// of `a`, `b` for `prefix::{a, b::c}`.
fn named_after(code: &str, prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().last();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        match rest.strip_prefix('{') {
            Some(group) => {
                let mut depth = 0;
                let end = group
                    .char_indices()
                    .find(|(_, c)| {
                        match c {
                            '{' => depth += 1,
                            '}' if depth == 0 => return true,
                            '}' => depth -= 1,
                            _ => {}
                        }
                        false
                    })
                    .map_or(group.len(), |(i, _)| i);
                let mut level = 0;
                let mut item = String::new();
                for c in group[..end].chars() {
                    match c {
                        '{' => level += 1,
                        '}' => level -= 1,
                        ',' if level == 0 => names.push(std::mem::take(&mut item)),
                        _ => {}
                    }
                    item.push(c);
                }
                names.push(item);
            }
            None => names.push(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()),
        }
    }
    names
        .into_iter()
        .map(|n| n.trim().trim_start_matches(',').trim().split("::").next().unwrap_or("").trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect()
}

/// The imports between the host's files: (file, the host file it names), both relative to
/// `host/`, read from `super::`, `self::`, `crate::host::` and (in `mod.rs`) a child's own name.
fn host_imports(host: &[(String, String)]) -> Vec<(String, String)> {
    let files: Vec<String> = host.iter().map(|(f, _)| f.trim_start_matches("host/").to_owned()).collect();
    let house = host.iter().find(|(f, _)| f == "host/mod.rs").map(|(_, c)| without_tests(c)).unwrap_or("");
    let house_items: Vec<String> = ["pub struct ", "pub enum ", "pub fn ", "pub type ", "pub const "]
        .iter()
        .flat_map(|kind| named_after(house, kind))
        .collect();
    let module = |folder: &str, name: &str| -> Option<String> {
        let file = format!("{folder}{name}.rs");
        let dir = format!("{folder}{name}/mod.rs");
        files.iter().find(|f| **f == file || **f == dir).cloned()
    };
    let mut imports = Vec::new();
    for (path, code) in host {
        let me = path.trim_start_matches("host/").to_owned();
        let code = without_tests(code);
        let in_commands = me.starts_with("commands/") && me != "commands/mod.rs";
        let mut named: Vec<(&str, String)> = Vec::new();
        for name in named_after(code, "crate::host::") {
            named.push(("", name));
        }
        if in_commands {
            named.extend(named_after(code, "super::super::").into_iter().map(|n| ("", n)));
            named.extend(named_after(code, "super::").into_iter().map(|n| ("commands/", n)));
        } else if me == "commands/mod.rs" {
            named.extend(named_after(code, "super::").into_iter().map(|n| ("", n)));
            named.extend(named_after(code, "self::").into_iter().map(|n| ("commands/", n)));
        } else if me == "mod.rs" {
            named.extend(named_after(code, "self::").into_iter().map(|n| ("", n)));
            for file in &files {
                let child = file.trim_end_matches(".rs").trim_end_matches("/mod");
                if !child.contains('/') && code.contains(&format!("{child}::")) {
                    let bare = named_after(code, &format!("{child}::"));
                    if !bare.is_empty() && child != "mod" {
                        named.push(("", child.to_owned()));
                    }
                }
            }
        } else {
            named.extend(named_after(code, "super::").into_iter().map(|n| ("", n)));
        }
        for (folder, name) in named {
            let target = module(folder, &name)
                .or_else(|| (folder == "commands/").then(|| "commands/mod.rs".to_owned()))
                .or_else(|| house_items.contains(&name).then(|| "mod.rs".to_owned()));
            if let Some(target) = target.filter(|t| *t != me) {
                if !imports.contains(&(me.clone(), target.clone())) {
                    imports.push((me.clone(), target));
                }
            }
        }
    }
    imports.sort();
    imports
}

/// The layer a host file stands in, by [`HOST_LAYERS`].
fn layer_of(file: &str) -> Option<usize> {
    HOST_LAYERS
        .iter()
        .position(|(_, _, files)| files.iter().any(|f| if f.ends_with('/') { file.starts_with(f) } else { file == *f }))
}

#[test]
fn the_hosts_layers_import_only_downward() {
    let host = sources("host");
    let lines = |code: &str| code.lines().count();
    let unplaced: Vec<&str> =
        host.iter().map(|(f, _)| f.trim_start_matches("host/")).filter(|f| layer_of(f).is_none()).collect();
    assert!(unplaced.is_empty(), "a file of host/ stands in no layer; name its layer in HOST_LAYERS: {unplaced:?}");

    // The listing a reviewer reads (`cargo nextest run -p ahpd --test tidy --no-capture`).
    let all: usize = sources("").iter().map(|(_, c)| lines(c)).sum();
    let total: usize = host.iter().map(|(_, c)| lines(c)).sum();
    let imports = host_imports(&host);
    println!("host/: {total} lines of ahpd/src's {all} ({}%)", total * 100 / all.max(1));
    for (index, (name, what, _)) in HOST_LAYERS.iter().enumerate() {
        let mine: Vec<&(String, String)> =
            host.iter().filter(|(f, _)| layer_of(f.trim_start_matches("host/")) == Some(index)).collect();
        let size: usize = mine.iter().map(|(_, c)| lines(c)).sum();
        let largest = mine.iter().map(|(f, c)| (lines(c), f.as_str())).max().unwrap_or((0, ""));
        println!(
            "{index} {name}: {size} lines ({}% of host/), its largest file {} ({} lines): {what}",
            size * 100 / total.max(1),
            largest.1,
            largest.0
        );
        for below in (0..index).rev() {
            let arrows: Vec<String> = imports
                .iter()
                .filter(|(a, b)| layer_of(a) == Some(index) && layer_of(b) == Some(below))
                .map(|(a, b)| format!("{a} -> {b}"))
                .collect();
            if !arrows.is_empty() {
                println!("    -> {}: {}", HOST_LAYERS[below].0, arrows.join(", "));
            }
        }
    }
    assert!(imports.len() > 50, "the host's imports were not read: {imports:?}");

    let upward: Vec<String> = imports
        .iter()
        .filter(|(a, b)| layer_of(b) > layer_of(a))
        .map(|(a, b)| {
            let name = |f: &str| layer_of(f).map_or("?", |l| HOST_LAYERS[l].0);
            format!("{a} ({}) -> {b} ({})", name(a), name(b))
        })
        .collect();
    assert!(
        upward.is_empty(),
        "an import runs up the host's layers; move what is named down to the layer that needs it, or \
         the file to the layer it belongs in:\n{}",
        upward.join("\n")
    );
    for (path, code) in &host {
        let share = lines(code) * 100 / total.max(1);
        assert!(share <= 15, "{path} holds {share}% of host/; a module over 15% is split by what it does");
    }
}
