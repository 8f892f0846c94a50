// driver.mjs: headless Chromium (@sparticuz/chromium) under puppeteer-core, driven by a Rust test
// one JSON command per stdin line, one JSON answer per stdout line: {id, ok, value} or
// {id, ok: false, error}. Every page it opens records, before any of the page's own code runs,
// its long tasks (PerformanceObserver 'longtask'), dialogs (alert/confirm), policy violations,
// uncaught errors, every request, and every request to anywhere but the daemon.
//
// Commands: {op: 'open', url, width, height} (a new page), 'goto' {url}, 'click' {selector},
// 'type' {selector, text}, 'press' {key, modifiers?} (held down around it), 'keyboard' {text}
// (typed key by key into whatever has the focus), 'select' {selector, value} (picks an option),
// 'eval' {js} (an expression, awaited in the page), 'waitFor' {js, timeoutMs} (until the
// expression is truthy; answers its value), 'screenshot' {path}, 'observations' (what was
// recorded), 'profileStart' and 'profileStop' (the functions that took the most time in between),
// 'close'.
//
// And as a person finds things, by the words they see: 'clickText' {text, within?} (the one shown
// control — button, link, summary, label — saying `text`, or named it by its aria-label or title,
// inside `within`; clicked with the mouse where it is drawn, refused when something else lies on
// top of it or when several say it), 'chooseText' {label, option, within?} (the option saying
// `option` in the list labelled `label`), 'fillText' {label, text, within?} (the field labelled or
// with the placeholder `label`), 'wheel' {selector, dy} (the mouse wheel over an element).

import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';
import { join } from 'node:path';

const modules = process.env.AHPD_BROWSER_DIR;
if (!modules) throw new Error('AHPD_BROWSER_DIR is not set');
const require = createRequire(join(modules, 'package.json'));
const chromium = require('@sparticuz/chromium');
const puppeteer = require('puppeteer-core');

// The package unpacks the browser into the temporary folder it is given; scripts/deps/browser.sh
// did that once, into unpacked/.
const tmp = process.env.TMPDIR;
process.env.TMPDIR = join(modules, 'unpacked');
const executablePath = await chromium.executablePath();
if (tmp === undefined) delete process.env.TMPDIR; else process.env.TMPDIR = tmp;

// The package's flags are for a serverless sandbox; these would also switch off the web security
// (same-origin, mixed content) the window's tests are about, or crowd everything into one process.
const args = chromium.args.filter((a) => !/disable-web-security|allow-running-insecure-content|single-process|disable-site-isolation/.test(a));
const browser = await puppeteer.launch({ executablePath, args, headless: true, protocolTimeout: 120_000 });
// The browser runs in a process group of its own: the test is told its pid so it can end the group
// even when this driver is killed.
console.log(JSON.stringify({ id: 0, ok: true, value: { browserPid: browser.process()?.pid ?? null } }));

let page = null;
const seen = { dialogs: [], errors: [], foreign: [], console: [], requests: [] };

// Runs in the page before its scripts: long tasks, policy violations.
function recorder() {
  window.__longTasks = [];
  window.__violations = [];
  try {
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) window.__longTasks.push({ start: Math.round(e.startTime), ms: Math.round(e.duration) });
    }).observe({ type: 'longtask', buffered: true });
  } catch (e) { window.__longTasks = null; }
  document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`));
}

async function open({ url, width = 1280, height = 800 }) {
  if (page) await page.close();
  page = await browser.newPage();
  await page.setViewport({ width, height });
  await page.evaluateOnNewDocument(recorder);
  const origin = new URL(url).origin;
  page.on('dialog', async (d) => { seen.dialogs.push(d.message()); await d.dismiss(); });
  page.on('pageerror', (e) => seen.errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warn') seen.console.push(m.text()); });
  page.on('request', (r) => {
    const u = r.url();
    seen.requests.push(u);
    if (!u.startsWith(origin) && !u.startsWith('data:')) seen.foreign.push(u);
  });
  const response = await page.goto(url, { waitUntil: 'domcontentloaded' });
  return { status: response?.status() ?? 0 };
}

/**
 * Runs in the page: the shown elements inside `within` matching `kinds` whose words are `text`
 * (their visible text, else their aria-label, placeholder or title; a form field's words are its
 * label's too). Answers them, or throws naming what was found.
 */
function byWords(within, kinds, text) {
  const norm = (s) => (s ?? '').replace(/\s+/g, ' ').trim();
  const shown = (el) => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0 && getComputedStyle(el).visibility !== 'hidden'; };
  const wordsOf = (el) => {
    const out = [norm(el.innerText), el.getAttribute('aria-label'), el.getAttribute('placeholder'), el.getAttribute('title')];
    const label = el.closest('label') ?? (el.id ? document.querySelector(`label[for="${el.id}"]`) : null);
    if (label && label !== el) out.push(norm(label.querySelector('span')?.innerText), norm(label.innerText));
    return out.filter(Boolean).map(norm);
  };
  const found = [];
  for (const root of document.querySelectorAll(within)) {
    for (const el of root.querySelectorAll(kinds)) if (shown(el) && wordsOf(el).includes(text) && !found.includes(el)) found.push(el);
  }
  // A checkbox inside the label that says it is the label's: one control, not two.
  return found.filter((el) => !found.some((other) => other !== el && other.contains(el)));
}

/** The one element `byWords` finds, or an error that says what was there instead. */
async function oneByWords(within, kinds, text, timeoutMs = 30_000) {
  // As an expression (the page's policy lets no eval run inside it; an evaluated string is the
  // debugger's).
  const js = `((found) => found.length ? found : null)((${byWords})(${JSON.stringify(within)}, ${JSON.stringify(kinds)}, ${JSON.stringify(text)}))`;
  const handle = await page.waitForFunction(js, { timeout: timeoutMs, polling: 'raf' }).catch(() => {
    throw new Error(`nothing shown inside ${within} says "${text}"`);
  });
  const count = await handle.evaluate((found) => found.length);
  if (count > 1) {
    const words = await handle.evaluate((found) => found.map((el) => el.outerHTML.slice(0, 120)));
    throw new Error(`${count} controls inside ${within} say "${text}": ${words.join(' | ')}`);
  }
  return handle.evaluateHandle((found) => found[0]);
}

const CONTROLS = 'button, a, summary, label, [role=button], input[type=checkbox], input[type=radio]';

const ops = {
  open,
  clickText: async ({ text, within = 'body' }) => {
    const el = await oneByWords(within, CONTROLS, text);
    const at = await el.evaluate((el) => {
      el.scrollIntoView({ block: 'nearest', inline: 'nearest' });
      const r = el.getBoundingClientRect();
      const x = r.left + r.width / 2;
      const y = r.top + r.height / 2;
      const top = document.elementFromPoint(x, y);
      const covered = top && top !== el && !el.contains(top) && !(el.tagName === 'LABEL' && el.control === top);
      return { x, y, covered: covered ? top.outerHTML.slice(0, 120) : null, inside: x >= 0 && y >= 0 && x <= innerWidth && y <= innerHeight };
    });
    if (!at.inside) throw new Error(`"${text}" is outside the window`);
    if (at.covered) throw new Error(`"${text}" is covered by ${at.covered}`);
    await page.mouse.click(at.x, at.y);
    return null;
  },
  chooseText: async ({ label, option, within = 'body' }) => {
    const el = await oneByWords(within, 'select', label);
    const value = await el.evaluate((s, option) => [...s.options].find((o) => o.textContent.trim() === option)?.value ?? null, option);
    if (value === null) throw new Error(`"${label}" offers no "${option}"`);
    await el.evaluate((s, value) => { s.focus(); s.value = value; s.dispatchEvent(new Event('input', { bubbles: true })); s.dispatchEvent(new Event('change', { bubbles: true })); }, value);
    return value;
  },
  fillText: async ({ label, text, within = 'body' }) => {
    const el = await oneByWords(within, 'input, textarea', label);
    await el.evaluate((f, text) => { f.focus(); f.value = text; f.dispatchEvent(new Event('input', { bubbles: true })); f.dispatchEvent(new Event('change', { bubbles: true })); }, text);
    return null;
  },
  wheel: async ({ selector, dy }) => {
    const box = await (await page.waitForSelector(selector, { visible: true, timeout: 30_000 })).boundingBox();
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.wheel({ deltaY: dy });
    return null;
  },
  goto: async ({ url }) => ({ status: (await page.goto(url, { waitUntil: 'domcontentloaded' }))?.status() ?? 0 }),
  click: async ({ selector }) => {
    // A list drawn again between finding the element and clicking it detaches the one found (no
    // click reached the page): the selector is looked up again.
    for (let tries = 1; ; tries++) {
      await page.waitForSelector(selector, { visible: true, timeout: 30_000 });
      try { await page.click(selector); return null; } catch (e) { if (tries >= 20 || !/detached/i.test(e.message)) throw e; }
    }
  },
  type: async ({ selector, text }) => { await page.waitForSelector(selector, { timeout: 30_000 }); await page.type(selector, text); return null; },
  press: async ({ key, modifiers = [] }) => {
    for (const m of modifiers) await page.keyboard.down(m);
    await page.keyboard.press(key);
    for (const m of [...modifiers].reverse()) await page.keyboard.up(m);
    return null;
  },
  keyboard: async ({ text }) => { await page.keyboard.type(text); return null; },
  select: async ({ selector, value }) => page.select(selector, value),
  eval: async ({ js }) => page.evaluate(`(async () => (${js}))()`),
  waitFor: async ({ js, timeoutMs = 30_000 }) => {
    const handle = await page.waitForFunction(js, { timeout: timeoutMs, polling: 'raf' });
    return handle.jsonValue();
  },
  screenshot: async ({ path }) => { await page.screenshot({ path }); return path; },
  observations: async () => ({
    ...seen,
    longTasks: await page.evaluate(() => window.__longTasks),
    violations: await page.evaluate(() => window.__violations),
  }),
  // A CPU profile of the page between the two: the functions that took the most time themselves.
  profileStart: async () => {
    page.__cdp ??= await page.createCDPSession();
    await page.__cdp.send('Profiler.enable');
    await page.__cdp.send('Profiler.setSamplingInterval', { interval: 200 });
    await page.__cdp.send('Profiler.start');
    page.__p0 = await page.evaluate(() => performance.now());
    return null;
  },
  profileStop: async () => {
    const { profile } = await page.__cdp.send('Profiler.stop');
    const self = new Map();
    const dt = new Map();
    profile.samples.forEach((id, i) => dt.set(id, (dt.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
    for (const node of profile.nodes) {
      const f = node.callFrame;
      const key = `${f.functionName || '(anonymous)'} ${f.url.split('/').pop()}:${f.lineNumber + 1}`;
      self.set(key, (self.get(key) ?? 0) + (dt.get(node.id) ?? 0) / 1000);
    }
    const top = [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, 20).map(([k, ms]) => `${Math.round(ms)} ms ${k}`);
    // Inside the longest long task: where its samples were.
    const tasks = (await page.evaluate(() => window.__longTasks)) ?? [];
    const longest = tasks.sort((a, b) => b.ms - a.ms)[0];
    if (!longest) return top;
    const byId = new Map(profile.nodes.map((n) => [n.id, n]));
    const parent = new Map();
    for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
    const inside = new Map();
    let t = profile.startTime;
    profile.samples.forEach((id, i) => {
      t += profile.timeDeltas[i] ?? 0;
      const ms = page.__p0 + (t - profile.startTime) / 1000;
      if (ms < longest.start || ms > longest.start + longest.ms) return;
      const names = [];
      for (let n = id; n !== undefined && names.length < 6; n = parent.get(n)) {
        const f = byId.get(n).callFrame;
        names.push(f.functionName || '(anon)');
      }
      const key = names.join(' < ');
      inside.set(key, (inside.get(key) ?? 0) + 1);
    });
    return top.concat([`longest task ${longest.ms} ms at ${longest.start}:`], [...inside.entries()].sort((a, b) => b[1] - a[1]).slice(0, 12).map(([k, n]) => `${n} samples ${k}`));
  },
  close: async () => { await browser.close(); setTimeout(() => process.exit(0), 10); return null; },
};

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  let command;
  try { command = JSON.parse(line); } catch (e) { console.log(JSON.stringify({ id: null, ok: false, error: `not JSON: ${e.message}` })); continue; }
  try {
    const value = await ops[command.op](command);
    console.log(JSON.stringify({ id: command.id, ok: true, value: value ?? null }));
  } catch (e) {
    console.log(JSON.stringify({ id: command.id, ok: false, error: String(e?.stack ?? e) }));
  }
}
await browser.close();
