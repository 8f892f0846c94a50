//! Repair turns: what Agent Merge asks a chat to fix (failed checks with their workflow runs and
//! jobs, unresolved review threads), the prompt that names it, and the three tools that act only
//! inside such a turn and only for what it was asked to fix: `readAgentMergeCI` (a summary, then a
//! job's log by evidence id: a line-numbered tail, a range, a literal search),
//! `rerunAgentMergeWorkflow` (asked once; deferred while the run's current attempt is going) and
//! `replyToAgentMergeReviewThread` (published, then resolved; a reply that lands in the person's
//! pending review is answered pending, and that review is neither submitted nor discarded).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use agent_runner::sync::lock;
use tokio::sync::OnceCell;

use ahp_types::common::JsonObject;
use ahp_types::state::{Message, MessageKind, MessageOrigin};
use serde_json::{json, Value};

use super::github::{GitHub, Job, ReviewThread};
use super::input::{self, Reply, Rerun};
use super::trust;
use crate::host::facade::ToolCall;
use crate::host::Host;

/// The key a repair turn's message carries in its `_meta`, naming the repair.
pub const META_KEY: &str = "ahpd.agentMerge";
/// The most a `readAgentMergeCI` answer holds.
const ANSWER_CAP: usize = 48 * 1024;

/// A job's log, as lines.
type Lines = Arc<Vec<String>>;

/// A failed job a repair turn may read and rerun.
#[derive(Debug, Clone)]
pub struct FailedJob {
    /// The job.
    pub job: Job,
    /// Its run's attempt when the repair began.
    pub attempt: u64,
    /// The run's workflow name.
    pub workflow: String,
}

impl FailedJob {
    /// The evidence id its log is read by: scoped to the job and its run's attempt.
    pub fn evidence_id(&self) -> String {
        format!("job-{}-attempt-{}", self.job.id, self.attempt)
    }
}

/// One repair: what one turn was asked to fix.
pub struct Repair {
    pub id: String,
    /// Its place among the repairs begun, oldest first.
    pub seq: u64,
    pub session: String,
    pub folder: String,
    pub github: Arc<GitHub>,
    pub pull: u64,
    pub head_sha: String,
    /// The failed checks, by name.
    pub checks: Vec<String>,
    pub jobs: Vec<FailedJob>,
    pub threads: Vec<ReviewThread>,
    /// The branch conflicts with its base (`dirty`) or is behind it (`behind`), as GitHub says.
    pub conflict: Option<String>,
    /// Logs read, by evidence id, as lines: one download each, however many reads ask at once.
    evidence: Mutex<HashMap<String, Arc<OnceCell<Lines>>>>,
    /// The runs whose rerun was asked for in this turn.
    reruns: Mutex<HashSet<u64>>,
}

/// A rerun waiting for its run's current attempt to end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deferred {
    pub run: u64,
    pub failed_jobs_only: bool,
    pub head_sha: String,
}

impl Repair {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        session: &str,
        folder: &str,
        github: Arc<GitHub>,
        pull: u64,
        head_sha: &str,
        checks: Vec<String>,
        jobs: Vec<FailedJob>,
        threads: Vec<ReviewThread>,
    ) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Self {
            id: crate::host::facade::new_id(),
            seq: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            session: session.to_owned(),
            folder: folder.to_owned(),
            github,
            pull,
            head_sha: head_sha.to_owned(),
            checks,
            jobs,
            threads,
            conflict: None,
            evidence: Mutex::new(HashMap::new()),
            reruns: Mutex::new(HashSet::new()),
        }
    }

    /// The message the repair turn begins with: exactly what to fix, and how. What it quotes from
    /// GitHub (the failed checks' summaries, the threads' comments) comes after a sentence saying
    /// it is data, fenced and labelled with who wrote it (`trust.rs`); the names GitHub gives
    /// (a check's, a job's, a path) are kept to one line.
    pub fn message(&self, summaries: &[(String, String)]) -> Message {
        let mut text = format!("Agent Merge: pull request #{} (head {}) needs repair.\n", self.pull, self.head_sha);
        if !summaries.is_empty() || !self.threads.is_empty() {
            text.push_str(trust::QUOTED_RULE);
            text.push('\n');
        }
        if !self.checks.is_empty() {
            let names: Vec<String> = self.checks.iter().map(|c| trust::one_line(c)).collect();
            text.push_str(&format!("Failed required checks: {}.\n", names.join(", ")));
            for job in &self.jobs {
                text.push_str(&format!(
                    "Failed job {} \"{}\" of workflow run {} \"{}\" (attempt {}), evidence {}.\n",
                    job.job.id,
                    trust::one_line(&job.job.name),
                    job.job.run_id,
                    trust::one_line(&job.workflow),
                    job.attempt,
                    job.evidence_id()
                ));
            }
            for (check, summary) in summaries {
                text.push_str(&trust::quoted(&format!("The summary of check {check}"), summary));
            }
            text.push_str("Find the cause with readAgentMergeCI, fix the code, then commit and push. Rerun a workflow with rerunAgentMergeWorkflow only for a failure the code did not cause.\n");
        }
        for thread in &self.threads {
            let at = match (&thread.path, thread.line) {
                (Some(path), Some(line)) => format!(" on {}:{line}", trust::one_line(path)),
                (Some(path), None) => format!(" on {}", trust::one_line(path)),
                _ => String::new(),
            };
            text.push_str(&format!("Unresolved review thread {}{at}:\n", trust::one_line(&thread.id)));
            for comment in &thread.comments.nodes {
                let who = trust::author_of(comment);
                text.push_str(&trust::quoted(&format!("A review comment by {who}"), &comment.body));
            }
        }
        if !self.threads.is_empty() {
            text.push_str("Address each thread, then answer it with replyToAgentMergeReviewThread.\n");
        }
        match self.conflict.as_deref() {
            Some("behind") => text.push_str("The branch is behind its base: merge the base branch into it, then push.\n"),
            Some(_) => text.push_str("The branch conflicts with its base: merge the base branch into it, resolve the conflicts, then commit and push.\n"),
            None => {}
        }
        text.push_str("Use only these Agent Merge tools for GitHub: not the GitHub CLI, nor other GitHub tools.");
        let mut meta = JsonObject::new();
        meta.insert(
            META_KEY.to_owned(),
            json!({ "repair": self.id, "pullRequest": self.pull, "headSha": self.head_sha }),
        );
        Message {
            text,
            origin: MessageOrigin { kind: MessageKind::Agent },
            attachments: None,
            model: None,
            agent: None,
            meta: Some(meta),
        }
    }
}

/// The repair the call's turn was begun for, if it is a repair turn that is still running.
pub fn of_call(host: &Host, repairs: &Mutex<HashMap<String, Arc<Repair>>>, call: &ToolCall) -> Option<Arc<Repair>> {
    let (chat, turn) = (call.chat.as_deref()?, call.turn_id.as_deref()?);
    let id = {
        let core = host.lock();
        let active = core.chat_state(chat)?.active_turn.as_ref()?;
        if active.id != turn {
            return None;
        }
        active.message.meta.as_ref()?.get(META_KEY)?.get("repair")?.as_str()?.to_owned()
    };
    lock(repairs).get(&id).cloned()
}

/// Numbers lines from `first` (1-based) as `N: text`.
fn numbered(lines: &[String], first: usize) -> String {
    lines.iter().enumerate().map(|(i, l)| format!("{}: {l}\n", first + i)).collect()
}

fn capped(value: Value) -> String {
    let text = value.to_string();
    if text.len() <= ANSWER_CAP {
        return text;
    }
    let mut end = ANSWER_CAP;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

impl Repair {
    fn job(&self, evidence: &str) -> Option<&FailedJob> {
        self.jobs.iter().find(|j| j.evidence_id() == evidence)
    }

    /// A job's log as lines, downloaded once per repair: reads that ask while it is on its way
    /// wait for that download (a failed one is tried again by the next read).
    async fn log(&self, job: &FailedJob) -> Result<Arc<Vec<String>>, String> {
        let cell = lock(&self.evidence).entry(job.evidence_id()).or_default().clone();
        let lines = cell
            .get_or_try_init(|| async {
                let text = self
                    .github
                    .job_log(job.job.id)
                    .await
                    .map_err(|e| format!("The log of job {} could not be read: {e}", job.job.id))?;
                Ok::<_, String>(Arc::new(text.lines().map(str::to_owned).collect::<Vec<_>>()))
            })
            .await?;
        Ok(lines.clone())
    }

    /// `readAgentMergeCI`.
    pub async fn read_ci(&self, input: &Value) -> Result<String, String> {
        input::read_ci(input)?;
        if input.get("cursor").is_some() {
            return Err(
                "Invalid readAgentMergeCI input: the cursor is stale or expired. Ask for a summary again.".into()
            );
        }
        let mode = input.get("mode").and_then(Value::as_str).unwrap_or("summary");
        if mode == "summary" {
            return self.summary(input.get("jobId").and_then(Value::as_str)).await;
        }
        let evidence = input.get("evidenceId").and_then(Value::as_str).unwrap_or("");
        let Some(job) = self.job(evidence) else {
            return Err(format!("Evidence {evidence} is not one of this Agent Merge turn's failed jobs. Use an evidenceId its summary returned."));
        };
        let lines = self.log(job).await?;
        let total = lines.len();
        let number = |field: &str, default: u64| input.get(field).and_then(Value::as_u64).unwrap_or(default);
        let answer = match mode {
            "tail" => {
                let count = usize::try_from(number("lineCount", 100)).unwrap_or(100);
                let start = total.saturating_sub(count);
                json!({ "quoted": trust::LOG_RULE, "evidenceId": evidence, "mode": "tail", "startLine": start + 1, "endLine": total, "totalLines": total, "complete": true, "lines": numbered(&lines[start..], start + 1) })
            }
            "range" => {
                let start = usize::try_from(number("startLine", 1)).unwrap_or(1).max(1);
                let end = usize::try_from(number("endLine", (start + 99) as u64)).unwrap_or(start).min(total);
                let shown = if start <= end { &lines[start - 1..end] } else { &[][..] };
                json!({ "quoted": trust::LOG_RULE, "evidenceId": evidence, "mode": "range", "startLine": start, "endLine": end.max(start - 1), "totalLines": total, "lines": numbered(shown, start) })
            }
            _ => {
                let query = input.get("query").and_then(Value::as_str).unwrap_or("").to_lowercase();
                let context = usize::try_from(number("contextLines", 2)).unwrap_or(2);
                let from = usize::try_from(number("startLine", 1)).unwrap_or(1).max(1);
                let matches: Vec<Value> = lines
                    .iter()
                    .enumerate()
                    .skip(from - 1)
                    .filter(|(_, l)| l.to_lowercase().contains(&query))
                    .take(20)
                    .map(|(i, _)| {
                        let (a, b) = (i.saturating_sub(context), (i + context + 1).min(total));
                        json!({ "line": i + 1, "lines": numbered(&lines[a..b], a + 1) })
                    })
                    .collect();
                json!({ "quoted": trust::LOG_RULE, "evidenceId": evidence, "mode": "search", "query": query, "totalLines": total, "matches": matches })
            }
        };
        Ok(capped(answer))
    }

    async fn summary(&self, job_id: Option<&str>) -> Result<String, String> {
        let mut jobs = Vec::new();
        for job in self.jobs.iter().filter(|j| job_id.is_none_or(|id| id == j.job.id.to_string())) {
            let lines = self.log(job).await?;
            let failed_steps: Vec<&str> = job
                .job
                .steps
                .iter()
                .filter(|s| s.conclusion.as_deref() == Some("failure"))
                .map(|s| s.name.as_str())
                .collect();
            let start = lines.len().saturating_sub(20);
            jobs.push(json!({
                "jobId": job.job.id.to_string(), "name": job.job.name, "runId": job.job.run_id.to_string(),
                "workflow": job.workflow, "attempt": job.attempt, "failedSteps": failed_steps,
                "evidenceId": job.evidence_id(), "totalLines": lines.len(),
                "excerpt": numbered(&lines[start..], start + 1),
            }));
        }
        if let Some(id) = job_id.filter(|_| jobs.is_empty()) {
            return Err(format!("Job {id} is not one of this Agent Merge turn's failed jobs."));
        }
        Ok(capped(json!({
            "quoted": trust::LOG_RULE,
            "pullRequest": self.pull, "headSha": self.head_sha, "failedChecks": self.checks, "jobs": jobs,
            "operations": ["tail: {mode: \"tail\", evidenceId}", "range: {mode: \"range\", evidenceId, startLine, endLine}", "search: {mode: \"search\", evidenceId, query}"],
        })))
    }

    /// `rerunAgentMergeWorkflow`: asked once per run; deferred while its current attempt goes on.
    pub async fn rerun(&self, asked: &Rerun) -> Result<(Option<Deferred>, String), String> {
        let run: u64 = asked
            .run_id
            .parse()
            .map_err(|_| format!("Workflow run {} is not one this Agent Merge turn may rerun.", asked.run_id))?;
        if !self.jobs.iter().any(|j| j.job.run_id == run) {
            return Err(format!("Workflow run {run} is not one this Agent Merge turn may rerun: it is not a run of its failed required checks."));
        }
        if !lock(&self.reruns).insert(run) {
            return Ok((None, format!("The rerun of workflow run {run} was already asked for in this turn. Do not repeat it; continue other work.")));
        }
        let current =
            self.github.workflow_run(run).await.map_err(|e| format!("Workflow run {run} could not be read: {e}"))?;
        if current.status != "completed" {
            let deferred = Deferred { run, failed_jobs_only: asked.failed_jobs_only, head_sha: self.head_sha.clone() };
            return Ok((Some(deferred), format!("Workflow run {run} attempt {} is still {}: Agent Merge reruns it once that attempt finishes, if CI repair stays enabled and the pull request head is unchanged. Do not poll or repeat this request; continue other actionable work.", current.run_attempt, current.status)));
        }
        self.github.rerun(run, asked.failed_jobs_only).await.map_err(|e| e.to_string())?;
        let what = if asked.failed_jobs_only { "its failed jobs" } else { "all its jobs" };
        Ok((None, format!("Workflow run {run} was rerun ({what}).")))
    }

    /// `replyToAgentMergeReviewThread`: the reply published, then the thread resolved; a reply
    /// that landed in the person's pending review is answered pending and nothing more is done.
    /// Answers the reply's comment id beside the tool's text (the watch does not take its own
    /// reply for a new comment to address), and whether it landed in a pending review.
    pub async fn reply(&self, asked: &Reply) -> Result<Replied, String> {
        if !self.threads.iter().any(|t| t.id == asked.thread_id) {
            return Err(format!(
                "Review thread {} is not one this Agent Merge turn was asked to address.",
                asked.thread_id
            ));
        }
        let comment = self.github.reply(&asked.thread_id, &asked.body).await.map_err(|e| e.to_string())?;
        if comment.state.as_deref() == Some("PENDING") {
            let said = json!({ "threadId": asked.thread_id, "reply": "pending", "resolved": false,
                "message": "The reply was added to your pending review, which stays pending: it is published when you submit that review. The thread was not resolved." });
            return Ok(Replied { comment: comment.id, said: said.to_string(), pending: true });
        }
        let resolved = if asked.resolve {
            self.github
                .resolve(&asked.thread_id)
                .await
                .map_err(|e| format!("The reply was published, but the thread could not be resolved: {e}"))?
        } else {
            false
        };
        let said =
            json!({ "threadId": asked.thread_id, "reply": "published", "commentId": comment.id, "resolved": resolved });
        Ok(Replied { comment: comment.id, said: said.to_string(), pending: false })
    }
}

/// What `replyToAgentMergeReviewThread` did.
pub struct Replied {
    /// The reply's comment id.
    pub comment: String,
    /// The tool's answer.
    pub said: String,
    /// The reply landed in the person's pending review.
    pub pending: bool,
}
