// terminal.js: a terminal the host lists, in the page — its output drawn with colours by xterm.js
// (vendored, pinned: vendor/xterm.mjs, loaded the first time a terminal opens), what the person
// types sent as `terminal/input`, the view's size as `terminal/resized`. A pane's drawer opens on
// a shell that runs (the one it showed last, the session's newest, else a new one in the session's
// folder with `createTerminal`), shows any of the root's terminals picked from its list, and a tool
// call's or a `!` command's when asked.
//
// The page's policy lets no inline style in: xterm.js's own <style> elements are given to it as
// constructed stylesheets, and its `style` attributes go through the CSSOM instead.

import { h, uuid } from './dom.js';

let loading = null;

/** xterm.js and its fit addon, loaded once; their stylesheet with them. */
function load() {
  loading ??= (async () => {
    const link = document.createElement('link');
    link.rel = 'stylesheet';
    link.href = '/ui/xterm.css';
    document.head.append(link);
    styleAttributesThroughCssom();
    const [{ Terminal }, { FitAddon }] = await Promise.all([import('./xterm.mjs'), import('./xterm-addon-fit.mjs')]);
    return { Terminal, FitAddon };
  })();
  return loading;
}

/** A `style` attribute set from script becomes the same declarations set through the CSSOM. */
function styleAttributesThroughCssom() {
  const set = Element.prototype.setAttribute;
  Element.prototype.setAttribute = function setAttribute(name, value) {
    if (String(name).toLowerCase() === 'style' && this.style) { this.style.cssText = String(value); return; }
    set.call(this, name, value);
  };
}

/**
 * Runs `fn` with `document.createElement('style')` answering a hidden stand-in whose text becomes
 * a constructed stylesheet of the document (what xterm.js writes into its <style> elements).
 */
function withSheets(fn) {
  const create = document.createElement;
  document.createElement = function createElement(tag, options) {
    if (String(tag).toLowerCase() !== 'style') return create.call(document, tag, options);
    const stand = create.call(document, 'ahpd-sheet');
    const sheet = new CSSStyleSheet();
    let text = '';
    document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
    Object.defineProperty(stand, 'textContent', {
      get: () => text,
      set: (value) => { text = String(value ?? ''); sheet.replaceSync(text); },
    });
    const remove = stand.remove.bind(stand);
    stand.remove = () => { document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => s !== sheet); remove(); };
    return stand;
  };
  try { return fn(); } finally { document.createElement = create; }
}

/** What a terminal printed, its parts joined as AHP says a plain consumer does. */
export function outputOf(state) {
  return (state?.content ?? []).map((p) => (p.type === 'command' ? p.output : p.value) ?? '').join('');
}

/** Folds a terminal action into its state (the part of the official reducer the page needs). */
export function applyTerminal(t, a) {
  switch (a.type) {
    case 'terminal/data': {
      const last = t.content[t.content.length - 1];
      if (last?.type === 'command' && !last.isComplete) last.output += a.data;
      else if (last && last.type !== 'command') last.value += a.data;
      else t.content.push({ type: 'unclassified', value: a.data });
      break;
    }
    case 'terminal/resized': t.cols = a.cols; t.rows = a.rows; break;
    case 'terminal/claimed': t.claim = a.claim; break;
    case 'terminal/titleChanged': t.title = a.title; break;
    case 'terminal/cwdChanged': t.cwd = a.cwd; break;
    case 'terminal/exited': t.lifecycle = { status: 'exited', ...(a.exitCode !== undefined ? { exitCode: a.exitCode } : {}) }; break;
    case 'terminal/cleared': t.content = []; break;
    case 'terminal/commandExecuted':
      t.content.push({ type: 'command', commandId: a.commandId, commandLine: a.commandLine, output: '', timestamp: a.timestamp, isComplete: false });
      break;
    case 'terminal/commandFinished': {
      const c = t.content.find((p) => p.type === 'command' && p.commandId === a.commandId);
      if (c) Object.assign(c, { isComplete: true, exitCode: a.exitCode, durationMs: a.durationMs });
      break;
    }
    default: return false;
  }
  return true;
}

const running = (state) => state?.lifecycle?.status !== 'exited';

/** One terminal drawn by xterm.js: output in, keys and size out. */
export class TerminalView {
  constructor(app, uri) {
    this.app = app;
    this.uri = uri;
    this.el = h('div', { class: 'term-screen', data: { terminal: uri } });
    this.term = null;
    this.state = null;
    this.sent = '';
    /** Called after the state changed (the drawer redraws its status). */
    this.changed = () => {};
  }

  /** Draws xterm.js into the view (once it is in the page, so it can measure itself). */
  async mount() {
    const { Terminal, FitAddon } = await load();
    const dark = matchMedia('(prefers-color-scheme: dark)').matches;
    this.term = withSheets(() => new Terminal({
      convertEol: false, cursorBlink: true, fontSize: 12.5, scrollback: 5000,
      fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace',
      theme: dark ? { background: '#0f1216' } : { background: '#1d2330', foreground: '#e6e9ef' },
      // A link a program prints stays text: nothing in a terminal opens anything.
      linkHandler: { activate: () => {} },
    }));
    this.fit = new FitAddon();
    this.term.loadAddon(this.fit);
    withSheets(() => this.term.open(this.el));
    this.term.onData((data) => {
      if (running(this.state)) this.app.act(this.uri, { type: 'terminal/input', data });
    });
    this.sizer = new ResizeObserver(() => this.fitNow());
    this.sizer.observe(this.el);
    this.fitNow();
    if (this.state) this.reset(this.state);
  }

  /** Fits the columns and rows to the view; tells the host when they changed. */
  fitNow() {
    if (!this.term || !this.el.isConnected || !this.el.clientWidth) return;
    const size = this.fit.proposeDimensions();
    if (!size || !(size.cols > 0) || !(size.rows > 0)) return;
    if (size.cols !== this.term.cols || size.rows !== this.term.rows) this.term.resize(size.cols, size.rows);
    const key = `${size.cols}x${size.rows}`;
    if (this.state && running(this.state) && key !== this.sent && (this.state.cols !== size.cols || this.state.rows !== size.rows)) {
      this.sent = key;
      this.app.act(this.uri, { type: 'terminal/resized', cols: size.cols, rows: size.rows });
    }
  }

  /** The size the view would have, for a terminal about to be created. */
  size() {
    const size = this.fit?.proposeDimensions();
    return size && size.cols > 0 && size.rows > 0 ? size : { cols: 80, rows: 24 };
  }

  /** A snapshot: everything is written again. */
  reset(state) {
    this.state = state;
    if (!this.term) return;
    this.term.reset();
    this.term.write(outputOf(state));
    this.fitNow();
  }

  /** An action folded into the state: the screen follows. */
  apply(a) {
    if (!this.term) return;
    if (a.type === 'terminal/data') this.term.write(a.data);
    else if (a.type === 'terminal/cleared') this.term.clear();
    else if (a.type === 'terminal/resized') this.fitNow();
  }

  /** The screen's text, line by line (for tests and the curious). */
  text() {
    const buffer = this.term?.buffer.active;
    if (!buffer) return '';
    const lines = [];
    for (let i = 0; i < buffer.length; i++) lines.push(buffer.getLine(i)?.translateToString(true) ?? '');
    return lines.join('\n').replace(/\n+$/, '');
  }

  focus() { this.term?.focus(); }

  dispose() {
    this.sizer?.disconnect();
    this.term?.dispose();
    this.el.remove();
  }
}

/** A pane's terminal drawer: which terminal, a new one, and the terminal itself. */
export class TerminalDrawer {
  constructor(app, pane) {
    this.app = app;
    this.pane = pane;
    this.view = null;
    /** The terminal this chat showed last (opened again by the next click on Terminal while it runs). */
    this.last = null;
    this.picker = h('select', { class: 'term-pick', 'aria-label': 'Terminal' });
    this.picker.addEventListener('change', () => { if (this.picker.value) this.show(this.picker.value); });
    this.status = h('span', { class: 'term-status' });
    this.endButton = h('button', { class: 'ghost danger', type: 'button', data: { action: 'end-terminal' }, title: 'End this terminal and what runs in it', on: { click: () => this.end() } }, 'End');
    this.host = h('div', { class: 'term-host' });
    this.el = h('div', { class: 'term-drawer', hidden: true },
      h('div', { class: 'term-bar' }, this.picker,
        h('button', { type: 'button', data: { action: 'new-terminal' }, title: 'A new terminal in the session’s folder', on: { click: () => this.create() } }, 'New terminal'),
        this.status, h('span', { class: 'spacer' }), this.endButton,
        h('button', { class: 'ghost close', type: 'button', title: 'Hide the terminal', 'aria-label': 'Hide the terminal', data: { action: 'hide-terminal' }, on: { click: () => this.hide() } }, '×')),
      this.host);
  }

  get open() { return !this.el.hidden; }

  /**
   * Opens the drawer on a terminal that runs: the one this chat showed last, else the session's
   * newest shell (not a `!` command's or a tool call's), else a new one in the session's folder,
   * so one click gives a prompt to type at.
   */
  toggle() {
    if (this.open) { this.hide(); return; }
    const shell = this.shellToReopen();
    if (shell) this.show(shell); else this.create();
  }

  shellToReopen() {
    const running = this.listed().filter((t) => t.lifecycle?.status !== 'exited');
    if (this.last && running.some((t) => t.resource === this.last)) return this.last;
    const shells = running.filter((t) => t.claim?.session === this.pane.session && !t.claim.turnId && !t.claim.toolCallId);
    return shells.at(-1)?.resource ?? null;
  }

  hide() {
    this.el.hidden = true;
    this.drop();
    this.app.saveLayout();
  }

  listed() { return this.app.root?.terminals ?? []; }

  /** The picker lists the root's terminals, the session's first, and the one shown. */
  refresh() {
    if (!this.open) return;
    const all = this.listed();
    const mine = all.filter((t) => t.claim?.session === this.pane.session);
    const others = all.filter((t) => t.claim?.session !== this.pane.session);
    const shown = this.view?.uri;
    const label = (t) => `${t.title || t.resource}${t.lifecycle?.status === 'exited' ? ' (exited)' : ''}`;
    const options = [h('option', { value: '', text: all.length ? 'Pick a terminal…' : 'No terminal yet' })];
    options.push(...mine.map((t) => h('option', { value: t.resource, text: label(t) })));
    if (others.length) options.push(h('optgroup', { label: 'Other sessions and clients' }, others.map((t) => h('option', { value: t.resource, text: label(t) }))));
    if (shown && !all.some((t) => t.resource === shown)) options.push(h('option', { value: shown, text: this.app.terminals.get(shown)?.title || shown }));
    const key = JSON.stringify([shown, this.app.terminals.get(shown)?.title, all.map((t) => [t.resource, label(t)])]);
    if (key === this.drawnKey) return;
    this.drawnKey = key;
    this.picker.replaceChildren(...options);
    this.picker.value = shown ?? '';
  }

  drawStatus() {
    this.refresh();
    const state = this.view ? this.app.terminals.get(this.view.uri) : null;
    const exited = state && !running(state);
    this.status.textContent = !this.view ? 'Pick one, or start a new one.' : !state ? 'connecting…' : exited ? `exited${state.lifecycle.exitCode !== undefined ? ` with ${state.lifecycle.exitCode}` : ''}` : (state.cwd ? state.cwd.replace(/^file:\/\//, '') : 'running');
    this.endButton.hidden = !state || exited;
  }

  /** Shows terminal `uri` in the drawer (subscribing to it). */
  async show(uri) {
    this.el.hidden = false;
    if (this.view?.uri === uri) { this.view.focus(); return; }
    this.drop();
    const view = new TerminalView(this.app, uri);
    this.view = view;
    this.last = uri;
    this.host.replaceChildren(view.el);
    view.changed = () => this.drawStatus();
    this.app.terminalViews.add(view);
    this.refresh();
    this.drawStatus();
    await view.mount();
    if (this.view !== view) return;
    await this.app.watchTerminal(uri);
    view.focus();
    this.app.saveLayout();
  }

  /** A new terminal in the session's folder, claimed by the session and this chat. */
  async create() {
    this.el.hidden = false;
    const folder = this.pane.folderUri();
    const uri = `ahp-terminal:/${uuid()}`;
    this.drop();
    const view = new TerminalView(this.app, uri);
    this.view = view;
    this.last = uri;
    this.host.replaceChildren(view.el);
    view.changed = () => this.drawStatus();
    this.app.terminalViews.add(view);
    this.status.textContent = 'starting…';
    await view.mount();
    const { cols, rows } = view.size();
    try {
      await this.app.conn.request('createTerminal', {
        channel: uri, claim: { kind: 'session', session: this.pane.session, chat: this.pane.chat },
        ...(folder ? { cwd: folder } : {}), cols, rows,
      });
    } catch (e) {
      this.drop();
      this.status.textContent = e.message;
      return;
    }
    if (this.view !== view) return;
    await this.app.watchTerminal(uri);
    this.refresh();
    view.focus();
    this.app.saveLayout();
  }

  async end() {
    const uri = this.view?.uri;
    if (!uri) return;
    try { await this.app.conn.request('disposeTerminal', { channel: uri }); } catch (e) { this.app.toast(e.message); }
  }

  /** Lets the shown terminal go (the channel too, when no other view shows it). */
  drop() {
    const view = this.view;
    if (!view) return;
    this.view = null;
    this.app.terminalViews.delete(view);
    view.dispose();
    this.app.releaseTerminal(view.uri);
    this.drawnKey = null;
  }
}
