//! `ahpd store check|backup|restore`: the session store checked without writing to it, backed up
//! now, or put back from a backup while no daemon runs (docs/security.md, "The store under
//! faults"). While a daemon runs on the store it is the one process that may open it, so a check
//! or a backup of it is asked of the daemon over the control socket.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::{StoreAction, StoreArgs};
use crate::config::Config;
use crate::control::client::AskError;
use crate::control::{Checked, Reply, Request};
use crate::paths::Paths;
use crate::store::{backup, recovery};

use super::{fail, say, EXIT_CONFLICT, EXIT_USAGE};

/// Runs `ahpd store …`.
pub async fn run(paths: &Paths, args: &StoreArgs) -> ExitCode {
    match &args.action {
        StoreAction::Check { file, json } => {
            let store = paths.store();
            let file = file.clone().unwrap_or_else(|| store.clone());
            check(paths, &file, *json, same_file(&file, &store)).await
        }
        StoreAction::Backup { to } => {
            let config = match Config::load(&paths.config_dir, args.config_file.as_deref()) {
                Ok(config) => config,
                Err(e) => return fail(EXIT_USAGE, &e.to_string()),
            };
            back_up(paths, &config, to.as_deref()).await
        }
        StoreAction::Restore { file } => match file {
            Some(file) => restore(paths, file).await,
            None => list_backups(paths),
        },
    }
}

/// True when `a` and `b` name one file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// How long a daemon is given to check or back up its store for a verb.
const STORE_WORK_WITHIN: Duration = Duration::from_secs(600);

/// Asks the daemon running on `paths` to do `request`, the one process that may open its store
/// while it runs. `None` when no daemon answers (the verb does it itself); a daemon that does not
/// know the request (an older one, which did not hold its store alone) is `None` too.
async fn ask_the_daemon(paths: &Paths, request: &Request) -> Option<Result<Reply, String>> {
    match crate::control::client::ask(&paths.socket(), request, STORE_WORK_WITHIN).await {
        Ok(reply) if !reply.ok && reply.error.as_deref().is_some_and(|e| e.starts_with("not a control request")) => {
            None
        }
        Ok(reply) => Some(Ok(reply)),
        Err(AskError::NotListening(..)) => None,
        Err(e) => Some(Err(e.to_string())),
    }
}

/// `ahpd store check [FILE] [--json]`; the store itself is told what becomes of it, and checked by
/// the daemon when one runs on it.
async fn check(paths: &Paths, file: &Path, json: bool, is_the_store: bool) -> ExitCode {
    if !file.is_file() {
        return fail(EXIT_USAGE, &format!("There is no store at {}.", file.display()));
    }
    let by_daemon = if is_the_store { ask_the_daemon(paths, &Request::StoreCheck).await } else { None };
    let checked = match by_daemon {
        Some(Ok(Reply { ok: true, checked: Some(checked), .. })) => Ok(checked),
        Some(Ok(reply)) => Err(reply.error.unwrap_or_else(|| "the daemon did not say".into())),
        Some(Err(why)) => Err(why),
        None => recovery::check(file, recovery::Depth::Full).map_err(|e| e.to_string()).map(|problems| {
            let counts = if problems.is_empty() { recovery::counts(file).ok() } else { None };
            Checked { problems, counts }
        }),
    };
    let Checked { problems, counts } = match checked {
        Ok(checked) => checked,
        Err(e) => return fail(EXIT_CONFLICT, &format!("Could not check {}: {e}", file.display())),
    };
    if json {
        let (sessions, chats, turns) = counts.unwrap_or_default();
        let answer = serde_json::json!({
            "file": file,
            "sound": problems.is_empty(),
            "problems": problems,
            "sessions": sessions,
            "chats": chats,
            "turns": turns,
        });
        say(&answer.to_string());
    } else if problems.is_empty() {
        let (sessions, chats, turns) = counts.unwrap_or_default();
        say(&format!("{} is sound: {sessions} sessions, {chats} chats, {turns} turns.", file.display()));
    } else {
        say(&format!("{} is damaged:", file.display()));
        for problem in &problems {
            say(&format!("  {problem}"));
        }
        if is_the_store {
            eprintln!(
                "A daemon started on it moves it aside and recovers what can be read; `ahpd store restore` puts a backup in its place."
            );
        }
    }
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_CONFLICT)
    }
}

/// `ahpd store backup [--to FILE]`: taken by the daemon when one runs on the store.
async fn back_up(paths: &Paths, config: &Config, to: Option<&Path>) -> ExitCode {
    let store = paths.store();
    if !store.is_file() {
        return fail(EXIT_CONFLICT, &format!("There is no session store at {} yet.", store.display()));
    }
    // Made absolute here: the daemon runs in a folder of its own.
    let to = match to.map(std::path::absolute).transpose() {
        Ok(to) => to,
        Err(e) => return fail(EXIT_USAGE, &format!("Could not read the path given to --to: {e}")),
    };
    if let Some(to) = to.as_deref().filter(|to| to.symlink_metadata().is_ok()) {
        return fail(EXIT_USAGE, &format!("{} exists already; name a new file.", to.display()));
    }
    let taken = match ask_the_daemon(paths, &Request::StoreBackup { to: to.clone() }).await {
        Some(Ok(Reply { ok: true, backup: Some(file), .. })) => Ok(file),
        Some(Ok(reply)) => Err(reply.error.unwrap_or_else(|| "the daemon did not say".into())),
        Some(Err(why)) => Err(why),
        None => {
            let keep = usize::try_from(config.u64("storeBackups")).unwrap_or(1);
            backup::take_now(&store, &backup::folder(&paths.data_dir), keep, to.as_deref())
        }
    };
    match taken {
        Ok(file) => {
            say(&file.display().to_string());
            ExitCode::SUCCESS
        }
        Err(why) => fail(EXIT_CONFLICT, &why),
    }
}

/// `ahpd store restore` with no file: what there is to restore.
fn list_backups(paths: &Paths) -> ExitCode {
    let folder = backup::folder(&paths.data_dir);
    let found = backup::list(&folder);
    if found.is_empty() {
        return fail(EXIT_USAGE, &format!("Name the backup to restore; there are none in {}.", folder.display()));
    }
    eprintln!("Name the backup to restore (ahpd store restore FILE); newest first:");
    for file in &found {
        say(&file.display().to_string());
    }
    ExitCode::from(EXIT_USAGE)
}

/// The backup `file` names: a path, or a name in the backups folder.
fn backup_file(paths: &Paths, file: &Path) -> Option<PathBuf> {
    if file.is_file() {
        return Some(file.to_owned());
    }
    let named = backup::folder(&paths.data_dir).join(file);
    (file.components().count() == 1 && named.is_file()).then_some(named)
}

/// `ahpd store restore FILE`.
async fn restore(paths: &Paths, file: &Path) -> ExitCode {
    let Some(file) = backup_file(paths, file) else {
        return fail(EXIT_USAGE, &format!("There is no backup at {}.", file.display()));
    };
    match recovery::check(&file, recovery::Depth::Full) {
        Ok(problems) if problems.is_empty() => {}
        Ok(problems) => {
            return fail(
                EXIT_CONFLICT,
                &format!("{} is damaged ({}); nothing was restored.", file.display(), problems.join("; ")),
            )
        }
        Err(e) => return fail(EXIT_CONFLICT, &format!("Could not check {}: {e}", file.display())),
    }
    if let Err(e) = crate::fsutil::create_private_dir(&paths.data_dir) {
        return fail(EXIT_CONFLICT, &format!("Could not create {}: {e}", paths.data_dir.display()));
    }
    // Holding the control socket keeps a daemon from starting on the store while it is replaced.
    let claimed = match crate::control::server::claim(paths).await {
        Ok(claimed) => claimed,
        Err(crate::control::server::ClaimError::Taken { who, .. }) => {
            return fail(
                EXIT_CONFLICT,
                &format!("ahpd runs on {} ({who}); stop it first (ahpd stop), then restore.", paths.data_dir.display()),
            )
        }
        Err(e) => return fail(EXIT_CONFLICT, &e.to_string()),
    };
    let result = put_in_place(&paths.store(), &file);
    drop(claimed);
    match result {
        Ok(replaced) => {
            let (sessions, chats, turns) = recovery::counts(&paths.store()).unwrap_or_default();
            say(&format!("Restored {}: {sessions} sessions, {chats} chats, {turns} turns.", file.display()));
            if let Some(replaced) = replaced {
                say(&format!("The store it replaced is kept as {}.", replaced.display()));
            }
            ExitCode::SUCCESS
        }
        Err(why) => fail(EXIT_CONFLICT, &why),
    }
}

/// Copies `backup` in the place of the store at `store`, moving that aside first; answers where
/// it went.
fn put_in_place(store: &Path, backup: &Path) -> Result<Option<PathBuf>, String> {
    let name = store.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let copy = store.with_file_name(format!(".{name}.restoring"));
    let _ = std::fs::remove_file(&copy);
    backup::take(backup, &copy).map_err(|e| e.to_string())?;
    let replaced = if store.symlink_metadata().is_ok() {
        let aside = recovery::aside_name(store, "replaced");
        recovery::move_store(store, &aside).map_err(|e| e.to_string())?;
        Some(aside)
    } else {
        None
    };
    std::fs::rename(&copy, store).map_err(|e| format!("could not put {} in place: {e}", copy.display()))?;
    if let Some(dir) = store.parent().and_then(|d| std::fs::File::open(d).ok()) {
        let _ = dir.sync_all();
    }
    Ok(replaced)
}
