//! `ahpd service install|uninstall|status`: the daemon run at login by the platform's service
//! manager (`crate::service`): a systemd user unit on Linux, a launchd agent on macOS.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use super::{fail, find, say, Found, EXIT_CONFLICT, EXIT_USAGE};
use crate::cli::{DaemonArgs, ServiceAction};
use crate::paths::Paths;
use crate::service::{self, Manager, Unit};

/// How long a started service may take to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// Runs `ahpd service …`.
pub async fn run(paths: &Paths, action: &ServiceAction) -> ExitCode {
    let manager = Manager::here();
    let unit_file = match manager.unit_file() {
        Ok(file) => file,
        Err(e) => return fail(EXIT_USAGE, &e.to_string()),
    };
    match action {
        ServiceAction::Install { no_start, daemon } => install(paths, manager, &unit_file, daemon, *no_start).await,
        ServiceAction::Uninstall => uninstall(manager, &unit_file),
        ServiceAction::Status => status(manager, &unit_file),
    }
}

async fn install(
    paths: &Paths,
    manager: Manager,
    unit_file: &std::path::Path,
    daemon: &DaemonArgs,
    no_start: bool,
) -> ExitCode {
    if daemon.stdio {
        return fail(EXIT_USAGE, "--stdio cannot be a service: it serves the process that started it.");
    }
    if daemon.connection_token.is_some() {
        return fail(
            EXIT_USAGE,
            "The unit file would keep the token where it can be read; pass --connection-token-file, or no token option (the daemon makes and keeps one).",
        );
    }
    let plan = match crate::daemon::plan(daemon) {
        Ok(plan) => plan,
        Err(why) => return fail(EXIT_USAGE, &why),
    };
    for warning in &plan.config.warnings {
        eprintln!("warning: {warning}");
    }
    let unit = match unit_for(paths) {
        Ok(unit) => unit,
        Err(why) => return fail(EXIT_CONFLICT, &why),
    };
    if let Err(e) = crate::fsutil::write_private(unit_file, manager.render(&unit).as_bytes()) {
        return fail(EXIT_CONFLICT, &format!("could not write {}: {e}", unit_file.display()));
    }
    let line = std::iter::once(unit.exe.display().to_string()).chain(unit.args.iter().cloned()).collect::<Vec<_>>();
    say(&format!(
        "Wrote {}: {} runs `{}` in {} with your PATH, and restarts it when it fails.",
        unit_file.display(),
        manager.name(),
        service::shown(&line),
        unit.cwd.display()
    ));
    let start = manager.start_commands(unit_file);
    if no_start {
        let commands: Vec<String> = start.iter().map(|c| service::shown(c)).collect();
        say(&format!("Start it now and at every login with: {}", commands.join(" && ")));
        return ExitCode::SUCCESS;
    }
    match find(paths).await {
        Found::Running(status) if status.service.is_none() => {
            return fail(
                EXIT_CONFLICT,
                &format!(
                "ahpd already runs (pid {}); stop it first (ahpd stop) and run this again, or start the service later.",
                status.pid
            ),
            )
        }
        _ => {}
    }
    for command in &start {
        if let Err(why) = service::run(command) {
            return fail(
                EXIT_CONFLICT,
                &format!(
                    "{} did not start it: `{}` said: {why}\nThe unit is written; run that command once your user's service manager runs.",
                    manager.name(),
                    service::shown(command)
                ),
            );
        }
    }
    let answered = super::progress::saying("waiting for the service's ahpd to answer", answer(paths)).await;
    match answered {
        Some(status) => {
            say(&format!("ahpd on {} (pid {}), run by {}", status.url, status.pid, manager.name()));
            ExitCode::SUCCESS
        }
        None => fail(
            EXIT_CONFLICT,
            &format!(
                "{} started it, but it did not answer within {} s; see ahpd logs",
                manager.name(),
                ANSWER_WITHIN.as_secs()
            ),
        ),
    }
}

/// What the unit runs: this binary, the daemon's arguments as given after `install` (less
/// `--no-start`), the `PATH` and folder of now.
fn unit_for(paths: &Paths) -> Result<Unit, String> {
    let exe = std::env::current_exe().map_err(|e| format!("could not find this program's own path: {e}"))?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let cwd = std::env::current_dir().map_err(|e| format!("could not read the current folder: {e}"))?;
    Ok(Unit {
        exe,
        args: daemon_argv().into_iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        path: std::env::var("PATH").unwrap_or_default(),
        cwd,
        output: paths.data_dir.join("service.out"),
    })
}

/// The arguments after `service install`, less `--no-start`.
fn daemon_argv() -> Vec<OsString> {
    let mut args = std::env::args_os().skip(1).skip_while(|a| a != "service").skip(1);
    for arg in args.by_ref() {
        if arg == "install" {
            break;
        }
    }
    args.filter(|a| a != "--no-start").collect()
}

/// Waits for the daemon the manager started to answer.
async fn answer(paths: &Paths) -> Option<crate::control::Status> {
    let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
    while tokio::time::Instant::now() < deadline {
        if let Found::Running(status) = find(paths).await {
            if !status.url.is_empty() {
                return Some(status);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

fn uninstall(manager: Manager, unit_file: &std::path::Path) -> ExitCode {
    if !unit_file.exists() {
        return fail(EXIT_CONFLICT, &format!("No service is installed ({} does not exist).", unit_file.display()));
    }
    for command in manager.stop_commands() {
        if let Err(why) = service::run(&command) {
            eprintln!("`{}` said: {why}", service::shown(&command));
        }
    }
    if let Err(e) = std::fs::remove_file(unit_file) {
        return fail(EXIT_CONFLICT, &format!("could not remove {}: {e}", unit_file.display()));
    }
    for command in manager.forget_commands() {
        let _ = service::run(&command);
    }
    say(&format!("Removed {}; {} no longer runs ahpd.", unit_file.display(), manager.name()));
    ExitCode::SUCCESS
}

fn status(manager: Manager, unit_file: &std::path::Path) -> ExitCode {
    let text = match std::fs::read_to_string(unit_file) {
        Ok(text) => text,
        Err(_) => {
            return fail(
                EXIT_CONFLICT,
                &format!(
                    "No service is installed ({} does not exist); ahpd service install writes one.",
                    unit_file.display()
                ),
            )
        }
    };
    say(&format!("{} unit: {}", manager.name(), unit_file.display()));
    if let Some(exec) = text.lines().find_map(|l| l.strip_prefix("ExecStart=")) {
        say(&format!("runs: {exec}"));
    }
    let state = manager.state_command();
    match service::run(&state) {
        Ok(said) => say(&format!("{} says: {}", manager.name(), said.lines().next().unwrap_or("loaded"))),
        Err(why) => say(&format!("{} says: {}", manager.name(), why.lines().next().unwrap_or_default())),
    }
    ExitCode::SUCCESS
}

/// The manager that runs the daemon `status` describes, when one does.
pub fn manager_of(status: &crate::control::Status) -> Option<Manager> {
    status.service.as_deref().and_then(Manager::named)
}
