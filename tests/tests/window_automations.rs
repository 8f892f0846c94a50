//! The window's Automations view (issue 41), in a real browser against a real daemon, every control
//! found by the words it shows: a daily automation created with a preview of its next occurrences
//! (the daemon's own computation) in the person's time zone, run now, its run's session opened
//! beside the others, where the confirmation the unattended run met waits for the person, and its
//! work merged from the Changes view; and one that starts on an event (a webhook) made in the same
//! form from the host's trigger definitions. Screenshots go to target/window-shots/.

use std::path::PathBuf;

use serde_json::json;
use tests::browser::{announced_page, js_str, online, Browser};
use tests::git::git;
use tests::{Daemon, DaemonOptions, TestClient};

fn shots() -> anyhow::Result<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("window-shots");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[tokio::test]
async fn a_daily_automation_is_created_with_a_preview_run_now_watched_and_its_work_merged() -> anyhow::Result<()> {
    let repo = tempfile::Builder::new().prefix("ahpd-automation-window-").tempdir()?;
    git(repo.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(repo.path().join("README.md"), "a project\n")?;
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-q", "-m", "first"]);
    let folder = repo.path().canonicalize()?.display().to_string();
    let config = json!({ "agents": { "notes": { "kind": "notes" }, "echo": { "kind": "echo" } } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 860).await?;
    online(&mut browser).await?;
    let shots = shots()?;

    // New automation: every day at 07:30, previewed before it is saved.
    browser.click_text("header", "Automations").await?;
    browser.wait_for("document.querySelector('dialog.automations[open] .automation-list')").await?;
    let view = "dialog.automations";
    browser.click_text(view, "New automation").await?;
    browser.fill_text(view, "Title", "Morning notes").await?;
    browser.fill_text(view, "Message", "edit NOTES.md written while nobody watched").await?;
    browser.choose_text(view, "Agent", "Notes").await?;
    browser.fill_text(view, "Folder", &folder).await?;
    browser.choose_text(view, "When", "Every day").await?;
    browser.fill_text(view, "At", "07:30").await?;
    let preview = browser
        .wait_for(
            "(() => { const l = [...document.querySelectorAll('dialog.automations ol.preview li')].map((li) => li.textContent); return l.length === 3 && l.every((t) => t.includes('07:30')) && l; })()",
        )
        .await?;
    eprintln!("preview: {preview}");
    browser.screenshot(&shots.join("automations-new.png")).await?;
    browser.click_text(view, "Create").await?;
    let row = "li.automation[data-automation=\"ahp-automation:/morning-notes\"]";
    let next = browser
        .wait_for(&format!(
            "document.querySelector({})?.textContent.startsWith('Next:') && document.querySelector({}).textContent",
            js_str(&format!("{row} .next")),
            js_str(&format!("{row} .next"))
        ))
        .await?;
    assert!(next.as_str().is_some_and(|n| n.contains("07:30")), "{next}");

    // Run now: the run's session meets a confirmation (nobody watched it to allow the edit).
    browser.click_text(row, "Run now").await?;
    browser
        .wait_for(&format!(
            "document.querySelector({})",
            js_str(&format!("{row} .run[data-status=running] button[data-action=open-run]"))
        ))
        .await?;
    browser.screenshot(&shots.join("automations-running.png")).await?;
    browser.click_text(&format!("{row} .run[data-status=running]"), "Open").await?;
    let pane = ".panes > .pane:not(.changes-pane)";
    browser.click(&format!("{pane} .part.tool.pending-confirmation button[data-option=allow]")).await?;
    // Allowed: the run completes; its work is in its own worktree, to merge.
    browser.click_text("header", "Automations").await?;
    browser
        .wait_for(&format!("document.querySelector({})", js_str(&format!("{row} .run[data-status=completed]"))))
        .await?;
    browser.screenshot(&shots.join("automations-completed.png")).await?;
    browser.click_text(&format!("{row} .run[data-status=completed]"), "Open").await?;
    browser.wait_for(&format!("document.querySelector({})", js_str(&format!("{pane} .changes-link")))).await?;
    browser.click(&format!("{pane} .pane-head .changes-link")).await?;
    browser
        .wait_for("document.querySelector('.changes-pane .ops button[data-operation=merge]:not([disabled])')")
        .await?;
    browser.click(".changes-pane .ops button[data-operation=merge]").await?;
    let said = browser.wait_for("document.querySelector('.changes-pane .op-done')?.textContent").await?;
    browser.screenshot(&shots.join("automations-merged.png")).await?;
    assert!(said.as_str().is_some_and(|s| s.starts_with("Merged")), "{said}");
    let merged = std::fs::read_to_string(repo.path().join("NOTES.md"))?;
    assert!(merged.contains("written while nobody watched"), "{merged}");
    browser.close().await?;
    Ok(())
}

#[tokio::test]
async fn an_automation_on_a_webhook_is_made_in_the_form_and_a_delivery_runs_it() -> anyhow::Result<()> {
    let repo = tempfile::Builder::new().prefix("ahpd-automation-event-").tempdir()?;
    git(repo.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(repo.path().join("README.md"), "a project\n")?;
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-q", "-m", "first"]);
    let folder = repo.path().canonicalize()?.display().to_string();
    let config = json!({ "agents": { "echo": { "kind": "echo", "displayName": "Echo" } } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut client = TestClient::connect(&daemon.url, "watcher").await?;
    client.subscribe(CATALOGUE).await?;
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 860).await?;
    online(&mut browser).await?;

    // Runs only when run, or when its webhook is called: an event the host defines, picked by
    // its title, with the setting its schema asks for.
    browser.click_text("header", "Automations").await?;
    browser.wait_for("document.querySelector('dialog.automations[open] .automation-list')").await?;
    let view = "dialog.automations";
    browser.click_text(view, "New automation").await?;
    browser.fill_text(view, "Title", "On deploy").await?;
    browser.fill_text(view, "Message", "say the deploy landed").await?;
    browser.choose_text(view, "Agent", "Echo").await?;
    browser.fill_text(view, "Folder", &folder).await?;
    browser.choose_text(view, "When", "Only when run").await?;
    browser.click_text(view, "Add an event").await?;
    let event = "dialog.automations fieldset.event-trigger";
    browser.choose_text(event, "Listen to", "Webhook").await?;
    // Saved without its secret: the form says what is missing and stays open.
    browser.click_text(view, "Create").await?;
    let said = browser.wait_for("document.querySelector('dialog.automations .form-error')?.textContent").await?;
    assert_eq!(said, json!("Event 1: Secret is needed."));
    let secret = "a-secret-the-form-was-given";
    browser.fill_text(event, "Secret", secret).await?;
    browser.screenshot(&shots()?.join("automations-event.png")).await?;
    browser.click_text(view, "Create").await?;

    let row = "li.automation[data-automation=\"ahp-automation:/on-deploy\"]";
    let when = browser
        .wait_for(&format!(
            "document.querySelector({}) && [document.querySelector({}).textContent, document.querySelector({}).textContent]",
            js_str(row),
            js_str(&format!("{row} .schedule")),
            js_str(&format!("{row} .next"))
        ))
        .await?;
    assert_eq!(when, json!(["Webhook", "On an event"]));
    // What the page made is what any client folds from the catalogue.
    let uri = "ahp-automation:/on-deploy";
    client.until("the automation in the catalogue", move |m| m.automation(uri).is_some()).await?;
    client.check_against_snapshot(CATALOGUE).await?;
    let entry = serde_json::to_value(client.mirror.automation(uri))?;
    let trigger = &entry["definition"]["triggers"][0];
    assert_eq!(trigger["kind"], "event", "{entry}");
    assert_eq!(trigger["type"], "webhook");
    assert_eq!(trigger["events"][0]["id"], "received");
    assert_eq!(trigger["config"]["secret"], secret);

    // Its webhook called with the secret: one run, shown in the row, completed.
    let base = daemon.url.replacen("ws://", "http://", 1);
    let response = reqwest::Client::new()
        .post(format!("{base}/hooks/on-deploy"))
        .header("Idempotency-Key", "delivery-1")
        .bearer_auth(secret)
        .send()
        .await?;
    assert!(response.status().is_success(), "{}", response.status());
    browser
        .wait_for(&format!("document.querySelector({})", js_str(&format!("{row} .run[data-status=completed]"))))
        .await?;

    // Edited again, the form shows the automation as it was saved: no schedule, and the event.
    browser.click_text(row, "Edit").await?;
    let shown = browser
        .wait_for(
            "(() => { const f = document.querySelector('dialog.automations fieldset.event-trigger'); return f && [document.querySelector('dialog.automations select[name=when]').value, f.querySelector('select').value, f.querySelector('input[name=config-secret]').value, f.querySelector('input[name=event]').checked]; })()",
        )
        .await?;
    assert_eq!(shown, json!(["none", "webhook", secret, true]));
    browser.screenshot(&shots()?.join("automations-event-edit.png")).await?;
    let observed = browser.observations().await?;
    anyhow::ensure!(observed["errors"].as_array().is_some_and(Vec::is_empty), "page errors: {}", observed["errors"]);
    browser.close().await?;
    Ok(())
}

const CATALOGUE: &str = "ahp-automations://";
