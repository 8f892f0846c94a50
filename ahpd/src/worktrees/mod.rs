//! Agents side by side on one repository: a git worktree each, and changes a person can review.
//!
//! A session (or one chat, `isolate_session`) may work in a worktree of its own, on a branch of
//! its own, cut from the folder it would have worked in. What changed is served the AHP way, as
//! changesets: an isolated session's `branch` (its worktree against what it was cut from), every
//! git folder's `uncommitted`, and each chat's per-turn slice and turn-against-turn comparison.
//! Getting work back is the person's act: `merge`, `discard` and `commit` operations on those
//! changesets, refused with the conflicting files named and nothing changed when a merge would
//! not apply.
//!
//! The host asks this feature through [`crate::host::facade::Workspaces`] and never names it; the
//! feature reaches the host through the facade alone, and owns git (`git.rs`, the `git`
//! program). The backends only ever see a folder.
//!
//! - `cut.rs`: making, letting go of and bringing back a worktree, each one step with a clear
//!   refusal and nothing half-made;
//! - `changes.rs`: the changeset URIs, the catalogue entries, computing a changeset's state and
//!   keeping watched ones live;
//! - `turns.rs`: a snapshot of the folder before and after each turn, kept as refs;
//! - `operations.rs`: merge, discard, commit.
//!
//! Git work that follows an event (a tool call completed, a turn ended, a session archived or
//! deleted) runs in one task ([`Worktrees::start`]) in the order the events came; the host's hooks
//! only note it. The feature's own lock is never held while the host's is taken.

pub mod changes;
pub mod cut;
pub mod git;
pub mod operations;
pub mod turns;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use agent_runner::sync::lock;
use ahp_types::commands::{InvokeChangesetOperationParams, InvokeChangesetOperationResult, ResourceReadResult};
use ahp_types::common::JsonObject;
use ahp_types::state::{Changeset, ChangesetState, ConfigPropertySchema, SessionConfigPropertySchema};
use protocol::SchemaResult;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};

use crate::host::facade::{AhpError, Event, FolderRequest, Pending, Workspaces};
use crate::host::{Core, Host};
use crate::store::WorktreeRecord;

/// The session setting that says where a session works: `folder`, `worktree`, or a box's level
/// (`sandbox`, `container`: a worktree of its own, and every process of the session confined,
/// `crate::confine`).
pub const ISOLATION: &str = "isolation";
/// The session setting that names a new worktree's branch.
pub const BRANCH: &str = "branch";
/// The session setting that lists files outside Git copied into a new worktree.
pub const INCLUDE_FILES: &str = "worktreeIncludeFiles";

/// How the deployment isolates sessions (`isolation`, `isolationProviders`, `worktreesRoot`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where worktrees are made: `<root>/<repository>/<branch>`.
    pub root: PathBuf,
    /// Every session starts in a worktree unless it says otherwise.
    pub worktree_by_default: bool,
    /// These providers' sessions start in a worktree unless they say otherwise.
    pub worktree_providers: Vec<String>,
    /// The box levels this deployment can make (`sandbox`, `container`), offered beside `folder`
    /// and `worktree`, with the sentence that says what a session in each can reach.
    pub boxes: Vec<(String, String)>,
    /// The isolation a session starts in when it names none, when it is a box's level.
    pub box_by_default: Option<String>,
}

impl Settings {
    /// The isolation a session of `provider` starts with when it names none.
    pub fn default_isolation(&self, provider: &str) -> String {
        if let Some(level) = self.box_by_default.as_ref().filter(|l| self.boxes.iter().any(|(b, _)| b == *l)) {
            return level.clone();
        }
        if self.worktree_by_default || self.worktree_providers.iter().any(|p| p == provider) {
            "worktree".into()
        } else {
            "folder".into()
        }
    }

    /// Where an older ahpd kept its private indexes (removed at start).
    pub fn old_scratch(&self) -> PathBuf {
        self.root.join(".scratch")
    }
}

/// Git work to do after an event, in order.
#[derive(Debug)]
enum Job {
    /// Look at the records left from the last run (one interrupted while being cut goes).
    Reconcile,
    /// Recompute what is watched in a session, and its counts.
    Refresh { session: String },
    /// A turn ended in a chat: its snapshot after, the chat's and session's counts.
    TurnEnded { chat: String, session: String, turn_id: String },
    /// A worktree made for `owner` is not needed: it goes, whatever is in it (nothing is).
    Discard { owner: String },
    /// A session was archived: its worktrees' folders go where nothing is left in them.
    Release { session: String },
    /// A session was brought back: its worktrees' folders come back.
    Restore { session: String },
    /// A session was deleted: its worktrees go where nothing is left in them, else stay and the
    /// log says where; its turns' refs go.
    Remove { session: String, folders: Vec<PathBuf> },
}

/// The running turn of a chat, and where its files are.
#[derive(Debug, Clone)]
pub struct TurnPlace {
    /// The turn.
    pub turn_id: String,
    /// Its session (its refs are kept under it).
    pub session: String,
    /// The top of the work tree it works in.
    pub top: PathBuf,
}

/// What the feature keeps between calls.
#[derive(Default)]
struct State {
    /// Worktree records by owner (session or chat).
    records: HashMap<String, WorktreeRecord>,
    /// Each chat's running turn, from its snapshot before.
    running: HashMap<String, TurnPlace>,
    /// Turns that ended and wait for their snapshot after.
    pending_after: HashMap<String, TurnPlace>,
    /// One lock per chat, so a turn's snapshots come in order.
    chat_locks: HashMap<String, Arc<tokio::sync::Mutex<()>>>,
    /// One lock per repository for what changes it (cut, merge, commit, discard, remove).
    repo_locks: HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>,
    /// Files a client marked reviewed: changeset → file id → the content it was reviewed at.
    reviews: HashMap<String, HashMap<String, String>>,
    /// Sessions with a refresh queued.
    refreshing: HashSet<String>,
    /// Who waits to hear what became of a deleted session's worktrees.
    released: HashMap<String, Vec<oneshot::Sender<String>>>,
}

/// The worktrees feature, as a host is built with it.
pub struct Worktrees {
    settings: Settings,
    /// A folder of this run's own (0700, random, removed when the feature is) for the private
    /// indexes snapshots use: git writes them with the daemon's umask, so they are kept out of the
    /// data folder, whose files are all 0600.
    scratch: tempfile::TempDir,
    state: Mutex<State>,
    jobs: mpsc::UnboundedSender<Job>,
    inbox: Mutex<Option<mpsc::UnboundedReceiver<Job>>>,
    /// Jobs queued or running: an in-process host (`crate::bare`) waits for none before it calls
    /// itself idle, since git runs as a child process its runtime cannot see.
    in_flight: watch::Sender<usize>,
}

impl Worktrees {
    /// The feature with these settings; [`Worktrees::start`] it once its host is built. Fails
    /// when no private scratch folder can be made in the system's temporary folder.
    pub fn new(settings: Settings) -> std::io::Result<Arc<Self>> {
        let (jobs, inbox) = mpsc::unbounded_channel();
        let (in_flight, _) = watch::channel(0);
        let scratch = tempfile::Builder::new().prefix("ahpd-scratch-").tempdir()?;
        Ok(Arc::new(Self {
            settings,
            scratch,
            state: Mutex::default(),
            jobs,
            inbox: Mutex::new(Some(inbox)),
            in_flight,
        }))
    }

    /// The folder for snapshots' private indexes.
    pub fn scratch(&self) -> &Path {
        self.scratch.path()
    }

    /// Reads the records the store keeps, and starts the task that does the git work events
    /// leave (the first: looking at what the last run left).
    pub fn start(self: &Arc<Self>, host: &Host) {
        let records = host.lock().store().worktrees().unwrap_or_else(|e| {
            tracing::error!("could not read the worktrees' records: {e}");
            Vec::new()
        });
        self.state().records = records.into_iter().map(|r| (r.owner.clone(), r)).collect();
        self.tighten_root();
        let Some(mut inbox) = lock(&self.inbox).take() else { return };
        self.queue(Job::Reconcile);
        let this = self.clone();
        let host = host.clone();
        host.clone().spawn("worktrees", async move {
            while let Some(job) = inbox.recv().await {
                this.run(&host, job).await;
                this.in_flight.send_modify(|n| *n = n.saturating_sub(1));
            }
        });
    }

    /// The worktrees' root, when there is one, made its person's alone as the data folder it sits
    /// in: one an older ahpd made 0755 is tightened, so nothing a worktree holds is readable by
    /// the machine's other accounts (a worktree's own files are private since, `Git::private`).
    fn tighten_root(&self) {
        if !self.settings.root.is_dir() {
            return;
        }
        match crate::fsutil::make_private(&self.settings.root) {
            Ok(tightened) => tightened.iter().for_each(|said| tracing::warn!("{said}")),
            Err(e) => tracing::warn!("could not make {} private: {e}", self.settings.root.display()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn queue(&self, job: Job) {
        self.in_flight.send_modify(|n| *n += 1);
        if self.jobs.send(job).is_err() {
            self.in_flight.send_modify(|n| *n = n.saturating_sub(1));
        }
    }

    /// True while a job is queued or running.
    pub fn busy(&self) -> bool {
        *self.in_flight.borrow() > 0
    }

    /// Waits until no job is queued or running.
    pub async fn idle(&self) {
        let mut in_flight = self.in_flight.subscribe();
        let _ = in_flight.wait_for(|n| *n == 0).await;
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The record of the worktree made for `owner`.
    pub fn record(&self, owner: &str) -> Option<WorktreeRecord> {
        self.state().records.get(owner).cloned()
    }

    /// Every record of `session` (its own and its chats').
    fn records_of(&self, session: &str) -> Vec<WorktreeRecord> {
        self.state().records.values().filter(|r| r.session == session).cloned().collect()
    }

    /// Keeps a record, in memory and in the store.
    fn keep(&self, core: &Core, record: WorktreeRecord) {
        if let Err(e) = core.store().save_worktree(&record) {
            tracing::error!("{e}");
        }
        self.state().records.insert(record.owner.clone(), record);
    }

    /// Forgets a record.
    fn forget(&self, core: &Core, owner: &str) {
        if let Err(e) = core.store().delete_worktree(owner) {
            tracing::error!("{e}");
        }
        self.state().records.remove(owner);
    }

    /// The lock of one repository.
    fn repo_lock(&self, repo: &Path) -> Arc<tokio::sync::Mutex<()>> {
        self.state().repo_locks.entry(repo.to_owned()).or_default().clone()
    }

    /// The lock of one chat's snapshots.
    fn chat_lock(&self, chat: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.state().chat_locks.entry(chat.to_owned()).or_default().clone()
    }

    /// Queues a refresh of a session, unless one is queued already.
    fn refresh_later(&self, session: &str) {
        if self.state().refreshing.insert(session.to_owned()) {
            self.queue(Job::Refresh { session: session.to_owned() });
        }
    }

    async fn run(&self, host: &Host, job: Job) {
        match job {
            Job::Reconcile => cut::reconcile(self, host).await,
            Job::Refresh { session } => {
                self.state().refreshing.remove(&session);
                changes::refresh(self, host, &session, None).await;
            }
            Job::TurnEnded { chat, session, turn_id } => {
                turns::settle_after(self, &chat).await;
                changes::count_chat(host, &session, &chat).await;
                changes::refresh(self, host, &session, Some(&turn_id)).await;
            }
            Job::Discard { owner } => cut::discard(self, host, &owner).await,
            Job::Release { session } => cut::release(self, host, &session).await,
            Job::Restore { session } => {
                for record in self.records_of(&session) {
                    cut::restore(self, host, &record.owner).await;
                }
            }
            Job::Remove { session, folders } => {
                let said = cut::remove(self, host, &session, &folders).await;
                let waiters = self.state().released.remove(&session).unwrap_or_default();
                for waiter in waiters {
                    let _ = waiter.send(said.clone());
                }
            }
        }
    }
}

/// A string property of the host's own session settings.
fn property(title: &str, description: &str, kind: &str) -> SessionConfigPropertySchema {
    let mut property = agent_runner::schema::property(kind, title, Some(description.into()));
    property.session_mutable = Some(false);
    property
}

/// A list's item: a path.
fn string_items() -> ConfigPropertySchema {
    agent_runner::schema::config_property("string", "File", None)
}

impl Workspaces for Worktrees {
    fn extend_schema(&self, provider: &str, schema: &mut SchemaResult) {
        let default = self.settings.default_isolation(provider);
        let mut isolation = property(
            "Isolation",
            "Work in the folder itself, or in a Git worktree of its own on a branch of its own, cut from the folder (its changes stay apart until you merge them); a sandbox or a container also confines everything the agent runs to that worktree.",
            "string",
        );
        isolation.default = Some(Value::from(default.clone()));
        let mut values = vec![Value::from("folder"), Value::from("worktree")];
        let mut labels = vec!["Folder".to_owned(), "Worktree".to_owned()];
        let mut about = vec![
            "The folder itself, with your rights.".to_owned(),
            "A worktree of its own; commands run with your rights.".to_owned(),
        ];
        for (level, reaches) in &self.settings.boxes {
            values.push(Value::from(level.as_str()));
            let mut label = level.clone();
            label[..1].make_ascii_uppercase();
            labels.push(label);
            about.push(reaches.clone());
        }
        isolation.r#enum = Some(values);
        isolation.enum_labels = Some(labels);
        isolation.enum_descriptions = Some(about);
        schema.schema.properties.insert(ISOLATION.into(), isolation);
        schema.schema.properties.insert(
            BRANCH.into(),
            property(
                "Branch",
                "The branch a new worktree is cut on; left out, ahpd names one ahpd/<title>-<id>.",
                "string",
            ),
        );
        let mut include = property(
            "Files to carry over",
            "Files Git does not track (an .env, say) copied from the folder into a new worktree, as paths inside it.",
            "array",
        );
        include.items = Some(string_items());
        schema.schema.properties.insert(INCLUDE_FILES.into(), include);
        if default != "folder" {
            schema.defaults.insert(ISOLATION.into(), Value::from(default));
        }
    }

    fn owns_setting(&self, key: &str) -> bool {
        [ISOLATION, BRANCH, INCLUDE_FILES].contains(&key)
    }

    fn needs_folder(&self, settings: &JsonObject) -> bool {
        // A box confines its session to a worktree of its own.
        settings.get(ISOLATION).and_then(Value::as_str).is_some_and(|i| i != "folder")
    }

    fn make_folder<'a>(&'a self, host: &'a Host, request: FolderRequest) -> Pending<'a, Result<PathBuf, AhpError>> {
        Box::pin(async move { cut::make(self, host, request).await.map_err(AhpError::invalid_params) })
    }

    fn settle(&self, core: &mut Core, owner: &str, used: bool) {
        let Some(mut record) = self.record(owner) else { return };
        if used {
            record.state = crate::store::records::WorktreeState::Ready;
            let session = record.session.clone();
            self.keep(core, record);
            // The session (or chat) advertises its branch from now on.
            core.advertise_changesets(&session);
        } else {
            self.queue(Job::Discard { owner: owner.to_owned() });
        }
    }

    fn session_changesets(&self, core: &Core, session: &str) -> Option<Vec<Changeset>> {
        changes::session_catalogue(self, core, session)
    }

    fn chat_changesets(&self, core: &Core, chat: &str) -> Option<Vec<Changeset>> {
        changes::chat_catalogue(self, core, chat)
    }

    fn open_changeset<'a>(&'a self, host: &'a Host, uri: &'a str) -> Pending<'a, Result<ChangesetState, AhpError>> {
        Box::pin(changes::open(self, host, uri))
    }

    fn invoke<'a>(
        &'a self,
        host: &'a Host,
        params: InvokeChangesetOperationParams,
        _sender: Option<String>,
    ) -> Pending<'a, Result<InvokeChangesetOperationResult, AhpError>> {
        Box::pin(operations::invoke(self, host, params))
    }

    fn read<'a>(&'a self, host: &'a Host, uri: &'a str) -> Option<Pending<'a, Result<ResourceReadResult, AhpError>>> {
        let (session, sha) = changes::parse_blob_uri(uri)?;
        Some(Box::pin(changes::read_blob(host, session, sha)))
    }

    fn turn_starting<'a>(&'a self, host: &'a Host, chat: &'a str, turn_id: &'a str) -> Pending<'a, ()> {
        Box::pin(turns::starting(self, host, chat, turn_id))
    }

    fn event(&self, core: &mut Core, event: Event) {
        match event {
            Event::ToolCompleted { chat } => {
                if let Some(session) = core.chat(&chat).map(|m| m.session.clone()) {
                    self.refresh_later(&session);
                }
            }
            Event::TurnEnded { chat, turn_id } => {
                let Some(session) = core.chat(&chat).map(|m| m.session.clone()) else { return };
                turns::ended(self, &chat, &turn_id);
                self.queue(Job::TurnEnded { chat, session, turn_id });
            }
            Event::Archived { session, archived } => {
                self.queue(if archived { Job::Release { session } } else { Job::Restore { session } });
            }
            Event::SessionRemoved { session } => {
                let mut folders: Vec<PathBuf> =
                    core.session(&session).and_then(|m| m.working_directory.clone()).into_iter().collect();
                for chat in core.chats_of(&session) {
                    folders.extend(core.chat_folder(&chat));
                    changes::forget_chat(self, core, &chat);
                }
                changes::forget_session(self, core, &session);
                self.queue(Job::Remove { session, folders });
            }
            Event::Reviewed { changeset, files, reviewed } => {
                changes::reviewed(self, core, &changeset, &files, reviewed)
            }
        }
    }

    fn when_released(&self, session: &str) -> oneshot::Receiver<String> {
        let (tx, rx) = oneshot::channel();
        self.state().released.entry(session.to_owned()).or_default().push(tx);
        rx
    }
}
