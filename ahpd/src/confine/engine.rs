//! A container engine reached through the Docker Engine API (`bollard`), which Docker and Podman
//! (`podman system service`) both serve: on a local socket (`unix:///…`), a TCP address
//! (`tcp://…`), or another machine over SSH (`ssh://…`). What ahpd makes there carries labels
//! ([`LABEL_OWNER`], naming the data folder of the daemon that made it), so a daemon sweeps, at
//! start, what a run of its own left behind (a `kill -9`).

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, ExecConfig, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, ListContainersOptions, RemoveContainerOptions};
use bollard::Docker;
use futures_util::StreamExt;

/// The label naming the data folder of the daemon that made a container.
pub const LABEL_OWNER: &str = "ahpd.owner";
/// The label naming what a container is for (`computer`, `session`).
pub const LABEL_KIND: &str = "ahpd.kind";
/// The label naming the session a container was made for.
pub const LABEL_SESSION: &str = "ahpd.session";

/// Where an engine is, when nothing names one: `DOCKER_HOST`, else Podman's root socket, else
/// Docker's.
pub fn default_url() -> String {
    if let Some(host) = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()) {
        return host;
    }
    ["/run/podman/podman.sock", "/var/run/docker.sock"]
        .iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(|p| format!("unix://{p}"))
        .unwrap_or_else(|| "unix:///run/podman/podman.sock".to_owned())
}

/// The engine at `url` as the daemon starts: connected, asked whether it answers (for a few
/// seconds at most, so an engine far away never holds the start), and, when it does, swept of
/// what a past run of the daemon owning `owner` left (a `kill -9`): its sessions' containers and
/// its computers. The one sweep.
pub async fn at_start(url: &str, owner: &str) -> (Result<ContainerEngine, String>, Result<(), String>) {
    let engine = ContainerEngine::connect(url, owner);
    let answered = match &engine {
        Ok(engine) => match tokio::time::timeout(std::time::Duration::from_secs(5), engine.ping()).await {
            Ok(answered) => answered,
            Err(_) => Err(format!("no container engine answered at {url} within 5 seconds")),
        },
        Err(why) => Err(why.clone()),
    };
    if let Err(why) = &answered {
        tracing::info!("container sessions and computers are not offered: {why}");
    }
    if let (Ok(engine), Ok(())) = (&engine, &answered) {
        match engine.sweep().await {
            Ok(0) => {}
            Ok(n) => tracing::info!("removed {n} containers a past run left on {url}"),
            Err(e) => tracing::warn!("could not list the containers a past run left on {url}: {e}"),
        }
    }
    (engine, answered)
}

/// A container to make.
#[derive(Debug, Clone, Default)]
pub struct Make {
    /// The image.
    pub image: String,
    /// Its name on the engine.
    pub name: String,
    /// The labels beside the owner's.
    pub labels: HashMap<String, String>,
    /// CPUs it may use (`None`: no limit).
    pub cpus: Option<f64>,
    /// Memory it may use, in bytes (`None`: no limit).
    pub memory: Option<i64>,
    /// `host:container[:ro]` mounts.
    pub binds: Vec<String>,
    /// What it runs (it must keep running: commands are `exec`ed into it).
    pub cmd: Vec<String>,
    /// The network it joins (`host`: the engine machine's own); `None`: the engine's default.
    pub network: Option<String>,
}

/// A program to run in a container with its stdio attached (`ahpd box-exec`).
#[derive(Debug, Clone, Default)]
pub struct Attach {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// `KEY=VALUE` variables.
    pub env: Vec<String>,
    /// Where it runs inside.
    pub workdir: Option<String>,
    /// It gets a terminal (its stdin is one).
    pub tty: bool,
}

/// A program started in a container: what it prints, and its stdin.
pub struct Attached {
    /// The exec's id, to ask its exit code once its output ends.
    pub id: String,
    /// Its stdout and stderr as they come.
    pub output: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = Result<bollard::container::LogOutput, bollard::errors::Error>> + Send>,
    >,
    /// Its stdin.
    pub input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
}

/// A connection to one engine.
#[derive(Clone)]
pub struct ContainerEngine {
    url: String,
    docker: Docker,
    owner: String,
}

/// What an engine said, in a sentence.
fn said(e: bollard::errors::Error) -> String {
    e.to_string()
}

impl ContainerEngine {
    /// A client for the engine at `url`, making containers owned by `owner` (the daemon's data
    /// folder). Nothing is asked yet.
    pub fn connect(url: &str, owner: &str) -> Result<Self, String> {
        let version = bollard::API_DEFAULT_VERSION;
        let docker = if let Some(path) = url.strip_prefix("unix://") {
            Docker::connect_with_unix(path, 120, version)
        } else if url.starts_with('/') {
            Docker::connect_with_unix(url, 120, version)
        } else if url.starts_with("ssh://") {
            super::ssh::connect(url, 120, version)
        } else if url.starts_with("tcp://") || url.starts_with("http://") {
            Docker::connect_with_http(url, 120, version)
        } else {
            return Err(format!("{url} is not an engine address ahpd knows (unix://, tcp://, ssh://)"));
        };
        let docker = docker.map_err(|e| format!("no container engine answered at {url}: {e}"))?;
        Ok(Self { url: url.to_owned(), docker, owner: owner.to_owned() })
    }

    /// Where it is.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Asks it whether it answers.
    pub async fn ping(&self) -> Result<(), String> {
        self.docker.ping().await.map(|_| ()).map_err(|e| format!("no container engine answered at {}: {e}", self.url))
    }

    /// Makes and starts a container; answers its id. One that fails to start is removed.
    pub async fn make(&self, make: &Make) -> Result<String, String> {
        let mut labels = make.labels.clone();
        labels.insert(LABEL_OWNER.into(), self.owner.clone());
        let host_config = HostConfig {
            binds: (!make.binds.is_empty()).then(|| make.binds.clone()),
            nano_cpus: make.cpus.map(|c| (c * 1e9) as i64),
            memory: make.memory,
            init: Some(false),
            network_mode: make.network.clone(),
            ..HostConfig::default()
        };
        let body = ContainerCreateBody {
            image: Some(make.image.clone()),
            cmd: Some(make.cmd.clone()),
            labels: Some(labels),
            host_config: Some(host_config),
            ..ContainerCreateBody::default()
        };
        let options = CreateContainerOptions { name: Some(make.name.clone()), ..CreateContainerOptions::default() };
        let created = self.docker.create_container(Some(options), body).await.map_err(said)?;
        if let Err(e) =
            self.docker.start_container(&created.id, None::<bollard::query_parameters::StartContainerOptions>).await
        {
            let _ = self.remove(&created.id).await;
            return Err(said(e));
        }
        Ok(created.id)
    }

    /// Runs `argv` in container `id`; answers what it printed (stdout and stderr as they came,
    /// at most `limit` bytes kept) and its exit code.
    pub async fn exec(&self, id: &str, argv: Vec<String>, limit: usize) -> Result<(String, i64), String> {
        let config = ExecConfig {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(argv),
            ..ExecConfig::default()
        };
        let exec = self.docker.create_exec(id, config).await.map_err(said)?;
        let started = self.docker.start_exec(&exec.id, None).await.map_err(said)?;
        let mut out = Vec::new();
        if let bollard::exec::StartExecResults::Attached { mut output, .. } = started {
            while let Some(piece) = output.next().await {
                let bytes = piece.map_err(said)?.into_bytes();
                let room = limit.saturating_sub(out.len());
                out.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
        }
        let code = self.docker.inspect_exec(&exec.id).await.map_err(said)?.exit_code.unwrap_or(-1);
        Ok((String::from_utf8_lossy(&out).into_owned(), code))
    }

    /// Starts `attach` in container `id` with its stdin, stdout and stderr attached.
    pub async fn attach(&self, id: &str, attach: Attach) -> Result<Attached, String> {
        let config = ExecConfig {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(attach.tty),
            env: Some(attach.env),
            working_dir: attach.workdir,
            cmd: Some(attach.argv),
            ..ExecConfig::default()
        };
        let unanswered = |e: bollard::errors::Error| format!("no container engine answered at {}: {e}", self.url);
        let exec = self.docker.create_exec(id, config).await.map_err(unanswered)?;
        match self.docker.start_exec(&exec.id, None).await.map_err(unanswered)? {
            bollard::exec::StartExecResults::Attached { output, input } => Ok(Attached { id: exec.id, output, input }),
            bollard::exec::StartExecResults::Detached => Err(format!("the engine at {} did not attach", self.url)),
        }
    }

    /// The exit code of an exec whose output ended (`None` when the engine does not say). An
    /// engine may take a moment to record the exit after the output ends: it is asked again,
    /// a few times.
    pub async fn exit_code(&self, exec: &str) -> Option<i64> {
        for _ in 0..50 {
            let inspected = self.docker.inspect_exec(exec).await.ok()?;
            if inspected.running != Some(true) {
                return inspected.exit_code;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        None
    }

    /// Whether the engine holds `image`.
    pub async fn has_image(&self, image: &str) -> bool {
        self.docker.inspect_image(image).await.is_ok()
    }

    /// Pulls `image` from its registry.
    pub async fn pull(&self, image: &str) -> Result<(), String> {
        let options =
            bollard::query_parameters::CreateImageOptions { from_image: Some(image.to_owned()), ..Default::default() };
        let mut progress = self.docker.create_image(Some(options), None, None);
        while let Some(step) = progress.next().await {
            step.map_err(|e| format!("{image} could not be pulled: {e}"))?;
        }
        Ok(())
    }

    /// Builds `tag` from a tar of its context holding `dockerfile` (a path inside it); nothing
    /// is pulled that the engine already holds.
    pub async fn build(
        &self,
        tag: &str,
        dockerfile: &str,
        args: HashMap<String, String>,
        context: Vec<u8>,
    ) -> Result<(), String> {
        let options = bollard::query_parameters::BuildImageOptions {
            dockerfile: dockerfile.to_owned(),
            t: Some(tag.to_owned()),
            rm: true,
            buildargs: Some(args),
            // Its steps reach what the session's container reaches: the engine machine's network.
            networkmode: Some("host".into()),
            ..Default::default()
        };
        let body = bollard::body_full(context.into());
        let mut progress = self.docker.build_image(options, None, Some(body));
        while let Some(step) = progress.next().await {
            let step = step.map_err(|e| format!("{tag} could not be built: {e}"))?;
            if let Some(detail) = step.error_detail.and_then(|d| d.message) {
                return Err(format!("{tag} could not be built: {detail}"));
            }
        }
        Ok(())
    }

    /// Removes container `id`, running or not.
    pub async fn remove(&self, id: &str) -> Result<(), String> {
        let options = RemoveContainerOptions { force: true, v: true, ..RemoveContainerOptions::default() };
        self.docker.remove_container(id, Some(options)).await.map_err(said)
    }

    /// The ids of the containers this daemon made (by its owner label), `kind` among them when
    /// given.
    pub async fn owned(&self, kind: Option<&str>) -> Result<Vec<String>, String> {
        let mut labels = vec![format!("{LABEL_OWNER}={}", self.owner)];
        labels.extend(kind.map(|k| format!("{LABEL_KIND}={k}")));
        let filters = HashMap::from([("label".to_owned(), labels)]);
        let options = ListContainersOptions { all: true, filters: Some(filters), ..ListContainersOptions::default() };
        let listed = self.docker.list_containers(Some(options)).await.map_err(said)?;
        Ok(listed.into_iter().filter_map(|c| c.id).collect())
    }

    /// Removes every container a run of this daemon left behind; answers how many.
    pub async fn sweep(&self) -> Result<usize, String> {
        let ids = self.owned(None).await?;
        for id in &ids {
            if let Err(e) = self.remove(id).await {
                tracing::warn!("could not remove the container {id} a past run left: {e}");
            }
        }
        Ok(ids.len())
    }

    /// What container `id` uses now: memory in bytes and its CPU time in nanoseconds.
    pub async fn usage(&self, id: &str) -> Option<(u64, u64)> {
        let options = bollard::query_parameters::StatsOptions { stream: false, one_shot: true };
        let stats = self.docker.stats(id, Some(options)).next().await?.ok()?;
        let memory = stats.memory_stats.and_then(|m| m.usage).unwrap_or(0);
        let cpu = stats.cpu_stats.and_then(|c| c.cpu_usage).and_then(|u| u.total_usage).unwrap_or(0);
        Some((memory, cpu))
    }
}
