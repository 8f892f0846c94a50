//! `ahpd agents [--json]`: the agents `ahpd [options]` offers (configured, or echo and each known
//! agent found on the PATH), the program each runs and its version (what it says, else its npm
//! package's), and why each agent the backend table knows is not offered, and the remote hosts the
//! config names, with each link's state as the running daemon says it. Reads the files itself: no daemon needs to run.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};

use super::{fail, say, EXIT_USAGE};
use crate::agents::{self, Survey};
use crate::cli::AgentsArgs;
use crate::config::Config;
use crate::paths::Paths;

/// Runs `ahpd agents`.
pub fn run(args: &AgentsArgs) -> ExitCode {
    let (config, paths) = match load(args) {
        Ok(loaded) => loaded,
        Err(why) => return fail(EXIT_USAGE, &why),
    };
    let exe = std::env::current_exe().unwrap_or_else(|_| "ahpd".into());
    let survey = agents::survey(&config.get("agents"), &exe, &paths.data_dir, Duration::from_secs(10));
    let versions = versions(&survey);
    let mut shown = as_json(&survey, &versions, config.is_set("agents"));
    shown["remotes"] = Value::Array(remotes(&config, &paths));
    if args.json {
        match serde_json::to_string_pretty(&shown) {
            Ok(text) => say(&text),
            Err(e) => return fail(EXIT_USAGE, &e.to_string()),
        }
    } else {
        for line in as_lines(&shown) {
            say(&line);
        }
    }
    ExitCode::SUCCESS
}

/// Runs `ahpd plugin list`: one line per plugin ahpd ships, saying what would load; asks the
/// computer plugin's engine whether it answers, and starts nothing.
pub fn plugins(args: &AgentsArgs) -> ExitCode {
    let (config, paths) = match load(args) {
        Ok(loaded) => loaded,
        Err(why) => return fail(EXIT_USAGE, &why),
    };
    let computers = crate::confine::computer::Computers::new(
        crate::confine::computer::ComputerSettings::of(&config),
        &paths.data_dir.display().to_string(),
    );
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return fail(EXIT_USAGE, &e.to_string()),
    };
    say(&runtime.block_on(computers.plugin_line()));
    ExitCode::SUCCESS
}

fn load(args: &AgentsArgs) -> Result<(Config, Paths), String> {
    let paths = Paths::platform().map_err(|e| e.to_string())?;
    let config = Config::load(&paths.config_dir, args.config_file.as_deref()).map_err(|e| e.to_string())?;
    Ok((config, paths))
}

/// The configured remote hosts, each with its link's state and agents as the running daemon says
/// them (a daemon that does not run has no links).
fn remotes(config: &Config, paths: &Paths) -> Vec<Value> {
    let specs = crate::remotes::spec::parse(&config.get("remotes")).unwrap_or_default();
    if specs.is_empty() {
        return Vec::new();
    }
    let live: Vec<Value> = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()
        .and_then(|runtime| match runtime.block_on(super::find(paths)) {
            super::Found::Running(status) => Some(status.host.remotes),
            _ => None,
        })
        .unwrap_or_default();
    specs
        .iter()
        .map(|spec| {
            let found = live.iter().find(|r| r["name"] == spec.name.as_str());
            json!({
                "name": spec.name,
                "displayName": spec.display_name,
                "reach": spec.reach.describe(),
                "state": found.map_or(Value::from("not linked: the daemon is not running"), |r| r["state"].clone()),
                "agents": found.map_or(json!([]), |r| r["agents"].clone()),
                "sessions": found.map_or(json!(0), |r| r["sessions"].clone()),
            })
        })
        .collect()
}

/// Each offered agent's program's version, asked of them all at once.
fn versions(survey: &Survey) -> Vec<Option<String>> {
    let programs: Vec<Option<std::path::PathBuf>> =
        survey.offered.iter().map(|p| p.program.as_deref().and_then(agents::find_on_path)).collect();
    std::thread::scope(|scope| {
        let asks: Vec<_> =
            programs.iter().map(|p| scope.spawn(move || p.as_deref().and_then(crate::programs::version_of))).collect();
        asks.into_iter().map(|ask| ask.join().ok().flatten()).collect()
    })
}

/// `{ configured, offered: [{provider, kind, program?, version?, why}], notOffered: [{name, kind, program, why}] }`.
pub fn as_json(survey: &Survey, versions: &[Option<String>], configured: bool) -> Value {
    let offered: Vec<Value> = survey
        .offered
        .iter()
        .zip(versions)
        .map(|(p, version)| {
            let found = p.program.as_deref().and_then(agents::find_on_path);
            json!({
                "provider": p.spec.provider,
                "kind": p.spec.kind,
                "program": found.as_ref().map(|f| f.display().to_string()).or_else(|| p.program.clone()),
                "found": p.program.is_none() || found.is_some(),
                "version": version,
                "why": p.why,
            })
        })
        .collect();
    let passed: Vec<Value> = survey
        .passed
        .iter()
        .map(|p| json!({ "name": p.name, "kind": p.kind, "program": p.program, "why": p.why }))
        .collect();
    json!({ "configured": configured, "offered": offered, "notOffered": passed })
}

/// The lines a person reads.
pub fn as_lines(shown: &Value) -> Vec<String> {
    let list = |key: &str| shown[key].as_array().cloned().unwrap_or_default();
    let text = |v: &Value, key: &str| v[key].as_str().unwrap_or_default().to_owned();
    let mut lines = vec![if shown["configured"] == true {
        "Offered (the config's agents):".to_owned()
    } else {
        "Offered (no agents in the config: echo, and each known agent found on the PATH):".to_owned()
    }];
    let offered = list("offered");
    let width = offered.iter().map(|a| text(a, "provider").len()).max().unwrap_or(0);
    for agent in &offered {
        let program = match agent["program"].as_str() {
            None => "built in".to_owned(),
            Some(program) if agent["found"] == false => format!("{program} (not found on the PATH)"),
            Some(program) => program.to_owned(),
        };
        let version = agent["version"].as_str().map(|v| format!(", {v}")).unwrap_or_default();
        lines.push(format!("  {:<width$}  {:<6}  {program}{version}", text(agent, "provider"), text(agent, "kind")));
    }
    let remotes = list("remotes");
    if !remotes.is_empty() {
        lines.push("Remote hosts (their agents offered here as <agent>@<name>):".to_owned());
        lines.extend(remotes.iter().map(|r| format!("  {}", super::status::remote_line(r))));
    }
    let passed = list("notOffered");
    if !passed.is_empty() {
        lines.push("Not offered:".to_owned());
        let width = passed.iter().map(|a| text(a, "name").len()).max().unwrap_or(0);
        for agent in &passed {
            lines.push(format!(
                "  {:<width$}  {:<6}  {}",
                text(agent, "name"),
                text(agent, "kind"),
                text(agent, "why")
            ));
        }
    }
    lines
}
