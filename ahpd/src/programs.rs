//! What ahpd can tell of an agent's program without running it as an agent, for `ahpd agents` and
//! for which known agents are offered: its version (what `--version` says, else the `package.json`
//! of the npm package it was installed from, for a program such as codex-acp that refuses the
//! flag), and whether the Node.js on the PATH is one its package's `engines.node` allows (pi 1.x
//! on an older Node fails in ways that read as something else: pi-acp says "Authentication
//! required").

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use semver::{Version, VersionReq};
use serde_json::Value;

/// How long a program may take to say its version.
const VERSION_WITHIN: Duration = Duration::from_secs(5);

/// How far above a program's real path its `package.json` may be (`dist/bundle/cli.js` is three).
const PACKAGE_DEPTH: usize = 5;

/// The npm package a program was installed from.
#[derive(Debug, Clone, PartialEq)]
pub struct Package {
    /// Its `name`.
    pub name: String,
    /// Its `version`.
    pub version: String,
    /// Its `engines.node`, when it names one this reads.
    pub node: Option<VersionReq>,
}

/// The package whose folder holds `program`'s real path (npm links `node_modules/.bin/<name>` to a
/// file inside it): the nearest `package.json` above it that names a package and a version.
pub fn package_of(program: &Path) -> Option<Package> {
    let real = std::fs::canonicalize(program).ok()?;
    real.ancestors().skip(1).take(PACKAGE_DEPTH).find_map(|folder| read_package(&folder.join("package.json")))
}

fn read_package(manifest: &Path) -> Option<Package> {
    let text = std::fs::read_to_string(manifest).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    let name = value["name"].as_str()?.to_owned();
    let version = value["version"].as_str()?.to_owned();
    let node = value["engines"]["node"].as_str().and_then(|range| VersionReq::parse(range).ok());
    Some(Package { name, version, node })
}

/// What a person reads as `program`'s version: the first line `--version` prints when it exits 0
/// in time, else its npm package's version.
pub fn version_of(program: &Path) -> Option<String> {
    first_line(program, "--version").or_else(|| package_of(program).map(|p| format!("{} {}", p.name, p.version)))
}

/// The Node.js version `node --version` on the PATH says.
pub fn node_on_path() -> Option<Version> {
    let node = crate::agents::find_on_path("node")?;
    let said = first_line(&node, "--version")?;
    Version::parse(said.trim_start_matches('v')).ok()
}

/// The Node.js versions `program`'s npm package says it runs on (`engines.node`), when it says.
pub fn node_needed(program: &Path) -> Option<VersionReq> {
    package_of(program)?.node
}

/// Why `program`, which needs a Node.js of `needed`, cannot run on `node` (the one on the PATH,
/// `None` when there is none): "pi needs Node ≥ 22.19; this is 20.11.1"; `None` when it can.
pub fn node_falls_short(program: &str, needed: &VersionReq, node: Option<&Version>) -> Option<String> {
    let wanted = describe(needed);
    match node {
        Some(node) if needed.matches(node) => None,
        Some(node) => Some(format!("{program} needs Node {wanted}; this is {node}")),
        None => Some(format!("{program} needs Node {wanted}; there is no node on the PATH")),
    }
}

/// A Node range as a person reads it: `>=22.19.0` as "≥ 22.19".
fn describe(range: &VersionReq) -> String {
    let Some(first) = range.comparators.first() else { return range.to_string() };
    let number = match (first.minor, first.patch) {
        (Some(minor), Some(patch)) if patch != 0 => format!("{}.{minor}.{patch}", first.major),
        (Some(minor), _) => format!("{}.{minor}", first.major),
        (None, _) => first.major.to_string(),
    };
    match (range.comparators.len(), first.op) {
        (1, semver::Op::GreaterEq) => format!("≥ {number}"),
        _ => range.to_string(),
    }
}

/// The first line `program arg` prints, when it exits 0 within [`VERSION_WITHIN`].
fn first_line(program: &Path, arg: &str) -> Option<String> {
    let mut ask = std::process::Command::new(program);
    ask.arg(arg).stdin(Stdio::null());
    let output = agent_runner::child::run_within(ask, VERSION_WITHIN).ok()??;
    let out = String::from_utf8_lossy(&output.stdout);
    let line = out.lines().map(str::trim).find(|l| !l.is_empty())?;
    output.status.success().then(|| line.chars().take(80).collect())
}

/// The programs `known` runs, each found on the PATH: its own, then those it runs in turn (pi-acp
/// runs pi). The first that is missing says so.
pub fn programs_of(program: &'static str, also_runs: &[&'static str]) -> Result<Vec<(&'static str, PathBuf)>, String> {
    std::iter::once(program)
        .chain(also_runs.iter().copied())
        .map(|name| match crate::agents::find_on_path(name) {
            Some(path) => Ok((name, path)),
            None if name == program => Err(format!("{name} is not on the PATH")),
            None => Err(format!("{name} is not on the PATH ({program} runs it)")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An npm-like layout: `node_modules/<name>/package.json` and `node_modules/.bin/<bin>` linked
    /// to `dist/cli.js` inside it.
    fn installed(root: &Path, name: &str, bin: &str, manifest: Value) -> PathBuf {
        let package = root.join("node_modules").join(name);
        std::fs::create_dir_all(package.join("dist")).expect("dirs");
        std::fs::write(package.join("package.json"), manifest.to_string()).expect("manifest");
        std::fs::write(package.join("dist/cli.js"), "#!/usr/bin/env node\n").expect("cli");
        let bins = root.join("node_modules/.bin");
        std::fs::create_dir_all(&bins).expect("bin");
        let link = bins.join(bin);
        std::os::unix::fs::symlink(package.join("dist/cli.js"), &link).expect("link");
        link
    }

    #[test]
    fn a_program_s_package_says_its_version_and_the_node_it_needs() {
        let root = tempfile::tempdir().expect("temp");
        let manifest = serde_json::json!({"name": "@earendil-works/pi-coding-agent", "version": "1.6.0",
                                          "engines": {"node": ">=22.19.0"}});
        let pi = installed(root.path(), "@earendil-works/pi-coding-agent", "pi", manifest);
        let package = package_of(&pi).expect("found");
        assert_eq!((package.name.as_str(), package.version.as_str()), ("@earendil-works/pi-coding-agent", "1.6.0"));
        let needed = node_needed(&pi).expect("pi names the Node it needs");
        let old = Version::new(20, 11, 1);
        let short = node_falls_short("pi", &needed, Some(&old));
        assert_eq!(short.as_deref(), Some("pi needs Node ≥ 22.19; this is 20.11.1"));
        assert_eq!(node_falls_short("pi", &needed, Some(&Version::new(22, 19, 0))), None);
        let none = node_falls_short("pi", &needed, None);
        assert_eq!(none.as_deref(), Some("pi needs Node ≥ 22.19; there is no node on the PATH"));
        let plain =
            installed(root.path(), "pi-acp", "pi-acp", serde_json::json!({"name": "pi-acp", "version": "0.0.34"}));
        assert_eq!(node_needed(&plain), None, "no engines, nothing needed");
        assert_eq!(version_of(&plain).as_deref(), Some("pi-acp 0.0.34"), "a program that says no version");
        assert_eq!(package_of(Path::new("/nowhere/at/all")), None);
    }

    #[test]
    fn a_range_reads_as_a_person_writes_it() {
        let read = |range: &str| describe(&VersionReq::parse(range).expect("range"));
        assert_eq!(read(">=22.19.0"), "≥ 22.19");
        assert_eq!(read(">=20"), "≥ 20");
        assert_eq!(read(">=18.17.1"), "≥ 18.17.1");
        assert_eq!(read("^20.1"), "^20.1");
    }
}
