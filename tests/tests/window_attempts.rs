//! Several attempts at one task in the web window (issue 28), in a real browser against a real
//! daemon on a real Git repository: a checkout the host will not cut from starts none; one prompt
//! from New session starts three sessions (notes, echo, notes), each in a worktree of its own on
//! a branch of its own; their chats say "Attempt N of 3" and their agent, the branch's `/N` in
//! sight; the list shows them as one task (after a reload too); the compare view
//! shows each one's files and lines; a refused merge discards nothing; "Merge this one" merges one
//! and discards the other two, the compare view then saying it was merged into main, and git shows
//! the merge in the base checkout with the others' worktrees and branches gone; two attempts on
//! the real `pi` CLI each get the model picked for it (their chats say which) and the compare view
//! shows the tokens each spent. Screenshots go to target/window-shots/.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tests::browser::{announced_page, js_str, Browser};
use tests::git::git;
use tests::installed::pi_bin;
use tests::mocks::openai::{MockOpenAi, MODEL_ID};
use tests::{Daemon, DaemonOptions, TestClient, PATIENCE};

/// A repository on `main` with one commit: `a.txt` holding `one`.
fn repo(dir: &Path) -> PathBuf {
    let path = dir.join("project");
    std::fs::create_dir_all(&path).expect("mkdir");
    let path = path.canonicalize().expect("canonical");
    git(&path, &["init", "-q", "-b", "main"]);
    std::fs::write(path.join("a.txt"), "one\n").expect("write");
    git(&path, &["add", "a.txt"]);
    git(&path, &["commit", "-q", "-m", "first"]);
    path
}

fn shots() -> anyhow::Result<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("window-shots");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Sets a `<select>` in the page to `value` as a person picking it would.
async fn choose(browser: &mut Browser, selector: &str, value: &str) -> anyhow::Result<()> {
    browser
        .eval(&format!(
            "(() => {{ const s = document.querySelector({}); s.value = {}; s.dispatchEvent(new Event('change')); return s.value; }})()",
            js_str(selector),
            js_str(value)
        ))
        .await
        .map(|_| ())
}

/// Waits until the daemon logged the removal of two deleted sessions' worktrees and branches.
async fn removed_twice(daemon: &Daemon) -> anyhow::Result<()> {
    const REMOVED: &str = "removed the deleted session's worktree and its branch";
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while daemon.log().matches(REMOVED).count() < 2 {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "two removals never logged:\n{}", daemon.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Clicks the task's Compare button (in one step: the list is redrawn as the sessions change, so a
/// button found first and clicked after may be gone).
async fn compare(browser: &mut Browser) -> anyhow::Result<()> {
    browser.wait_for("document.querySelector('.sessions > li.task button[data-action=compare]')").await?;
    browser.eval("(() => { document.querySelector('.sessions > li.task button[data-action=compare]').click(); return true; })()").await?;
    browser.wait_for("document.querySelector('dialog.compare[open]')").await.map(|_| ())
}

/// The attempts' branches in the repository.
fn attempt_branches(repo: &Path) -> Vec<String> {
    git(repo, &["branch", "--list", "attempts/*", "--format=%(refname:short)"]).lines().map(str::to_owned).collect()
}

/// Each open chat's header: which attempt it says it is, its agent and model line, and the last
/// part of its branch, with whether that part is cut.
const HEADS_JS: &str = "[...document.querySelectorAll('.panes > .pane:not(.changes-pane)')].map((p) => { const a = p.querySelector('.pane-attempt'); const t = p.querySelector('.branch-tail'); const box = p.querySelector('.pane-branch')?.getBoundingClientRect(); const r = t?.getBoundingClientRect(); return { attempt: a?.textContent, attemptShown: !!a?.offsetParent, meta: p.querySelector('.pane-meta').textContent, tail: t?.textContent, tailCut: !t || t.scrollWidth > t.clientWidth || r.right > box.right + 0.5 || r.right > p.getBoundingClientRect().right }; })";

// Each attempt's `!` command writes what its attempt number says: attempt N puts `attempt N` in
// a.txt (+1 −1) and N lines in steps.txt (+N), so the three differ and the counts say which is which.
const PROMPT: &str = r#"!n=${PWD##*-}; echo "attempt $n" > a.txt; seq $n > steps.txt"#;

#[tokio::test]
async fn three_attempts_from_one_prompt_are_grouped_compared_and_the_chosen_one_merged() -> anyhow::Result<()> {
    let dir = tempfile::Builder::new().prefix("ahpd-attempts-").tempdir()?;
    let repo = repo(dir.path());
    let root = dir.path().join("worktrees");
    let config =
        json!({ "agents": { "notes": tests::agents::notes(), "echo": tests::agents::echo() }, "worktreesRoot": root });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let page = announced_page(&daemon).await?;
    let mut browser = Browser::launch().await?;
    browser.open(&page, 1280, 800).await?;
    browser.wait_for("document.body.dataset.connection === 'online'").await?;

    // New session: one prompt, the repository, the notes agent three times.
    browser.click("button[data-action=new]").await?;
    browser.wait_for("document.querySelector('dialog.new-session select[name=ask]')").await?;
    choose(&mut browser, "dialog.new-session select[name=agent]", "notes").await?;
    browser.wait_for("document.querySelector('dialog.new-session select[name=ask]')").await?;
    choose(&mut browser, "dialog.new-session select[name=ask]", "\"never\"").await?;
    browser
        .eval(&format!(
            "(() => {{ const f = document.querySelector('dialog.new-session input[name=folder]'); f.value = {}; return true; }})()",
            js_str(&repo.display().to_string())
        ))
        .await?;
    browser.click("dialog.new-session input[name=attempts]").await?;
    browser.wait_for("document.querySelectorAll('dialog.new-session .attempt-row').length === 2").await?;
    browser.click("dialog.new-session button[data-action=add-attempt]").await?;
    // Another agent for the second attempt (a `!` command is the host's, whatever the agent).
    choose(&mut browser, "dialog.new-session .attempt-row:nth-child(2) select[name=attempt-agent]", "echo").await?;
    browser
        .eval(&format!(
            "(() => {{ document.querySelector('dialog.new-session textarea[name=prompt]').value = {}; return true; }})()",
            js_str(PROMPT)
        ))
        .await?;
    browser.screenshot(&shots()?.join("attempts-new.png")).await?;

    // A base checkout with uncommitted changes cannot be cut from: the host's refusal is shown in
    // the dialog and nothing is made.
    std::fs::write(repo.join("a.txt"), "not committed\n")?;
    browser.click("dialog.new-session button[data-action=create]").await?;
    let refused = browser.wait_for("document.querySelector('dialog.new-session .form-error')?.textContent").await?;
    assert!(refused.as_str().is_some_and(|r| r.contains("has uncommitted changes (a.txt)")), "{refused}");
    assert_eq!(browser.eval("window.ahpd.sessions.size").await?, json!(0));
    assert_eq!(attempt_branches(&repo), Vec::<String>::new());
    git(&repo, &["checkout", "--", "a.txt"]);
    browser.click("dialog.new-session button[data-action=create]").await?;

    // One task in the list, three attempts under it, each with its changes once its command ran.
    browser
        .wait_for(
            "(() => { const t = document.querySelectorAll('.sessions > li.task'); return t.length === 1 && t[0].querySelectorAll('li[data-attempt]').length === 3; })()",
        )
        .await?;
    browser
        .wait_for("[...window.ahpd.sessions.values()].filter((s) => s.changes?.files === 2 && (s.status & 0x7) === 1).length === 3")
        .await?;
    let branches = attempt_branches(&repo);
    assert_eq!(branches.len(), 3, "a branch each: {branches:?}");
    let worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.lines().filter(|l| l.starts_with("worktree ")).count(), 4, "a worktree each: {worktrees}");
    for (i, branch) in branches.iter().enumerate() {
        assert!(branch.ends_with(&format!("/{}", i + 1)), "{branches:?}");
    }
    browser.screenshot(&shots()?.join("attempts-list.png")).await?;

    // Their three chats, open side by side, share one title (the prompt): each header says which
    // attempt it is and its agent, and the branch keeps its `/N` in sight.
    let heads = browser
        .wait_for(&format!(
            "(() => {{ const h = {HEADS_JS}; return h.length === 3 && h.every((x) => x.attempt && x.tail) && h; }})()"
        ))
        .await?;
    eprintln!("attempt headers: {heads:#}");
    let mut heads: Vec<Value> = heads.as_array().cloned().unwrap_or_default();
    heads.sort_by_key(|x| x["attempt"].as_str().map(str::to_owned));
    for (i, head) in heads.iter().enumerate() {
        let n = i + 1;
        assert_eq!(head["attempt"], json!(format!("Attempt {n} of 3")), "{heads:?}");
        let agent = if n == 2 { "echo" } else { "notes" };
        assert!(head["meta"].as_str().is_some_and(|m| m.starts_with(agent)), "its agent: {heads:?}");
        assert_eq!(head["tail"], json!(n.to_string()), "{heads:?}");
        assert_eq!(head["tailCut"], json!(false), "the branch's /{n} is not cut: {heads:?}");
        assert_eq!(head["attemptShown"], json!(true), "{heads:?}");
    }

    // A reload (and so any client) sees the same task: the group is in the branches.
    browser.goto(&format!("{}/", daemon.url.replace("ws://", "http://"))).await?;
    browser.wait_for("document.body.dataset.connection === 'online'").await?;
    browser.wait_for("document.querySelectorAll('.sessions > li.task li[data-attempt]').length === 3").await?;

    // The compare view: each attempt's state, time, files and lines.
    compare(&mut browser).await?;
    let columns = browser
        .wait_for(
            "(() => { const cols = [...document.querySelectorAll('dialog.compare .compare-column')]; if (cols.length !== 3 || cols.some((c) => !c.querySelector('.compare-files'))) return false; return cols.map((c) => ({ attempt: c.dataset.attempt, who: c.querySelector('.who').textContent, branch: c.querySelector('[data-field=branch]').textContent, state: c.querySelector('[data-field=state]').textContent, lines: c.querySelector('[data-field=lines]').textContent, time: c.querySelector('[data-field=time]').textContent, files: [...c.querySelectorAll('.compare-files li')].map((li) => li.textContent) })); })()",
        )
        .await?;
    eprintln!("compare view: {columns:#}");
    for (i, column) in columns.as_array().cloned().unwrap_or_default().iter().enumerate() {
        let n = i + 1;
        assert_eq!(column["attempt"], json!(n.to_string()), "{columns}");
        assert_eq!(column["state"], json!("idle"), "{columns}");
        assert_eq!(column["who"], json!(if n == 2 { "echo" } else { "notes" }), "{columns}");
        assert_eq!(column["branch"], json!(format!("{} (against main)", branches[i])), "{columns}");
        assert_eq!(column["lines"], json!(format!("+{} −1 in 2 files", n + 1)), "{columns}");
        assert_eq!(column["files"], json!(["a.txt+1 −1", format!("steps.txt+{n} −0")]), "{columns}");
        assert!(column["time"].as_str().is_some_and(|t| t.ends_with(" s") || t.contains("min")), "{columns}");
    }
    browser.screenshot(&shots()?.join("attempts-compare.png")).await?;

    // A merge the host refuses (the base checkout has uncommitted work) discards nothing, and the
    // view says why in the host's words.
    let merge_second = "dialog.compare .compare-column[data-attempt=\"2\"] button[data-action=merge-this]";
    std::fs::write(repo.join("a.txt"), "someone's work in progress\n")?;
    browser
        .eval(&format!("(() => {{ document.querySelector({}).click(); return true; }})()", js_str(merge_second)))
        .await?;
    browser.wait_for("document.querySelector('dialog.ask')?.textContent.includes('Merge attempt 2')").await?;
    browser.click("dialog.ask button[data-action=confirm]").await?;
    let refused = browser.wait_for("document.querySelector('dialog.compare .compare-said.error')?.textContent").await?;
    let refused = refused.as_str().unwrap_or_default();
    assert!(
        refused.contains("has uncommitted changes (a.txt)") && refused.ends_with("Nothing was discarded."),
        "{refused}"
    );
    assert_eq!(attempt_branches(&repo), branches, "every attempt is still there");
    assert_eq!(browser.eval("document.querySelectorAll('dialog.compare .compare-column').length").await?, json!(3));
    browser.screenshot(&shots()?.join("attempts-refused.png")).await?;
    git(&repo, &["checkout", "--", "a.txt"]);

    // "Merge this one" on attempt 2: asked first, then merged, and the other two discarded.
    let chosen = browser
        .eval("document.querySelector('dialog.compare .compare-column[data-attempt=\"2\"]').dataset.session")
        .await?;
    let chosen = chosen.as_str().unwrap_or_default().to_owned();
    browser
        .eval(&format!("(() => {{ document.querySelector({}).click(); return true; }})()", js_str(merge_second)))
        .await?;
    browser.wait_for("document.querySelector('dialog.ask')?.textContent.includes('Merge attempt 2')").await?;
    browser.click("dialog.ask button[data-action=confirm]").await?;
    let said = browser
        .wait_for("document.querySelector('dialog.compare .compare-said.done, dialog.compare .compare-said.error')?.textContent")
        .await?;
    let said = said.as_str().unwrap_or_default().to_owned();
    assert!(said.starts_with("Merged attempts/") && said.contains("into main"), "{said}");
    assert!(said.contains("Discarded 2 other attempts, with their worktrees and branches."), "{said}");
    // What is left is the merged attempt: it says it was merged and where, not "+0 −0".
    let left = browser
        .wait_for("(() => { const c = document.querySelectorAll('dialog.compare .compare-column'); return c.length === 1 && c[0].querySelector('button[data-action=merge-this]').disabled && { text: c[0].textContent, lines: c[0].querySelector('[data-field=lines]').textContent, tag: c[0].querySelector('h3 .merged-tag')?.textContent }; })()")
        .await?;
    assert_eq!(left["lines"], json!("merged into main"), "{left}");
    assert_eq!(left["tag"], json!("merged"), "{left}");
    let text = left["text"].as_str().unwrap_or_default();
    assert!(!text.contains("+0 −0") && !text.contains("No file changed."), "{left}");
    assert!(text.contains(&format!("Merged {} into main", branches[1])), "the host's words: {left}");
    browser.screenshot(&shots()?.join("attempts-merged.png")).await?;

    // Git: attempt 2's work is in the base checkout, committed; the others' worktrees and branches
    // are gone (the host removes them just after it answers disposeSession, and logs each).
    removed_twice(&daemon).await?;
    assert_eq!(std::fs::read_to_string(repo.join("a.txt"))?, "attempt 2\n");
    assert_eq!(std::fs::read_to_string(repo.join("steps.txt"))?, "1\n2\n");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "", "the base is clean");
    assert_eq!(git(&repo, &["show", "HEAD:a.txt"]), "attempt 2\n", "merged into main's history");
    let left = attempt_branches(&repo);
    assert_eq!(left, [branches[1].clone()], "only the merged attempt's branch is left");
    git(&repo, &["merge-base", "--is-ancestor", &branches[1], "main"]);
    let worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
    let listed: Vec<&str> = worktrees.lines().filter_map(|l| l.strip_prefix("worktree ")).collect();
    assert_eq!(listed.len(), 2, "the base and the merged attempt's: {worktrees}");
    for gone in [&branches[0], &branches[2]] {
        let folder = gone.replace('/', "-");
        assert!(!listed.iter().any(|w| w.ends_with(&folder)), "{gone}'s worktree is gone: {worktrees}");
        let under =
            std::fs::read_dir(root.join("project"))?.filter_map(Result::ok).map(|e| e.file_name()).collect::<Vec<_>>();
        assert!(!under.iter().any(|n| n.to_string_lossy() == folder), "{folder} left on disk: {under:?}");
    }

    // Every client sees the same: the discarded sessions are gone, the merged one stays.
    let client = TestClient::connect(&daemon.url, "checker").await?;
    let listed = client.request("listSessions", json!({ "channel": "ahp-root://" })).await?;
    let items: Vec<&Value> = listed["items"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    assert_eq!(items.len(), 1, "{listed}");
    assert_eq!(items[0]["resource"], json!(chosen));

    let seen = browser.observations().await?;
    assert_eq!(seen["errors"], json!([]), "no uncaught error: {seen}");
    assert_eq!(seen["violations"], json!([]), "{seen}");
    browser.close().await
}

/// The second model pi's `models.json` names beside the mock's own.
const SECOND_MODEL: &str = "mock-model-b";

#[tokio::test]
async fn attempts_on_pi_each_get_their_model_and_the_compare_view_shows_their_tokens() -> anyhow::Result<()> {
    let mock = MockOpenAi::start().await?;
    let dir = tempfile::Builder::new().prefix("ahpd-attempts-pi-").tempdir()?;
    let repo = repo(dir.path());
    let agent_dir = dir.path().join("pi-agent");
    std::fs::create_dir_all(&agent_dir)?;
    let mut models = mock.pi_models_json("mock");
    let second = json!({ "id": SECOND_MODEL, "name": "Mock Model B", "reasoning": false, "input": ["text"], "contextWindow": 32000, "maxTokens": 4096 });
    if let Some(list) = models["providers"]["mock"]["models"].as_array_mut() {
        list.push(second);
    }
    std::fs::write(agent_dir.join("models.json"), models.to_string())?;
    let settings = json!({ "defaultProvider": "mock", "defaultModel": MODEL_ID, "quietStartup": true });
    std::fs::write(agent_dir.join("settings.json"), settings.to_string())?;
    let config = json!({
        "agents": { "pi": { "kind": "pi", "options": { "command": pi_bin(), "agentDir": agent_dir } } },
        "worktreesRoot": dir.path().join("worktrees"),
    });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 800).await?;
    browser.wait_for("document.body.dataset.connection === 'online'").await?;
    let offered = browser
        .wait_for("(window.ahpd.root?.agents ?? []).find((a) => a.provider === 'pi')?.models?.length >= 2 && window.ahpd.root.agents.find((a) => a.provider === 'pi').models.map((m) => m.id)")
        .await?;
    let offered: Vec<String> = serde_json::from_value(offered)?;
    let id_of = |name: &str| offered.iter().find(|id| id.ends_with(name)).cloned().unwrap_or_default();
    let (first, second) = (id_of(MODEL_ID), id_of(SECOND_MODEL));
    assert!(!first.is_empty() && !second.is_empty() && first != second, "pi offers both models: {offered:?}");

    browser.click("button[data-action=new]").await?;
    browser.wait_for("document.querySelector('dialog.new-session select[name=agent]')").await?;
    choose(&mut browser, "dialog.new-session select[name=agent]", "pi").await?;
    browser
        .eval(&format!(
            "(() => {{ document.querySelector('dialog.new-session input[name=folder]').value = {}; return true; }})()",
            js_str(&repo.display().to_string())
        ))
        .await?;
    browser.click("dialog.new-session input[name=attempts]").await?;
    browser.wait_for("document.querySelectorAll('dialog.new-session .attempt-row').length === 2").await?;
    choose(&mut browser, "dialog.new-session .attempt-row:nth-child(1) select[name=attempt-model]", &first).await?;
    choose(&mut browser, "dialog.new-session .attempt-row:nth-child(2) select[name=attempt-model]", &second).await?;
    browser
        .eval("(() => { document.querySelector('dialog.new-session textarea[name=prompt]').value = 'say hello'; return true; })()")
        .await?;
    browser.click("dialog.new-session button[data-action=create]").await?;

    browser.wait_for("document.querySelectorAll('.sessions > li.task li[data-attempt]').length === 2").await?;
    // Each chat's header says which attempt it is, on which agent and model.
    let heads = browser
        .wait_for(&format!("(() => {{ const h = {HEADS_JS}; return h.length === 2 && h.every((x) => x.attempt && x.meta.includes(' · ')) && h; }})()"))
        .await?;
    let mut heads: Vec<Value> = heads.as_array().cloned().unwrap_or_default();
    heads.sort_by_key(|x| x["attempt"].as_str().map(str::to_owned));
    for (head, (n, model)) in heads.iter().zip([(1, &first), (2, &second)]) {
        assert_eq!(head["attempt"], json!(format!("Attempt {n} of 2")), "{heads:?}");
        assert!(head["meta"].as_str().is_some_and(|m| m.starts_with(&format!("pi · {model}"))), "{heads:?}");
        assert_eq!(head["tailCut"], json!(false), "{heads:?}");
    }
    browser.screenshot(&shots()?.join("attempts-pi-chats.png")).await?;
    compare(&mut browser).await?;
    let columns = browser
        .wait_for(
            "(() => { const cols = [...document.querySelectorAll('dialog.compare .compare-column')]; if (cols.length !== 2 || cols.some((c) => !/tokens/.test(c.querySelector('[data-field=tokens]').textContent) || c.querySelector('[data-field=state]').textContent !== 'idle')) return false; return cols.map((c) => ({ who: c.querySelector('.who').textContent, tokens: c.querySelector('[data-field=tokens]').textContent, lines: c.querySelector('[data-field=lines]').textContent })); })()",
        )
        .await?;
    eprintln!("compare view: {columns:#}");
    for (column, model) in columns.as_array().cloned().unwrap_or_default().iter().zip([&first, &second]) {
        assert_eq!(column["who"], json!(format!("pi · {model}")), "each attempt on the model picked for it: {columns}");
        assert_eq!(column["tokens"], json!("15 tokens (10 in, 5 out)"), "what the mock reported: {columns}");
        assert_eq!(column["lines"], json!("+0 −0 in 0 files"), "{columns}");
    }
    browser.screenshot(&shots()?.join("attempts-pi-compare.png")).await?;

    // Each attempt asked the model picked for it.
    let asked: Vec<String> = mock
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions") && r.all_text().contains("say hello"))
        .filter_map(|r| r.body["model"].as_str().map(str::to_owned))
        .collect();
    let mut asked_sorted = asked.clone();
    asked_sorted.sort();
    assert_eq!(asked_sorted, [MODEL_ID, SECOND_MODEL], "one request per attempt, each with its model: {asked:?}");

    // At 800×900 the task and the compare view still fit: every button inside its column.
    browser.open(&announced_page(&daemon).await?, 800, 900).await?;
    browser.wait_for("document.body.dataset.connection === 'online'").await?;
    compare(&mut browser).await?;
    let outside = browser
        .wait_for("(() => { const cols = [...document.querySelectorAll('dialog.compare .compare-column')]; if (cols.length !== 2 || cols.some((c) => !c.textContent.includes('No file changed.'))) return false; const out = []; for (const c of cols) { const box = c.getBoundingClientRect(); for (const b of c.querySelectorAll('button')) { const r = b.getBoundingClientRect(); if (r.left < box.left || r.right > box.right || r.right > innerWidth || r.bottom > innerHeight) out.push(b.textContent); } } return { out }; })()")
        .await?;
    assert_eq!(outside["out"], json!([]), "{outside}");
    browser.screenshot(&shots()?.join("attempts-narrow.png")).await?;
    browser.close().await
}
