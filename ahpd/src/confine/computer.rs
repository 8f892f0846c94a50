//! The computer plugin (seed 000): disposable computers an agent asks for, as containers on a
//! container engine (`engine.rs`), each a session's own, released with it. The three tools that
//! reach it (`crate::tools::computer`) declare advanced permission; this is what they do, in the
//! sentences `../shared/research/ahpd-reference.md` §5.4 gives.
//!
//! Configured by `plugins.computer` (`enabled`, `options.engine`, `options.image`,
//! `options.cpus`, `options.memory`) and `computersMax`; `ahpd plugin list` says what would load
//! ([`Computers::plugin_line`]).

use std::collections::BTreeMap;
use std::sync::Mutex;

use agent_runner::sync::lock;
use serde_json::{json, Value};

use super::engine::{ContainerEngine, Make, LABEL_KIND, LABEL_SESSION};

/// The URI scheme of a computer.
pub const SCHEME: &str = "computer://";

/// The most a command's output keeps, as seed 003 bounds a call's output.
pub const OUTPUT_LIMIT: usize = 64 * 1024;

/// What the plugin is configured with.
#[derive(Debug, Clone, PartialEq)]
pub struct ComputerSettings {
    /// `plugins.computer` is present.
    pub configured: bool,
    /// `plugins.computer.enabled` (default true once configured).
    pub enabled: bool,
    /// Where the engine is (`options.engine`, else the default one).
    pub engine: String,
    /// The image a computer runs when its call names none (`options.image`).
    pub image: Option<String>,
    /// CPUs and memory (bytes) a computer gets when its call names none.
    pub cpus: Option<f64>,
    /// Memory in bytes.
    pub memory: Option<i64>,
    /// `computersMax`.
    pub max: usize,
}

impl ComputerSettings {
    /// From the config: `plugins.computer` and `computersMax`.
    pub fn of(config: &crate::config::Config) -> Self {
        let entry = config.get("plugins").get("computer").cloned();
        let options = entry.as_ref().map(|e| e["options"].clone()).unwrap_or(Value::Null);
        Self {
            configured: entry.is_some(),
            enabled: entry.as_ref().is_some_and(|e| e["enabled"].as_bool().unwrap_or(true)),
            engine: options["engine"].as_str().map(str::to_owned).unwrap_or_else(super::engine::default_url),
            image: options["image"].as_str().map(str::to_owned),
            cpus: options["cpus"].as_f64(),
            memory: options["memory"].as_str().and_then(parse_memory).or_else(|| options["memory"].as_i64()),
            max: usize::try_from(config.u64("computersMax")).unwrap_or(usize::MAX),
        }
    }
}

/// `512m`, `2g`, `1024k` or a number of bytes.
pub fn parse_memory(text: &str) -> Option<i64> {
    let text = text.trim().to_ascii_lowercase();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit() && *c != '.') {
        Some((at, _)) => text.split_at(at),
        None => (text.as_str(), ""),
    };
    let number: f64 = digits.parse().ok()?;
    let scale = match unit.trim_end_matches('b') {
        "" => 1.0,
        "k" => 1024.0,
        "m" => 1024.0 * 1024.0,
        "g" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((number * scale) as i64)
}

/// One computer.
#[derive(Debug, Clone)]
struct Computer {
    container: String,
    image: String,
    session: Option<String>,
    cpus: Option<f64>,
    memory: Option<i64>,
}

/// What a computer request names.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Its image (else the configured one).
    pub image: Option<String>,
    /// CPUs (`"2"`).
    pub cpus: Option<String>,
    /// Memory (`"512m"`).
    pub memory: Option<String>,
    /// Its name (else one is made).
    pub name: Option<String>,
    /// The session asking.
    pub session: Option<String>,
}

/// The plugin: its settings, its engine, and the computers it made.
pub struct Computers {
    settings: ComputerSettings,
    engine: Result<ContainerEngine, String>,
    live: Mutex<BTreeMap<String, Computer>>,
}

impl Computers {
    /// The plugin as configured; computers made by the daemon owning `owner` (its data folder).
    pub fn new(settings: ComputerSettings, owner: &str) -> Self {
        let engine = ContainerEngine::connect(&settings.engine, owner);
        Self { settings, engine, live: Mutex::default() }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Computer>> {
        lock(&self.live)
    }

    fn engine(&self) -> Result<&ContainerEngine, String> {
        self.engine.as_ref().map_err(Clone::clone)
    }

    /// The line `ahpd plugin list` prints: `computer: ready (…)`, `disabled`, `unconfigured`, or
    /// `missing: no container engine answered at …`. Asks the engine; starts nothing.
    pub async fn plugin_line(&self) -> String {
        if !self.settings.configured {
            return "computer: unconfigured (set plugins.computer to turn it on)".into();
        }
        if !self.settings.enabled {
            return "computer: disabled".into();
        }
        let answered = match self.engine() {
            Ok(engine) => engine.ping().await,
            Err(why) => Err(why),
        };
        match answered {
            Ok(()) => format!(
                "computer: ready (engine {}, image {})",
                self.settings.engine,
                self.settings.image.as_deref().unwrap_or("named by each request")
            ),
            Err(_) => format!("computer: missing: no container engine answered at {}", self.settings.engine),
        }
    }

    /// `request_disposable_computer`.
    pub async fn request(&self, request: Request) -> Result<String, String> {
        let engine = self.engine()?;
        let name =
            request.name.clone().unwrap_or_else(|| format!("c{}", &uuid::Uuid::new_v4().simple().to_string()[..8]));
        {
            let live = self.live();
            if live.contains_key(&name) {
                return Err(format!("There is already a computer called {name}."));
            }
            if live.len() >= self.settings.max {
                let names: Vec<String> = live.keys().map(|n| format!("{SCHEME}{n}")).collect();
                return Err(format!(
                    "There are already {} computers, which is the most this host will have. Release one first: {}",
                    live.len(),
                    names.join(", ")
                ));
            }
        }
        let image = request.image.clone().or_else(|| self.settings.image.clone()).ok_or(
            "Which image? This host names no default image for computers (plugins.computer.options.image); give one.",
        )?;
        let cpus = match request.cpus.as_deref() {
            Some(c) => Some(c.trim().parse().map_err(|_| format!("{c} is not a number of CPUs."))?),
            None => self.settings.cpus,
        };
        let memory = match request.memory.as_deref() {
            Some(m) => Some(parse_memory(m).ok_or_else(|| format!("{m} is not an amount of memory (512m, 2g)."))?),
            None => self.settings.memory,
        };
        let mut labels = std::collections::HashMap::from([(LABEL_KIND.to_owned(), "computer".to_owned())]);
        if let Some(session) = &request.session {
            labels.insert(LABEL_SESSION.to_owned(), session.clone());
        }
        let make = Make {
            image: image.clone(),
            name: format!("ahpd-computer-{name}-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]),
            labels,
            cpus,
            memory,
            binds: Vec::new(),
            cmd: vec!["sleep".into(), "infinity".into()],
            network: None,
        };
        // Held while the engine makes it, so two requests cannot both take the last place.
        self.live().insert(
            name.clone(),
            Computer { container: String::new(), image: image.clone(), session: request.session.clone(), cpus, memory },
        );
        match engine.make(&make).await {
            Ok(container) => {
                if let Some(computer) = self.live().get_mut(&name) {
                    computer.container = container;
                }
                Ok(format!(
                    "{SCHEME}{name} is running on {image}. Read {SCHEME}{name}/status for what it is, or run something in it with run_in_computer."
                ))
            }
            Err(why) => {
                self.live().remove(&name);
                Err(format!("No computer could be made on {image}: {why}"))
            }
        }
    }

    /// The name a call gives, from `id` or its `computer://` URI.
    pub fn name_of(id: &str) -> &str {
        let id = id.trim();
        let id = id.strip_prefix(SCHEME).unwrap_or(id);
        id.strip_suffix("/status").unwrap_or(id)
    }

    /// `release_computer`.
    pub async fn release(&self, id: &str) -> Result<String, String> {
        let name = Self::name_of(id);
        if name.is_empty() {
            return Err("Which computer? Give the name from its computer:// URI.".into());
        }
        let Some(computer) = self.live().remove(name) else {
            return Err(format!("There is no computer called {name}."));
        };
        if let Ok(engine) = self.engine() {
            if let Err(e) = engine.remove(&computer.container).await {
                tracing::warn!("the computer {name}'s container could not be removed: {e}");
            }
        }
        Ok(format!("{name} is gone."))
    }

    /// `run_in_computer`: `<output>\n\nexit <code>`, or `exit <code>` when it printed nothing.
    pub async fn run(&self, id: &str, command: &str) -> Result<String, String> {
        let name = Self::name_of(id);
        let container = self
            .live()
            .get(name)
            .map(|c| c.container.clone())
            .ok_or_else(|| format!("There is no computer called {name}."))?;
        let engine = self.engine()?;
        let argv = vec!["sh".into(), "-lc".into(), command.to_owned()];
        let (output, code) = engine.exec(&container, argv, OUTPUT_LIMIT).await?;
        Ok(if output.is_empty() { format!("exit {code}") } else { format!("{output}\n\nexit {code}") })
    }

    /// What `computer://<id>` and `computer://<id>/status` read as.
    pub async fn status(&self, id: &str) -> Option<Value> {
        let name = Self::name_of(id);
        let computer = self.live().get(name).cloned()?;
        let usage = match self.engine() {
            Ok(engine) => engine.usage(&computer.container).await,
            Err(_) => None,
        };
        Some(json!({
            "uri": format!("{SCHEME}{name}"),
            "image": computer.image,
            "engine": self.settings.engine,
            "container": computer.container,
            "session": computer.session,
            "cpus": computer.cpus,
            "memoryLimitBytes": computer.memory,
            "memoryBytes": usage.map(|u| u.0),
            "cpuNanoseconds": usage.map(|u| u.1),
            "state": "running",
        }))
    }

    /// Every computer `session` made goes with it.
    pub async fn release_session(&self, session: &str) {
        let names: Vec<String> =
            self.live().iter().filter(|(_, c)| c.session.as_deref() == Some(session)).map(|(n, _)| n.clone()).collect();
        for name in names {
            let _ = self.release(&name).await;
        }
    }

    /// The computers `session` holds, as `ahpd status` shows them.
    pub fn of_session(&self, session: &str) -> Vec<String> {
        self.live()
            .iter()
            .filter(|(_, c)| c.session.as_deref() == Some(session))
            .map(|(n, c)| format!("{SCHEME}{n} on {} ({})", c.image, self.settings.engine))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_reads_with_its_unit() {
        assert_eq!(parse_memory("512m"), Some(512 * 1024 * 1024));
        assert_eq!(parse_memory("2G"), Some(2 * 1024 * 1024 * 1024));
        assert_eq!(parse_memory("1000"), Some(1000));
        assert_eq!(parse_memory("lots"), None);
    }

    #[test]
    fn a_computer_is_named_by_its_name_or_its_uri() {
        assert_eq!(Computers::name_of("computer://box1/status"), "box1");
        assert_eq!(Computers::name_of(" box1 "), "box1");
    }
}
