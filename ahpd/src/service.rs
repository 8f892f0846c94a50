//! Running the daemon at login under the platform's service manager: a systemd user unit on Linux,
//! a launchd agent on macOS. The unit runs this binary in the foreground with the line it was
//! installed with, the person's `PATH` as it was at install (so agent CLIs in `~/.local/bin` or a
//! version manager are found), `AHPD_SERVICE` naming the manager (the daemon then logs to its
//! rotated `daemon.log`, and `ahpd restart` asks the manager), and a restart on failure.
//!
//! The manager's command line tool can be replaced with `AHPD_SYSTEMCTL` / `AHPD_LAUNCHCTL` (the
//! tests use a stand-in; nothing here needs a running manager to write or read a unit).

use std::path::{Path, PathBuf};

use crate::control::server::SERVICE_ENV;

/// The unit's name (systemd) and label (launchd).
pub const NAME: &str = "ahpd";

/// A service manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    /// systemd's user instance (Linux).
    Systemd,
    /// launchd's per-user agents (macOS).
    Launchd,
}

/// What a unit runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Unit {
    /// This binary.
    pub exe: PathBuf,
    /// The daemon's arguments.
    pub args: Vec<String>,
    /// The `PATH` it runs with.
    pub path: String,
    /// The folder it runs in.
    pub cwd: PathBuf,
    /// Where launchd writes what the daemon says before its log is open.
    pub output: PathBuf,
}

impl Manager {
    /// This platform's manager.
    pub fn here() -> Self {
        if cfg!(target_os = "macos") {
            Manager::Launchd
        } else {
            Manager::Systemd
        }
    }

    /// The manager by the name `AHPD_SERVICE` carries.
    pub fn named(name: &str) -> Option<Self> {
        [Manager::Systemd, Manager::Launchd].into_iter().find(|m| m.name() == name)
    }

    /// Its name, as `AHPD_SERVICE` carries it.
    pub fn name(self) -> &'static str {
        match self {
            Manager::Systemd => "systemd",
            Manager::Launchd => "launchd",
        }
    }

    /// Where its unit file lives: `~/.config/systemd/user/ahpd.service` (`$XDG_CONFIG_HOME`
    /// honoured), `~/Library/LaunchAgents/ahpd.plist`.
    pub fn unit_file(self) -> anyhow::Result<PathBuf> {
        let dirs = directories::BaseDirs::new()
            .ok_or_else(|| anyhow::anyhow!("could not find a home folder for the service's unit"))?;
        Ok(match self {
            Manager::Systemd => dirs.config_dir().join("systemd").join("user").join(format!("{NAME}.service")),
            Manager::Launchd => dirs.home_dir().join("Library").join("LaunchAgents").join(format!("{NAME}.plist")),
        })
    }

    /// The unit file's text.
    pub fn render(self, unit: &Unit) -> String {
        match self {
            Manager::Systemd => systemd_unit(unit),
            Manager::Launchd => launchd_plist(unit),
        }
    }

    fn tool(self) -> String {
        let (var, default) = match self {
            Manager::Systemd => ("AHPD_SYSTEMCTL", "systemctl"),
            Manager::Launchd => ("AHPD_LAUNCHCTL", "launchctl"),
        };
        std::env::var(var).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_owned())
    }

    fn command(self, args: &[&str]) -> Vec<String> {
        std::iter::once(self.tool()).chain(args.iter().map(|a| (*a).to_owned())).collect()
    }

    fn domain() -> String {
        format!("gui/{}", nix::unistd::getuid())
    }

    /// The commands that load the unit and start it now and at every login.
    pub fn start_commands(self, unit_file: &Path) -> Vec<Vec<String>> {
        let service = format!("{NAME}.service");
        match self {
            Manager::Systemd => {
                vec![self.command(&["--user", "daemon-reload"]), self.command(&["--user", "enable", "--now", &service])]
            }
            Manager::Launchd => {
                vec![self.command(&["bootstrap", &Self::domain(), &unit_file.display().to_string()])]
            }
        }
    }

    /// The commands that stop it and keep it from starting at login.
    pub fn stop_commands(self) -> Vec<Vec<String>> {
        match self {
            Manager::Systemd => vec![self.command(&["--user", "disable", "--now", &format!("{NAME}.service")])],
            Manager::Launchd => vec![self.command(&["bootout", &format!("{}/{NAME}", Self::domain())])],
        }
    }

    /// The command that makes it forget a removed unit.
    pub fn forget_commands(self) -> Vec<Vec<String>> {
        match self {
            Manager::Systemd => vec![self.command(&["--user", "daemon-reload"])],
            Manager::Launchd => Vec::new(),
        }
    }

    /// The command that restarts the daemon it runs.
    pub fn restart_command(self) -> Vec<String> {
        match self {
            Manager::Systemd => self.command(&["--user", "restart", &format!("{NAME}.service")]),
            Manager::Launchd => self.command(&["kickstart", "-k", &format!("{}/{NAME}", Self::domain())]),
        }
    }

    /// The command that says whether it runs.
    pub fn state_command(self) -> Vec<String> {
        match self {
            Manager::Systemd => self.command(&["--user", "is-active", &format!("{NAME}.service")]),
            Manager::Launchd => self.command(&["print", &format!("{}/{NAME}", Self::domain())]),
        }
    }
}

/// A command as a person would type it.
pub fn shown(command: &[String]) -> String {
    command
        .iter()
        .map(|a| if a.contains(char::is_whitespace) { format!("'{a}'") } else { a.clone() })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs a manager command; answers what it said when it failed.
pub fn run(command: &[String]) -> Result<String, String> {
    let Some((program, args)) = command.split_first() else {
        return Err("no command".into());
    };
    let mut manager = std::process::Command::new(program);
    manager.args(args).stdin(std::process::Stdio::null());
    let output = agent_runner::child::run_to_end(manager).map_err(|e| format!("could not run {program}: {e}"))?;
    let said = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_owned();
    if output.status.success() {
        Ok(said(&output.stdout))
    } else {
        let why = [said(&output.stderr), said(&output.stdout)].into_iter().find(|s| !s.is_empty());
        Err(why.unwrap_or_else(|| format!("it exited ({})", output.status)))
    }
}

/// A word of a systemd command line: quoted, with `\`, `"`, specifiers (`%`) and variables (`$`)
/// kept literal.
fn systemd_word(word: &str, in_exec: bool) -> String {
    let mut quoted = String::from("\"");
    for c in word.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '"' => quoted.push_str("\\\""),
            '%' => quoted.push_str("%%"),
            '$' if in_exec => quoted.push_str("$$"),
            other => quoted.push(other),
        }
    }
    quoted.push('"');
    quoted
}

fn systemd_unit(unit: &Unit) -> String {
    let exec: Vec<String> = std::iter::once(unit.exe.display().to_string())
        .chain(unit.args.iter().cloned())
        .map(|w| systemd_word(&w, true))
        .collect();
    format!(
        "# Written by `ahpd service install`; `ahpd service uninstall` removes it.\n\
         [Unit]\n\
         Description=ahpd: coding agents served over the Agent Host Protocol\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={exec}\n\
         Environment={path}\n\
         Environment={service}\n\
         WorkingDirectory={cwd}\n\
         Restart=on-failure\n\
         RestartSec=2\n\
         # SIGTERM to the daemon alone: it stops its workers itself, then exits.\n\
         KillMode=mixed\n\
         TimeoutStopSec=30\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        exec = exec.join(" "),
        path = systemd_word(&format!("PATH={}", unit.path), false),
        service = systemd_word(&format!("{SERVICE_ENV}=systemd"), false),
        cwd = systemd_word(&unit.cwd.display().to_string(), false),
    )
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn launchd_plist(unit: &Unit) -> String {
    let args: String = std::iter::once(unit.exe.display().to_string())
        .chain(unit.args.iter().cloned())
        .map(|a| format!("\n    <string>{}</string>", xml(&a)))
        .collect();
    let output = xml(&unit.output.display().to_string());
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by `ahpd service install`; `ahpd service uninstall` removes it. -->
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>{NAME}</string>
  <key>ProgramArguments</key>
  <array>{args}
  </array>
  <key>EnvironmentVariables</key>
  <dict>
    <key>PATH</key>
    <string>{path}</string>
    <key>{SERVICE_ENV}</key>
    <string>launchd</string>
  </dict>
  <key>WorkingDirectory</key>
  <string>{cwd}</string>
  <key>RunAtLoad</key>
  <true/>
  <key>KeepAlive</key>
  <dict>
    <key>SuccessfulExit</key>
    <false/>
  </dict>
  <key>StandardOutPath</key>
  <string>{output}</string>
  <key>StandardErrorPath</key>
  <string>{output}</string>
</dict>
</plist>
"#,
        path = xml(&unit.path),
        cwd = xml(&unit.cwd.display().to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit() -> Unit {
        Unit {
            exe: PathBuf::from("/home/me/.cargo/bin/ahpd"),
            args: vec!["--port".into(), "9187".into(), "--config-file".into(), "/home/me/my ahpd/50%.json".into()],
            path: "/home/me/.local/bin:/usr/bin".into(),
            cwd: PathBuf::from("/home/me"),
            output: PathBuf::from("/home/me/.local/share/ahpd/service.out"),
        }
    }

    #[test]
    fn a_systemd_unit_runs_this_binary_with_the_captured_path() {
        let text = Manager::Systemd.render(&unit());
        assert!(text.contains(
            "ExecStart=\"/home/me/.cargo/bin/ahpd\" \"--port\" \"9187\" \"--config-file\" \"/home/me/my ahpd/50%%.json\"\n"
        ));
        assert!(text.contains("Environment=\"PATH=/home/me/.local/bin:/usr/bin\"\n"), "{text}");
        assert!(text.contains("Environment=\"AHPD_SERVICE=systemd\"\n"), "{text}");
        assert!(text.contains("Restart=on-failure\n"), "{text}");
        assert!(text.contains("WantedBy=default.target\n"), "{text}");
        assert_eq!(systemd_word("a$b\"c\\", true), "\"a$$b\\\"c\\\\\"");
    }

    #[test]
    fn a_launchd_agent_runs_this_binary_with_the_captured_path() {
        let text = Manager::Launchd.render(&unit());
        assert!(text.contains("<string>/home/me/.cargo/bin/ahpd</string>\n    <string>--port</string>"), "{text}");
        assert!(text.contains("<key>PATH</key>\n    <string>/home/me/.local/bin:/usr/bin</string>"), "{text}");
        assert!(text.contains("<key>AHPD_SERVICE</key>\n    <string>launchd</string>"), "{text}");
        assert!(text.contains("<key>SuccessfulExit</key>\n    <false/>"), "{text}");
        assert_eq!(xml("a<b&\"c\""), "a&lt;b&amp;&quot;c&quot;");
    }

    #[test]
    fn the_manager_is_named_as_the_daemon_is_told() {
        for manager in [Manager::Systemd, Manager::Launchd] {
            assert_eq!(Manager::named(manager.name()), Some(manager));
        }
        assert_eq!(shown(&["systemctl".into(), "--user".into(), "a b".into()]), "systemctl --user 'a b'");
    }
}
