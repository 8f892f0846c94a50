//! `ahpd user add|list|rm|token`: manages the users directory file. Needs no running daemon; a
//! running one reads the file again at a connection's next command.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::cli::{UserAction, UserArgs};
use crate::config::Config;
use crate::paths::Paths;
use crate::users::{Users, UsersError};

use super::{fail, say, EXIT_CONFLICT, EXIT_USAGE};

/// Runs `ahpd user …`.
pub fn run(args: &UserArgs) -> ExitCode {
    let (path, configured) = match users_file(args) {
        Ok(found) => found,
        Err(why) => return fail(EXIT_USAGE, &why),
    };
    let mut users = match Users::load(&path) {
        Ok(users) => users,
        Err(e) => return fail(EXIT_USAGE, &e.to_string()),
    };
    match &args.action {
        UserAction::List { json } => list(&users, *json),
        UserAction::Add { id, roles } => {
            if !valid_id(id) {
                return fail(EXIT_USAGE, &format!("{id:?} is not a usable id: use letters, digits, '-', '_' and '.'"));
            }
            let roles = if roles.is_empty() { vec!["guest".to_owned()] } else { roles.clone() };
            let token = match users.add(id, roles.clone()) {
                Ok(token) => token,
                Err(e) => return refuse(&e),
            };
            if let Err(e) = users.save() {
                return fail(EXIT_USAGE, &e.to_string());
            }
            eprintln!("Added {id} ({}) to {}. Their token, shown this once:", roles.join(", "), path.display());
            say(&token);
            if !configured {
                eprintln!(
                    "The daemon does not use this file yet: start it with --users {} (or set \"users\" in its config).",
                    path.display()
                );
            }
            ExitCode::SUCCESS
        }
        UserAction::Rm { id } => {
            if let Err(e) = users.remove(id) {
                return refuse(&e);
            }
            if let Err(e) = users.save() {
                return fail(EXIT_USAGE, &e.to_string());
            }
            eprintln!("Removed {id}; their token no longer works.");
            ExitCode::SUCCESS
        }
        UserAction::Token { id, url } => {
            let token = match users.new_token_for(id) {
                Ok(token) => token,
                Err(e) => return refuse(&e),
            };
            if let Err(e) = users.save() {
                return fail(EXIT_USAGE, &e.to_string());
            }
            eprintln!("A new token for {id}, shown this once (the old one no longer works):");
            if *url {
                match running_url() {
                    Some(base) => say(&format!("{}/?tkn={token}", base.trim_end_matches('/'))),
                    None => {
                        eprintln!("(no daemon runs, so here is the bare token)");
                        say(&token);
                    }
                }
            } else {
                say(&token);
            }
            ExitCode::SUCCESS
        }
    }
}

fn refuse(e: &UsersError) -> ExitCode {
    let code = match e {
        UsersError::UnknownUser(_) | UsersError::Exists(_) => EXIT_CONFLICT,
        _ => EXIT_USAGE,
    };
    fail(code, &e.to_string())
}

fn list(users: &Users, json: bool) -> ExitCode {
    if json {
        let people: Vec<serde_json::Value> =
            users.file.users.iter().map(|u| serde_json::json!({ "id": u.id, "roles": u.roles })).collect();
        say(&serde_json::json!({ "file": users.path, "users": people }).to_string());
        return ExitCode::SUCCESS;
    }
    if users.file.users.is_empty() {
        say(&format!("Nobody in {} (ahpd user add <id> adds a person).", users.path.display()));
    }
    for user in &users.file.users {
        say(&format!("{}\t{}", user.id, user.roles.join(", ")));
    }
    ExitCode::SUCCESS
}

/// The file to manage, and whether the daemon's configuration names it.
fn users_file(args: &UserArgs) -> Result<(PathBuf, bool), String> {
    if let Some(file) = &args.users {
        return Ok((file.clone(), true));
    }
    let paths = Paths::platform().map_err(|e| e.to_string())?;
    let config = Config::load(&paths.config_dir, args.config_file.as_deref()).map_err(|e| e.to_string())?;
    match config.string("users") {
        Some(file) => Ok((PathBuf::from(file), true)),
        None => Ok((paths.config_dir.join("users.json"), false)),
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

fn running_url() -> Option<String> {
    let paths = Paths::platform().ok()?;
    super::remote::running(&paths).ok()?.map(|record| record.url)
}
