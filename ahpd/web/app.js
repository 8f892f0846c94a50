// app.js: the window onto the daemon. Every session of every agent with its state at a glance
// (filter and search), chats open side by side, a dialog to start a session on any agent, the
// automations (automations.js), and the
// connection that resumes by itself after `ahpd restart`. The token arrives in the address
// (`?tkn=`), moves to sessionStorage, and leaves the address bar at once.

import { h, ago, uriPath, pathUri, uuid } from './dom.js';
import { Connection, ROOT } from './rpc.js';
import { applyRoot, applySession, applyChat, Status, activityOf } from './reducer.js';
import { ChatPane, glance, confirmButtons } from './chat.js';
import { Attempts } from './attempts.js';
import { openChanges } from './changes.js';
import { applyTerminal } from './terminal.js';
import { Attention } from './attention.js';
import { installShortcuts } from './shortcuts.js';
import { Automations } from './automations.js';

const TOKEN_KEY = 'ahpd.token';
/** Which chats were open, in which order, the filter, and each chat's terminal: kept across reloads. */
const LAYOUT_KEY = 'ahpd.layout';

/** Takes the token out of the address bar; answers the one this tab holds. */
function takeToken() {
  const url = new URL(location.href);
  const given = url.searchParams.get('tkn') ?? url.searchParams.get('token');
  if (given !== null) {
    sessionStorage.setItem(TOKEN_KEY, given);
    url.searchParams.delete('tkn');
    url.searchParams.delete('token');
    history.replaceState(null, '', url.pathname + (url.search === '?' ? '' : url.search) + url.hash);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

/** The host's title for a session no message has named yet. */
const UNNAMED = 'New session';

const FILTERS = [['all', 'All'], ['working', 'Working'], ['waiting', 'Needs you'], ['idle', 'Idle'], ['failed', 'Failed'], ['archived', 'Archived']];

class App {
  constructor(root) {
    this.rootEl = root;
    this.root = null;
    this.defaultDirectory = null;
    this.sessions = new Map();
    this.sessionStates = new Map();
    this.chats = new Map();
    this.fromSeq = new Map();
    this.buffered = new Map();
    this.panes = [];
    this.filter = 'all';
    this.search = '';
    this.dirty = new Set();
    this.listDirty = true;
    this.frame = 0;
    this.watching = new Set();
    // Channels a view of its own folds (changesets, annotations): uri → its listeners.
    this.taps = new Map();
    this.terminals = new Map();
    this.terminalViews = new Set();
    this.layoutRestored = false;
    this.attention = new Attention(this);
    this.attempts = new Attempts(this);
    this.automations = new Automations(this);
    this.build();
    // Which chats are in sight in the panes area, or about to be (200 px from it). The others are not
    // rendered at all while they stream (`.out-of-sight`): with the panes in rows, the browser's
    // own `content-visibility: auto` would still render most of twenty.
    this.sight = new IntersectionObserver((entries) => {
      for (const e of entries) {
        const pane = this.panes.find((p) => p.el === e.target);
        if (!pane) continue;
        pane.visible = e.isIntersecting;
        pane.el.classList.toggle('out-of-sight', !pane.visible);
        if (pane.visible) pane.settle();
      }
    }, { root: this.panesEl, rootMargin: '200px 0px' });
    this.conn = new Connection({
      token: takeToken(),
      onResync: (kind, data) => this.resync(kind, data),
      onAction: (env) => this.action(env),
      onNotify: (method, params) => this.notify(method, params),
      onState: (state) => this.connectionState(state),
      onRefused: (why) => this.refused(why),
    });
    // For tests and the curious: what the page folded, and how it is doing.
    window.ahpd = this;
    this.conn.start();
    setInterval(() => { this.listDirty = true; this.schedule(); }, 30_000);
  }

  build() {
    this.status = h('span', { class: 'conn', text: 'connecting…' });
    this.searchInput = h('input', { type: 'search', placeholder: 'Search sessions', 'aria-label': 'Search sessions' });
    this.searchInput.addEventListener('input', () => { this.search = this.searchInput.value.trim().toLowerCase(); this.listDirty = true; this.schedule(); });
    const kept = this.savedLayout().filter;
    if (FILTERS.some(([key]) => key === kept)) this.filter = kept;
    this.filterEls = FILTERS.map(([key, label]) => h('button', {
      class: `filter${key === this.filter ? ' on' : ''}`, type: 'button', data: { filter: key },
      on: { click: () => { this.filter = key; this.filterEls.forEach((b) => b.classList.toggle('on', b.dataset.filter === key)); this.listDirty = true; this.schedule(); this.saveLayout(); } },
    }, label, h('span', { class: 'count' })));
    this.list = h('ul', { class: 'sessions', 'aria-label': 'Sessions' });
    this.panesEl = h('main', { class: 'panes' });
    this.welcome = h('div', { class: 'welcome' },
      h('h2', { text: 'Nothing open' }),
      h('p', { text: 'Pick a session on the left to watch it here; several open side by side. Or start a new one.' }),
      h('button', { class: 'primary', type: 'button', on: { click: () => this.newSession() } }, 'New session'));
    this.panesEl.append(this.welcome);
    this.toastEl = h('div', { class: 'toasts', role: 'status' });
    // The host's own notice (the root config's storeCannotWrite): shown while it says something.
    this.noticeEl = h('div', { class: 'notice', role: 'alert', id: 'store-notice', hidden: true });
    const top = h('header', { class: 'top' },
      h('span', { class: 'brand', text: 'ahpd' }), this.status,
      h('span', { class: 'spacer' }), this.attention.askButton,
      h('button', { class: 'ghost', type: 'button', data: { action: 'automations' }, on: { click: () => this.automations.show() } }, 'Automations'),
      h('button', { class: 'ghost', type: 'button', title: 'Keyboard shortcuts (?)', 'aria-label': 'Keyboard shortcuts', data: { action: 'keys' }, on: { click: () => this.shortcuts.show() } }, '?'),
      h('button', { class: 'primary', type: 'button', data: { action: 'new' }, on: { click: () => this.newSession() } }, 'New session'));
    const side = h('aside', { class: 'side' }, this.searchInput, h('div', { class: 'filters' }, this.filterEls), this.list);
    this.rootEl.replaceChildren(top, this.noticeEl, h('div', { class: 'body' }, side, this.panesEl), this.toastEl);
    this.shortcuts = installShortcuts(this);
  }

  // ---- the connection ----

  connectionState(state) {
    this.status.className = `conn ${state}`;
    this.status.textContent = { online: 'connected', connecting: 'connecting…', offline: 'reconnecting…' }[state] ?? state;
    document.body.dataset.connection = state;
  }

  refused(why) {
    sessionStorage.removeItem(TOKEN_KEY);
    this.rootEl.replaceChildren(h('main', { class: 'refusal', id: 'refusal' },
      h('h1', { text: 'This daemon did not let you in' }),
      h('p', { class: 'why', text: why || 'Refused.' }),
      h('p', {}, 'Open the address ', h('code', { text: 'ahpd connect' }), ' prints (or the one the daemon printed when it started): it carries the right token.')));
    document.body.className = 'refused';
  }

  resync(kind, data) {
    if (kind === 'snapshot') {
      for (const snap of data.snapshots) this.seed(snap);
      if (data.defaultDirectory) this.defaultDirectory = data.defaultDirectory;
    } else {
      for (const env of data.actions) this.action(env);
    }
    // Notifications missed while away are lost: the list is asked for again.
    this.loadSessions().catch((e) => this.toast(`Could not list sessions: ${e.message}`));
    for (const pane of this.panes) if (!this.chats.has(pane.chat)) this.watchChat(pane);
    // A tapped channel the daemon did not bring back (a changeset not computed yet) is told so.
    for (const [uri, listeners] of this.taps) if (!this.conn.subscriptions.has(uri)) for (const fn of listeners) fn(null, null);
    this.refreshWatches();
  }

  seed(snap) {
    const uri = snap.resource;
    if (this.taps.has(uri)) { for (const fn of this.taps.get(uri)) fn(null, snap); return; }
    this.fromSeq.set(snap.resource, snap.fromSeq);
    if (uri === ROOT) { this.root = snap.state; this.listDirty = true; }
    else if (uri.startsWith('ahp-session:')) { this.sessionStates.set(uri, snap.state); this.touchSession(uri); }
    else if (uri.startsWith('ahp-chat:')) {
      this.chats.set(uri, snap.state);
      for (const pane of this.panes) if (pane.chat === uri) pane.reset(snap.state);
    } else if (uri.startsWith('ahp-terminal:')) {
      this.terminals.set(uri, snap.state);
      for (const view of this.terminalViews) if (view.uri === uri) { view.reset(snap.state); view.changed(); }
    }
    const held = this.buffered.get(uri);
    this.buffered.delete(uri);
    for (const env of held ?? []) this.action(env);
    this.schedule();
  }

  async loadSessions() {
    const items = [];
    let cursor;
    do {
      const page = await this.conn.request('listSessions', { channel: ROOT, ...(cursor ? { cursor } : {}) });
      items.push(...page.items);
      cursor = page.nextCursor;
    } while (cursor);
    this.sessions = new Map(items.map((s) => [s.resource, s]));
    this.listDirty = true;
    this.schedule();
    this.refreshWatches();
    this.attention.update();
    if (!this.layoutRestored) { this.layoutRestored = true; this.restoreLayout(); }
  }

  action(env) {
    if (env.rejectionReason) { this.toast(env.rejectionReason); return; }
    const uri = env.channel;
    if (this.taps.has(uri)) { for (const fn of this.taps.get(uri)) fn(env, null); return; }
    if (this.buffered.has(uri)) { this.buffered.get(uri).push(env); return; }
    if (env.serverSeq <= (this.fromSeq.get(uri) ?? Infinity)) return;
    const a = env.action;
    if (uri === ROOT) {
      if (this.root && applyRoot(this.root, a)) this.listDirty = true;
    } else if (uri.startsWith('ahp-session:')) {
      const s = this.sessionStates.get(uri);
      if (s && applySession(s, a)) { this.touchSession(uri); this.attention.update(); }
    } else if (uri.startsWith('ahp-terminal:')) {
      const t = this.terminals.get(uri);
      if (t && applyTerminal(t, a)) for (const view of this.terminalViews) if (view.uri === uri) { view.apply(a); view.changed(); }
    } else if (uri.startsWith('ahp-chat:')) {
      const c = this.chats.get(uri);
      if (c && applyChat(c, a)) {
        for (const pane of this.panes) if (pane.chat === uri) this.dirty.add(pane);
        for (const view of this.changesViews?.values() ?? []) view.chatChanged(uri);
      }
    }
    this.schedule();
  }

  notify(method, p) {
    if (method === 'root/sessionAdded') this.sessions.set(p.summary.resource, p.summary);
    else if (method === 'root/sessionRemoved') {
      this.sessions.delete(p.session);
      for (const pane of [...this.panes]) if (pane.session === p.session) this.close(pane);
    } else if (method === 'root/sessionSummaryChanged') {
      const s = this.sessions.get(p.session);
      if (s) Object.assign(s, p.changes);
      this.touchSession(p.session);
    } else return;
    // A session come or gone changes what the chats of its task say ("Attempt 2 of 3").
    if (method !== 'root/sessionSummaryChanged') for (const pane of this.panes) this.dirty.add(pane);
    this.listDirty = true;
    this.refreshWatches();
    this.schedule();
    this.attention.update();
  }

  touchSession(uri) {
    this.listDirty = true;
    for (const pane of this.panes) if (pane.session === uri) this.dirty.add(pane);
  }

  /**
   * Sessions that run or wait are watched (their channel says what they wait for, and a
   * confirmation can be answered from the list); open ones too. Quiet ones are let go, so the
   * daemon may unload them.
   */
  refreshWatches() {
    const want = new Set(this.panes.map((p) => p.session));
    for (const uri of this.changesViews?.keys() ?? []) want.add(uri);
    for (const [uri, s] of this.sessions) {
      const a = activityOf(s.status);
      if (a === Status.InProgress || a === Status.InputNeeded) want.add(uri);
    }
    for (const uri of this.attempts.watched()) want.add(uri);
    for (const uri of want) if (!this.watching.has(uri)) this.watch(uri);
    for (const uri of [...this.watching]) if (!want.has(uri)) {
      this.watching.delete(uri);
      this.conn.unsubscribe(uri);
      this.sessionStates.delete(uri);
      this.fromSeq.delete(uri);
    }
  }

  async watch(uri) {
    this.watching.add(uri);
    await this.subscribe(uri);
  }

  async subscribe(uri) {
    if (this.buffered.has(uri)) return;
    this.buffered.set(uri, []);
    try {
      const snap = await this.conn.subscribe(uri);
      if (snap) this.seed(snap); else this.buffered.delete(uri);
    } catch (e) {
      this.buffered.delete(uri);
      if (e.code !== undefined) this.toast(`${uri}: ${e.message}`);
    }
  }

  /** What a session waits for from a person, in words, when its channel is watched. */
  waitingFor(uri) {
    const kinds = new Set((this.sessionStates.get(uri)?.inputNeeded ?? []).map((r) => r.kind));
    if (kinds.has('toolConfirmation')) return 'confirmation';
    if (kinds.has('chatInput')) return 'question';
    if (kinds.has('toolAuthentication')) return 'sign-in';
    if (kinds.has('toolClientExecution')) return 'client tool';
    return null;
  }

  /** Subscribes to a terminal a view shows. */
  watchTerminal(uri) {
    return this.subscribe(uri);
  }

  /** A terminal no view shows any more is let go. */
  releaseTerminal(uri) {
    if ([...this.terminalViews].some((v) => v.uri === uri)) return;
    this.conn.unsubscribe(uri);
    this.terminals.delete(uri);
    this.fromSeq.delete(uri);
  }

  // ---- what survives a reload ----

  savedLayout() {
    for (const store of [sessionStorage, localStorage]) {
      try {
        const saved = JSON.parse(store.getItem(LAYOUT_KEY) ?? 'null');
        if (saved && typeof saved === 'object') return saved;
      } catch { /* a layout that does not read is no layout */ }
    }
    return {};
  }

  saveLayout() {
    if (!this.layoutRestored) return;
    const layout = {
      open: this.panes.map((p) => p.session),
      filter: this.filter,
      terminals: Object.fromEntries(this.panes.filter((p) => p.drawer.open && p.drawer.view).map((p) => [p.session, p.drawer.view.uri])),
    };
    const text = JSON.stringify(layout);
    for (const store of [sessionStorage, localStorage]) try { store.setItem(LAYOUT_KEY, text); } catch { /* full or refused: not kept */ }
  }

  /** Opens the chats that were open before the reload, in their order, with their terminals. */
  async restoreLayout() {
    const saved = this.savedLayout();
    const open = (Array.isArray(saved.open) ? saved.open : []).filter((uri) => this.sessions.has(uri));
    for (const uri of [...open].reverse()) {
      await this.open(uri, { quiet: true });
      const terminal = saved.terminals?.[uri];
      const pane = this.panes.find((p) => p.session === uri);
      if (terminal && pane) pane.drawer.show(terminal);
    }
    this.saveLayout();
  }

  // ---- doing things ----

  act(channel, action) {
    try { this.conn.dispatch(channel, action); } catch (e) { this.toast(`Not sent: ${e.message}`); }
  }

  async open(session, { quiet = false } = {}) {
    const existing = this.panes.find((p) => p.session === session);
    if (existing) { existing.el.scrollIntoView({ behavior: 'smooth', block: 'nearest', inline: 'nearest' }); existing.input.focus({ preventScroll: true }); return; }
    const summary = this.sessions.get(session);
    const pane = new ChatPane(this, session, summary?.defaultChat ?? null);
    // The newest comes first, where the eye is; the others move right.
    this.panes.unshift(pane);
    this.welcome.remove();
    this.panesEl.prepend(pane.el);
    this.panesEl.scrollTop = 0;
    this.sight.observe(pane.el);
    this.listDirty = true;
    this.saveLayout();
    if (!this.watching.has(session)) await this.watch(session);
    await this.watchChat(pane);
    if (!quiet) pane.input.focus({ preventScroll: true });
  }

  async watchChat(pane) {
    if (!pane.chat) {
      // A session still starting has no chat yet: wait for its default one.
      const s = this.sessionStates.get(pane.session);
      pane.chat = s?.defaultChat ?? s?.chats?.[0]?.resource ?? null;
      if (!pane.chat) { setTimeout(() => this.panes.includes(pane) && this.watchChat(pane), 200); return; }
      pane.el.dataset.chat = pane.chat;
    }
    await this.subscribe(pane.chat);
  }

  close(pane) {
    this.panes = this.panes.filter((p) => p !== pane);
    pane.drawer.drop();
    pane.sizes.disconnect();
    this.saveLayout();
    this.sight.unobserve(pane.el);
    pane.el.remove();
    if (pane.chat && !this.panes.some((p) => p.chat === pane.chat)) {
      this.conn.unsubscribe(pane.chat);
      this.chats.delete(pane.chat);
      this.fromSeq.delete(pane.chat);
    }
    if (!this.panes.length && !this.changesViews?.size) this.panesEl.append(this.welcome);
    this.listDirty = true;
    this.refreshWatches();
    this.schedule();
  }

  /** The Changes view of a session (changes.js), beside its chat. */
  openChanges(session, opts) {
    return openChanges(this, session, opts).catch((e) => this.toast(`Changes: ${e.message}`));
  }

  archive(session) {
    const status = this.sessionStates.get(session)?.status ?? this.sessions.get(session)?.status ?? 0;
    this.act(session, { type: 'session/isArchivedChanged', isArchived: !(status & Status.IsArchived) });
  }

  async remove(session) {
    const title = this.titleOf(session);
    if (!(await this.ask(`Delete “${title}”? Its chats go with it; this cannot be undone.`, 'Delete'))) return;
    try { await this.conn.request('disposeSession', { channel: session }); } catch (e) { this.toast(e.message); }
  }

  /** A small modal question; answers true for `yes`. */
  ask(question, yes) {
    return new Promise((resolve) => {
      const dialog = h('dialog', { class: 'ask' },
        h('p', { text: question }),
        h('div', { class: 'dialog-actions' },
          h('button', { type: 'button', on: { click: () => { dialog.close(); resolve(false); } } }, 'Keep'),
          h('button', { class: 'danger', type: 'button', data: { action: 'confirm' }, on: { click: () => { dialog.close(); resolve(true); } } }, yes)));
      dialog.addEventListener('close', () => { dialog.remove(); resolve(false); });
      document.body.append(dialog);
      dialog.showModal();
    });
  }

  toast(message) {
    const el = h('div', { class: 'toast', text: message });
    this.toastEl.append(el);
    setTimeout(() => el.remove(), 6000);
  }

  // ---- a new session ----

  async newSession() {
    const agents = this.root?.agents ?? [];
    if (!agents.length) { this.toast('No agent is running yet.'); return; }
    // The last choices made here, in this browser (keepChoices says what is kept).
    const last = lastChoices();
    const agentSelect = h('select', { name: 'agent', 'aria-label': 'Agent' }, agents.map((a) => h('option', { value: a.provider, text: a.displayName || a.provider, selected: a.provider === last.agent })));
    const folder = h('input', { name: 'folder', type: 'text', value: last.folder ?? uriPath(this.defaultDirectory ?? ''), placeholder: '/path/to/project', 'aria-label': 'Folder' });
    const fields = h('div', { class: 'schema' });
    const about = h('p', { class: 'agent-about' });
    const error = h('p', { class: 'form-error' });
    let values = { ...(last.config?.[agentSelect.value] ?? {}) };
    let schema = { properties: {} };
    const resolve = async (remembered = false) => {
      const provider = agentSelect.value;
      const agent = agents.find((a) => a.provider === provider);
      about.textContent = agent?.description ?? '';
      try {
        const r = await this.conn.request('resolveSessionConfig', { channel: ROOT, provider, ...(folder.value.trim() ? { workingDirectory: pathUri(folder.value) } : {}), config: values });
        schema = r.schema;
        values = r.values ?? {};
        fields.replaceChildren(...schemaFields(schema, values, agent, (key, value) => { values = { ...values, [key]: value }; resolve(); }), ...offered(agent, r._meta?.commands));
        error.textContent = '';
      } catch (e) {
        // A choice remembered from before that the agent no longer takes: start from its defaults.
        if (remembered && Object.keys(values).length) { values = {}; await resolve(); return; }
        error.textContent = e.message;
      }
    };
    agentSelect.addEventListener('change', () => { values = { ...(last.config?.[agentSelect.value] ?? {}) }; resolve(true); });
    const create = h('button', { class: 'primary', type: 'button', data: { action: 'create' } }, 'Start');
    const several = this.attempts.section(agents, agentSelect);
    const dialog = h('dialog', { class: 'new-session' },
      h('h2', { text: 'New session' }),
      h('label', {}, h('span', { text: 'Agent' }), agentSelect), about,
      h('label', {}, h('span', { text: 'Folder' }), folder),
      fields, several.el, error,
      h('div', { class: 'dialog-actions' }, h('button', { type: 'button', on: { click: () => dialog.close() } }, 'Cancel'), create));
    create.addEventListener('click', async () => {
      const session = `ahp-session:/${uuid()}`;
      const config = {};
      for (const [key, prop] of Object.entries(schema.properties ?? {})) if (!prop.readOnly && values[key] !== undefined) config[key] = values[key];
      const plan = several.plan();
      const keep = () => keepChoices(agentSelect.value, folder.value.trim(), schema, config);
      if (plan) {
        // Several attempts at one task (attempts.js): the settings chosen go to the attempts on this agent.
        try {
          await this.attempts.start(plan, folder.value.trim() ? pathUri(folder.value) : null, (p) => (p === agentSelect.value ? config : {}));
          keep();
          dialog.close();
        } catch (e) { error.textContent = e.message; }
        return;
      }
      try {
        await this.conn.request('createSession', {
          channel: session, provider: agentSelect.value,
          ...(folder.value.trim() ? { workingDirectories: [pathUri(folder.value)] } : {}),
          ...(Object.keys(config).length ? { config } : {}),
        });
        keep();
        dialog.close();
        this.open(session);
      } catch (e) { error.textContent = e.message; }
    });
    dialog.addEventListener('close', () => dialog.remove());
    document.body.append(dialog);
    dialog.showModal();
    await resolve(true);
  }

  // ---- drawing ----

  schedule() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      const panes = [...this.dirty];
      this.dirty.clear();
      // Nothing here reads the layout: a following chat is kept at the bottom by its
      // ResizeObserver, after the browser's own layout of the frame (chat.js).
      for (const pane of panes) {
        const state = this.chats.get(pane.chat);
        if (state && pane.state !== state) pane.reset(state); else pane.draw();
      }
      if (this.listDirty) { this.listDirty = false; this.drawList(); }
      this.drawNotice();
    });
  }

  drawNotice() {
    const values = this.root?.config?.values ?? {};
    // The host's notices: its store, and each remote host whose link is not up (remoteLinks).
    const links = values.remoteLinks ?? {};
    const lines = values.storeCannotWrite ? [values.storeCannotWrite] : [];
    for (const [name, state] of Object.entries(links)) if (state !== 'connected') lines.push(`${name}: ${state}`);
    const text = lines.join('\n');
    if (this.noticeEl.textContent !== text) this.noticeEl.textContent = text;
    this.noticeEl.hidden = !text;
    const seen = JSON.stringify(links);
    if (seen !== this.linksSeen) { this.linksSeen = seen; this.drawList(); }
  }

  drawList() {
    const all = [...this.sessions.values()].sort((a, b) => (b.modifiedAt ?? '').localeCompare(a.modifiedAt ?? ''));
    const counts = Object.fromEntries(FILTERS.map(([k]) => [k, 0]));
    const shown = [];
    for (const s of all) {
      const kind = this.kindOf(s);
      counts.all += kind !== 'archived' ? 1 : 0;
      counts[kind]++;
      const matches = this.filter === 'all' ? kind !== 'archived' : kind === this.filter;
      if (matches && this.matchesSearch(s)) shown.push(s);
    }
    for (const b of this.filterEls) b.querySelector('.count').textContent = counts[b.dataset.filter] ? String(counts[b.dataset.filter]) : '';
    const open = new Set(this.panes.map((p) => p.session));
    const items = this.attempts.group(shown, (s) => this.listItem(s, open.has(s.resource)));
    if (!items.length) items.push(h('li', { class: 'none', text: this.sessions.size ? 'No session matches.' : 'No sessions yet.' }));
    this.list.replaceChildren(...items);
    this.attempts.draw();
    for (const pane of this.panes) pane.drawer.refresh();
  }

  /**
   * The title a person reads for a session: its own; until its first message names it (the host
   * calls every new one "New session"), what it is: its agent and its folder.
   */
  titleOf(uri) {
    const s = this.sessionStates.get(uri);
    const summary = this.sessions.get(uri);
    const title = s?.title ?? summary?.title ?? '';
    if (title && title !== UNNAMED) return title;
    const provider = summary?.provider ?? s?.provider ?? '';
    const agent = this.root?.agents?.find((a) => a.provider === provider)?.displayName || provider || 'agent';
    const folder = uriPath((s?.workingDirectories ?? summary?.workingDirectories ?? [])[0]).replace(/\/+$/, '').split('/').pop();
    return folder ? `New ${agent} session in ${folder}` : `New ${agent} session`;
  }

  kindOf(s) {
    const [cls] = glance(s.status, this.waitingFor(s.resource));
    if (s.status & Status.IsArchived) return 'archived';
    return cls === 'streaming' ? 'working' : cls;
  }

  matchesSearch(s) {
    if (!this.search) return true;
    const hay = `${this.titleOf(s.resource)} ${s.provider} ${(s.workingDirectories ?? []).map(uriPath).join(' ')} ${s.activity ?? ''}`.toLowerCase();
    return hay.includes(this.search);
  }

  /** The agent, and for a remote host's session (`echo@devbox`) the machine, with its link's
   * state when it is not up. */
  providerChips(provider = '') {
    const at = provider.lastIndexOf('@');
    if (at <= 0) return [h('span', { class: 'provider', text: provider })];
    const machine = provider.slice(at + 1);
    const state = this.root?.config?.values?.remoteLinks?.[machine];
    const down = state && state !== 'connected';
    return [h('span', { class: 'provider', text: provider.slice(0, at) }),
      h('span', { class: `machine${down ? ' down' : ''}`, title: down ? `${machine}: ${state}` : `runs on ${machine}`,
        text: down ? `${machine}: ${state.split(':')[0]}` : machine })];
  }

  listItem(s, isOpen) {
    const [cls, words] = glance(s.status, this.waitingFor(s.resource));
    const state = this.sessionStates.get(s.resource);
    const li = h('li', { class: `session ${cls}${isOpen ? ' open' : ''}`, data: { session: s.resource }, tabindex: 0, on: {
      click: (e) => { if (!e.target.closest('button')) this.open(s.resource); },
      keydown: (e) => { if (e.key === 'Enter' && e.target === e.currentTarget) this.open(s.resource); },
    } },
      h('div', { class: 'row' }, h('span', { class: `dot ${cls}`, 'aria-hidden': 'true' }), h('span', { class: 'title', text: this.titleOf(s.resource) }), h('span', { class: 'when', text: ago(s.modifiedAt) })),
      h('div', { class: 'row sub' }, ...this.providerChips(s.provider), h('span', { class: `state ${cls}`, text: words }),
        s.activity ? h('span', { class: 'activity', text: s.activity }) : null,
        s.changes?.files ? h('button', { class: 'ghost changes-link', type: 'button', data: { action: 'changes' }, title: 'Show what it changed',
          on: { click: () => this.openChanges(s.resource) } }, `+${s.changes.additions ?? 0} −${s.changes.deletions ?? 0}`) : null));
    // A confirmation can be answered here, without opening the chat.
    for (const r of state?.inputNeeded ?? []) {
      if (r.kind !== 'toolConfirmation' || r.toolCall?.status !== 'pending-confirmation') continue;
      li.append(h('div', { class: 'inline-confirm' },
        h('span', { text: r.toolCall.confirmationTitle ? (typeof r.toolCall.confirmationTitle === 'string' ? r.toolCall.confirmationTitle : r.toolCall.confirmationTitle.markdown) : r.toolCall.displayName }),
        h('span', { class: 'inline-actions' }, ...confirmButtons(this, r.turnId, r.toolCall, r.chat))));
    }
    return li;
  }
}

/** What New session remembers, per browser: the last agent and folder, and per agent the choices
 *  made from its schema. */
const CHOICES_KEY = 'ahpd.newSession';

function lastChoices() {
  try {
    const kept = JSON.parse(localStorage.getItem(CHOICES_KEY) ?? '{}');
    return kept && typeof kept === 'object' ? kept : {};
  } catch { return {}; }
}

/**
 * Keeps the choices a session was started with. Only what was picked from a list or ticked (an
 * enum, a boolean: the model, the mode, the isolation, when to ask) is kept, never what was typed
 * into a setting (a branch name, a key, a token): nothing secret reaches the browser's storage.
 */
function keepChoices(agent, folder, schema, config) {
  const kept = lastChoices();
  const choices = {};
  for (const [key, value] of Object.entries(config)) {
    const prop = schema.properties?.[key];
    const picked = Array.isArray(prop?.enum) || prop?.type === 'boolean';
    if (picked && !prop.writeOnly && prop.format !== 'password') choices[key] = value;
  }
  const next = { agent, folder, config: { ...(kept.config ?? {}), [agent]: choices } };
  try { localStorage.setItem(CHOICES_KEY, JSON.stringify(next)); } catch { /* full or refused: not kept */ }
}

/** Fields for a session config schema: enums as choices, booleans as boxes, the rest as text. */
function schemaFields(schema, values, agent, changed) {
  const out = [];
  for (const [key, prop] of Object.entries(schema.properties ?? {})) {
    if (prop.readOnly) continue;
    const value = values[key] ?? prop.default;
    let input;
    if (Array.isArray(prop.enum)) {
      input = h('select', { name: key }, prop.enum.map((v, i) => h('option', { value: JSON.stringify(v), text: prop.enumLabels?.[i] ?? String(v), selected: JSON.stringify(v) === JSON.stringify(value) })));
      input.addEventListener('change', () => changed(key, JSON.parse(input.value)));
    } else if (prop.type === 'boolean') {
      input = h('input', { type: 'checkbox', name: key, checked: !!value });
      input.addEventListener('change', () => changed(key, input.checked));
    } else if (prop.type === 'number' || prop.type === 'integer') {
      input = h('input', { type: 'number', name: key, value: value ?? '' });
      input.addEventListener('change', () => changed(key, Number(input.value)));
    } else {
      input = h('input', { type: 'text', name: key, value: typeof value === 'string' ? value : '' });
      input.addEventListener('change', () => changed(key, input.value));
    }
    out.push(h('label', { title: prop.description ?? '' }, h('span', { text: prop.title || key }), input,
      prop.description ? h('small', { text: prop.description }) : null));
  }
  return out;
}

/** What the agent offers beyond its settings, known before any session of it (remembered by the
 *  host across restarts): its models and the commands behind a slash. */
function offered(agent, commands) {
  const out = [];
  if (agent?.models?.length) out.push(h('p', { class: 'agent-about', data: { offer: 'models' }, text: `Models: ${agent.models.map((m) => m.name).join(', ')}` }));
  if (commands?.length) out.push(h('p', { class: 'agent-about', data: { offer: 'commands' }, text: `Commands: ${commands.map((c) => `/${c.name}`).join(', ')}` }));
  return out;
}

new App(document.getElementById('app'));
