//! `ahpd config [--json]`: the configuration `ahpd [options]` runs with, key by key, with the
//! file, flag or default that set each one and when a change applies; credentials as `<set>`; and
//! the platform's folders it reads and keeps things in.
//! Reads the files itself: no daemon needs to run.

use std::process::ExitCode;

use serde_json::{json, Map, Value};

use super::{fail, say, EXIT_USAGE};
use crate::cli::ConfigArgs;
use crate::config::{self, Applies, Config, Source};
use crate::paths::Paths;

/// Runs `ahpd config`.
pub fn run(args: &ConfigArgs) -> ExitCode {
    let (config, paths) = match load(args) {
        Ok(loaded) => loaded,
        Err(why) => return fail(EXIT_USAGE, &why),
    };
    if args.json {
        let mut shown = as_json(&config);
        shown["folders"] = json!({ "config": paths.config_dir, "data": paths.data_dir });
        match serde_json::to_string_pretty(&shown) {
            Ok(text) => say(&text),
            Err(e) => return fail(EXIT_USAGE, &e.to_string()),
        }
    } else {
        let mut lines = as_lines(&config).into_iter();
        if let Some(files) = lines.next() {
            say(&files);
        }
        say(&format!("folders: config {}, data {}", paths.config_dir.display(), paths.data_dir.display()));
        for line in lines {
            say(&line);
        }
        for warning in &config.warnings {
            eprintln!("warning: {warning}");
        }
    }
    ExitCode::SUCCESS
}

fn load(args: &ConfigArgs) -> Result<(Config, Paths), String> {
    let paths = Paths::platform().map_err(|e| e.to_string())?;
    let mut config = Config::load(&paths.config_dir, args.daemon.config_file.as_deref()).map_err(|e| e.to_string())?;
    crate::daemon::apply_flags(&mut config, &args.daemon).map_err(|e| e.to_string())?;
    Ok((config, paths))
}

fn applies(name: &str) -> &'static str {
    match config::key(name).map(|k| k.applies) {
        Some(Applies::Live) => "live",
        _ => "restart",
    }
}

/// `{ files, config, sources, applies, warnings }`.
pub fn as_json(config: &Config) -> Value {
    let mut values = Map::new();
    let mut sources = Map::new();
    let mut when = Map::new();
    for (name, value, source) in config.shown() {
        sources.insert(name.clone(), Value::from(source.to_string()));
        when.insert(name.clone(), Value::from(applies(&name)));
        values.insert(name, value);
    }
    json!({
        "files": config.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
        "config": values,
        "sources": sources,
        "applies": when,
        "warnings": config.warnings,
    })
}

/// The lines a person reads: the files, then one line per key.
pub fn as_lines(config: &Config) -> Vec<String> {
    let files: Vec<String> = config.files.iter().map(|f| f.display().to_string()).collect();
    let mut lines =
        vec![format!("files read: {}", if files.is_empty() { "none (defaults)".to_owned() } else { files.join(", ") })];
    let shown = config.shown();
    let width = shown.iter().map(|(name, _, _)| name.len()).max().unwrap_or(0);
    let rendered: Vec<String> = shown.iter().map(|(_, value, _)| render(value)).collect();
    let value_width = rendered.iter().map(String::len).filter(|n| *n <= 32).max().unwrap_or(0);
    for ((name, _, source), value) in shown.iter().zip(&rendered) {
        let from = match source {
            Source::Default => "default".to_owned(),
            other => format!("from {other}"),
        };
        lines.push(format!("{name:<width$}  {value:<value_width$}  {from}, applies on {}", applies(name)));
    }
    lines
}

/// A value as a person reads it: strings bare, nothing as `-`, the rest as compact JSON.
fn render(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_says_its_value_source_and_when_it_applies() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("c.json");
        std::fs::write(&file, r#"{"connectionToken": "s3cret", "replayBufferSize": 2000}"#).expect("write");
        let mut config = Config::load(dir.path(), Some(&file)).expect("loads");
        config.set_flag("port", Value::from(0)).expect("flag");
        let shown = as_json(&config);
        assert_eq!(shown["config"]["connectionToken"], "<set>");
        assert_eq!(shown["sources"]["connectionToken"], file.display().to_string());
        assert_eq!(shown["config"]["port"], 0);
        assert_eq!(shown["sources"]["port"], "command line");
        assert_eq!(shown["sources"]["clientToolTimeoutMs"], "default");
        assert_eq!(shown["applies"]["advancedTools"], "live");
        assert_eq!(shown["applies"]["replayBufferSize"], "restart");
        let text = as_lines(&config).join("\n");
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains(&format!("files read: {}", file.display())), "{text}");
        let token = text.lines().find(|l| l.starts_with("connectionToken")).expect("token line");
        assert!(token.contains("<set>") && token.contains("from "), "{token}");
    }
}
