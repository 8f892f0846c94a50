//! The docs tell the truth: every configuration key is in docs/config.md, every crate has its
//! section in docs/architecture.md, and every source file opens with a `//!` line.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn every_config_key_is_documented() {
    let doc = std::fs::read_to_string(repo().join("docs/config.md")).expect("docs/config.md");
    for key in ahpd::config::KEYS {
        assert!(doc.contains(&format!("| `{}` |", key.name)), "docs/config.md does not document {}", key.name);
    }
}

/// The workspace's crates: the backends' (from the backend table), and the rest.
fn crates() -> Vec<&'static str> {
    let mut crates = vec!["protocol"];
    for backend in ahpd::backends::BACKENDS {
        if !crates.contains(&backend.crate_dir) {
            crates.push(backend.crate_dir);
        }
    }
    crates.extend(["ahpd", "tests"]);
    crates
}

#[test]
fn every_crate_has_a_section_in_the_code_map() {
    let doc = std::fs::read_to_string(repo().join("docs/architecture.md")).expect("docs/architecture.md");
    for krate in crates() {
        assert!(doc.contains(&format!("### `{krate}`")), "docs/architecture.md has no section for {krate}");
    }
}

#[test]
fn every_backend_kind_is_documented() {
    let config = std::fs::read_to_string(repo().join("docs/config.md")).expect("docs/config.md");
    let kinds = config.lines().find(|l| l.starts_with("| `kind` |")).expect("docs/config.md lists the kinds");
    let workers = std::fs::read_to_string(repo().join("docs/workers.md")).expect("docs/workers.md");
    for kind in ahpd::backends::entry_kinds() {
        assert!(kinds.contains(&format!("`{kind}`")), "docs/config.md's kind row does not name {kind}");
    }
    for backend in ahpd::backends::BACKENDS {
        assert!(workers.contains(&format!("`{}`", backend.kind)), "docs/workers.md does not name {}", backend.kind);
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() && !matches!(name, "target" | "node_modules" | ".cache" | ".git") {
            rust_files(&path, out);
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_rust_file_says_what_it_is_for() {
    let mut files = Vec::new();
    for krate in crates().into_iter().chain(["fuzz"]) {
        rust_files(&repo().join(krate), &mut files);
    }
    assert!(files.len() > 20);
    let missing: Vec<_> = files
        .iter()
        .filter(|f| !std::fs::read_to_string(f).map(|t| t.starts_with("//!")).unwrap_or(false))
        .map(|f| f.strip_prefix(repo()).unwrap_or(f).display().to_string())
        .collect();
    assert!(missing.is_empty(), "these files do not open with a //! line: {missing:?}");
}
