//! A real browser for the web window's tests: headless Chromium (npm `@sparticuz/chromium`) under
//! `puppeteer-core`, run by `tests/browser/driver.mjs` and driven one JSON command per line.
//! `scripts/deps/browser.sh` installs both under `$AHPD_TEST_CACHE/browser`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use agent_runner::sync::lock;
use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long one command may take (a safety net, not a measurement).
const COMMAND_WITHIN: Duration = Duration::from_secs(120);

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where `scripts/deps/browser.sh` put the browser and its driver's packages.
pub fn browser_dir() -> PathBuf {
    let cache = std::env::var_os("AHPD_TEST_CACHE").map(PathBuf::from).unwrap_or_else(|| checkout().join(".cache"));
    let dir = cache.join("browser");
    assert!(
        dir.join("node_modules").join("puppeteer-core").exists() && dir.join("unpacked").join("chromium").exists(),
        "headless Chromium is not installed in {}: run scripts/test (or scripts/deps/browser.sh)",
        dir.display()
    );
    dir
}

/// A browser with one page at a time.
pub struct Browser {
    child: Child,
    /// Chromium's own pid: puppeteer starts it in a process group of its own.
    browser_pid: Option<i32>,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next: u64,
}

impl Browser {
    /// Starts the browser.
    pub async fn launch() -> anyhow::Result<Self> {
        let mut child = Command::new("node")
            .arg(checkout().join("tests").join("browser").join("driver.mjs"))
            .env("AHPD_BROWSER_DIR", browser_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // Its own group: the browser it starts goes with it, even when a test fails midway.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .context("running node tests/browser/driver.mjs")?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut this = Self { child, stdin, lines: BufReader::new(stdout).lines(), next: 1, browser_pid: None };
        // The driver's first answer (id 0) names the browser's pid.
        let started = tokio::time::timeout(COMMAND_WITHIN, async {
            loop {
                let Some(line) = this.lines.next_line().await? else { bail!("the browser driver exited") };
                if let Ok(answer) = serde_json::from_str::<Value>(&line) {
                    if answer["id"] == json!(0) {
                        return Ok(answer["value"]["browserPid"].as_i64());
                    }
                }
            }
        })
        .await
        .context("the browser did not start in time")??;
        this.browser_pid = started.and_then(|p| i32::try_from(p).ok());
        Ok(this)
    }

    /// Sends one command and answers its value.
    pub async fn call(&mut self, op: &str, mut args: Value) -> anyhow::Result<Value> {
        let id = self.next;
        self.next += 1;
        args["id"] = json!(id);
        args["op"] = json!(op);
        let mut line = serde_json::to_string(&args)?;
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.context("the browser driver is gone")?;
        self.stdin.flush().await?;
        let answer = tokio::time::timeout(COMMAND_WITHIN, async {
            loop {
                let Some(line) = self.lines.next_line().await? else {
                    bail!("the browser driver exited");
                };
                // Anything else a package prints on stdout is not an answer.
                let Ok(answer) = serde_json::from_str::<Value>(&line) else { continue };
                if answer["id"] == json!(id) {
                    return Ok(answer);
                }
            }
        })
        .await
        .with_context(|| format!("the browser did not answer {op} in time"))??;
        if answer["ok"] == json!(true) {
            Ok(answer["value"].clone())
        } else {
            bail!("{op} {}: {}", args, answer["error"].as_str().unwrap_or("failed"))
        }
    }

    /// Opens a new page at `url` with a window of `width`×`height`; answers the HTTP status.
    pub async fn open(&mut self, url: &str, width: u32, height: u32) -> anyhow::Result<u16> {
        let value = self.call("open", json!({ "url": url, "width": width, "height": height })).await?;
        Ok(u16::try_from(value["status"].as_u64().unwrap_or(0)).unwrap_or(0))
    }

    /// Loads `url` in the same page (the tab's sessionStorage stays); answers the HTTP status.
    pub async fn goto(&mut self, url: &str) -> anyhow::Result<u16> {
        let value = self.call("goto", json!({ "url": url })).await?;
        Ok(u16::try_from(value["status"].as_u64().unwrap_or(0)).unwrap_or(0))
    }

    /// Evaluates a JavaScript expression in the page (awaited); answers its JSON value.
    pub async fn eval(&mut self, js: &str) -> anyhow::Result<Value> {
        self.call("eval", json!({ "js": js })).await
    }

    /// Waits until a JavaScript expression is truthy in the page; answers its value.
    pub async fn wait_for(&mut self, js: &str) -> anyhow::Result<Value> {
        self.call("waitFor", json!({ "js": js, "timeoutMs": 60_000 })).await
    }

    /// Clicks the element `selector` names (waiting for it to show).
    pub async fn click(&mut self, selector: &str) -> anyhow::Result<()> {
        self.call("click", json!({ "selector": selector })).await.map(|_| ())
    }

    /// Types `text` into `selector`.
    pub async fn type_into(&mut self, selector: &str, text: &str) -> anyhow::Result<()> {
        self.call("type", json!({ "selector": selector, "text": text })).await.map(|_| ())
    }

    /// Clicks, with the mouse where it is drawn, the one control inside `within` (a CSS selector)
    /// whose words are `text`, as a person finds it: its visible text, else its aria-label or
    /// title. Refused when none or several say it, or when something covers it.
    pub async fn click_text(&mut self, within: &str, text: &str) -> anyhow::Result<()> {
        self.call("clickText", json!({ "within": within, "text": text })).await.map(|_| ())
    }

    /// Picks the option saying `option` in the list labelled `label` inside `within`.
    pub async fn choose_text(&mut self, within: &str, label: &str, option: &str) -> anyhow::Result<()> {
        self.call("chooseText", json!({ "within": within, "label": label, "option": option })).await.map(|_| ())
    }

    /// Fills the field labelled `label` (or with that placeholder) inside `within` with `text`.
    pub async fn fill_text(&mut self, within: &str, label: &str, text: &str) -> anyhow::Result<()> {
        self.call("fillText", json!({ "within": within, "label": label, "text": text })).await.map(|_| ())
    }

    /// Turns the mouse wheel over the element `selector` names (`dy` < 0 scrolls up).
    pub async fn wheel(&mut self, selector: &str, dy: f64) -> anyhow::Result<()> {
        self.call("wheel", json!({ "selector": selector, "dy": dy })).await.map(|_| ())
    }

    /// Presses a key.
    pub async fn press(&mut self, key: &str) -> anyhow::Result<()> {
        self.call("press", json!({ "key": key })).await.map(|_| ())
    }

    /// Saves a screenshot of the page.
    pub async fn screenshot(&mut self, path: &Path) -> anyhow::Result<()> {
        self.call("screenshot", json!({ "path": path })).await.map(|_| ())
    }

    /// What the page did besides: long tasks, dialogs, uncaught errors, requests elsewhere,
    /// policy violations.
    pub async fn observations(&mut self) -> anyhow::Result<Value> {
        self.call("observations", json!({})).await
    }

    /// Closes the browser.
    pub async fn close(mut self) -> anyhow::Result<()> {
        if self.call("close", json!({})).await.is_ok() {
            // Closed and reaped by the driver: its pid is no longer ours to signal.
            self.browser_pid = None;
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        Ok(())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        use nix::sys::signal::{killpg, Signal};
        use nix::unistd::Pid;
        // Both groups: the driver's, and the browser's own (a closed browser's pid is gone).
        if let Some(pid) = self.browser_pid {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// `s` as a JavaScript string literal, to splice into a script the page runs.
pub fn js_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// The page address `daemon` announced (its `web:` line, with the token).
pub async fn announced_page(daemon: &crate::Daemon) -> anyhow::Result<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let lines = lock(&daemon.stdout).clone();
        if let Some(line) = lines.iter().find_map(|l| l.strip_prefix("web: ")) {
            return Ok(line.to_owned());
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "no web: line in {lines:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the page says it is connected.
pub async fn online(browser: &mut Browser) -> anyhow::Result<()> {
    browser.wait_for("document.body.dataset.connection === 'online'").await.map(|_| ())
}

/// The selector of the page's pane that shows `chat`.
pub fn pane(chat: &str) -> String {
    format!(".pane[data-chat=\"{chat}\"]")
}

/// JavaScript that answers the text the page's terminal `uri` shows.
pub fn screen_js(uri: &str) -> String {
    format!("[...window.ahpd.terminalViews].find((v) => v.uri === {})?.text() ?? ''", js_str(uri))
}

/// The terminal the pane of `chat` shows, once the page holds its state.
pub async fn shown_terminal(browser: &mut Browser, chat: &str) -> anyhow::Result<String> {
    let js = format!(
        "document.querySelector({})?.dataset.terminal",
        js_str(&format!("{} .term-drawer:not([hidden]) .term-screen", pane(chat)))
    );
    let uri = browser.wait_for(&format!("window.ahpd.terminals.has({js}) && {js}")).await?;
    uri.as_str().map(str::to_owned).ok_or_else(|| anyhow::anyhow!("no terminal: {uri}"))
}
