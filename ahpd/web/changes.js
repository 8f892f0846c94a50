// changes.js: the Changes view, a pane beside a session's chat. It shows one changeset the host
// serves (a worktree's branch against its base, a folder's uncommitted changes, one turn's
// changes, two turns compared): the files with their status and counts, each file's diff (unified
// or side by side, drawn a slice at a time so a long one never holds the page), the changeset's
// operations as the host names them (merge, commit, discard…) with what each does and the host's
// own words when it refuses, and line comments that reach the agent: written to the session's
// annotations channel as seed 000's comments (`_meta['vscode.agentFeedback']`), so the agent's
// `listComments` sees them, with its replies shown under them.
//
// API: `new ChangesView(app, { session, chat? })` (its `el` is the pane to put in the page;
// `start({ uri?, turn? })` watches the session and shows that changeset, by default its branch,
// else its uncommitted changes; `show(uri)` moves it to another; `close()` lets it go), and
// `openChanges(app, session, { chat?, uri?, turn? })`, which opens (or reuses) the session's view
// beside its chat, in place of another session's.

import { h, uriPath, count, changedLines } from './dom.js';
import { parsePatch, isCut, rowsOffThread, gapRows, linesOf } from './diff.js';

const FEEDBACK = 'vscode.agentFeedback';
/** Rows drawn per slice: small enough that one slice is a few milliseconds. */
const SLICE = 120;

let styled = false;
function style() {
  if (styled) return;
  styled = true;
  // Its own stylesheet, from the page's origin (the policy allows no other).
  const link = document.createElement('link');
  link.rel = 'stylesheet';
  link.href = '/ui/changes.css';
  document.head.append(link);
}

style();

const text = (s) => (typeof s === 'string' ? s : s?.markdown ?? '');

/** The page's fold of a changeset channel's actions (the official changeset reducer's part). */
export function applyChangeset(s, a) {
  switch (a.type) {
    case 'changeset/statusChanged': s.status = a.status; if (a.status === 'error') s.error = a.error; else delete s.error; break;
    case 'changeset/fileSet': {
      const i = s.files.findIndex((f) => f.id === a.file.id);
      if (i >= 0) s.files[i] = a.file; else s.files.push(a.file);
      break;
    }
    case 'changeset/fileRemoved': s.files = s.files.filter((f) => f.id !== a.fileId); break;
    case 'changeset/filesReviewChanged':
      for (const f of s.files) if (a.files.includes(f.id)) f.reviewed = a.reviewed;
      break;
    case 'changeset/contentChanged': s.files = a.files; if (a.operations !== undefined) s.operations = a.operations; break;
    case 'changeset/operationsChanged': s.operations = a.operations; break;
    case 'changeset/operationStatusChanged': {
      const op = (s.operations ?? []).find((o) => o.id === a.operationId);
      if (op) { op.status = a.status; if (a.error) op.error = a.error; else delete op.error; }
      break;
    }
    case 'changeset/cleared': s.files = []; break;
    default: return false;
  }
  return true;
}

/** The page's fold of an annotations channel's actions. */
export function applyAnnotations(s, a) {
  const find = (id) => s.annotations.find((x) => x.id === id);
  switch (a.type) {
    case 'annotations/set': {
      const i = s.annotations.findIndex((x) => x.id === a.annotation.id);
      if (i >= 0) s.annotations[i] = a.annotation; else s.annotations.push(a.annotation);
      break;
    }
    case 'annotations/updated': {
      const x = find(a.annotationId);
      if (!x) return false;
      for (const k of ['origin', 'resource', 'range', 'resolved']) if (a[k] !== undefined) x[k] = a[k];
      break;
    }
    case 'annotations/removed': s.annotations = s.annotations.filter((x) => x.id !== a.annotationId); break;
    case 'annotations/entrySet': {
      const x = find(a.annotationId);
      if (!x) return false;
      const i = x.entries.findIndex((e) => e.id === a.entry.id);
      if (i >= 0) x.entries[i] = a.entry; else x.entries.push(a.entry);
      break;
    }
    case 'annotations/entryRemoved': {
      const x = find(a.annotationId);
      if (!x) return false;
      x.entries = x.entries.filter((e) => e.id !== a.entryId);
      break;
    }
    default: return false;
  }
  return true;
}

/**
 * One channel this view watches: subscribed, its snapshot seeded, its actions folded in order
 * (those that arrive before the snapshot wait for it), kept across the page's reconnects.
 */
class Watched {
  constructor(app, uri, fold, changed) {
    this.app = app;
    this.uri = uri;
    this.fold = fold;
    this.changed = changed;
    this.state = null;
    this.fromSeq = 0;
    this.waiting = [];
    this.listener = (env, snap) => (snap ? this.seed(snap) : env ? this.take(env) : this.again());
  }

  /** After a reconnect that did not bring the channel back: subscribe anew. */
  again() {
    this.state = null;
    this.waiting = [];
    this.app.conn.subscribe(this.uri).then((snap) => snap && this.seed(snap)).catch((e) => console.warn(`${this.uri}: ${e.message}`));
  }

  async start() {
    const taps = this.app.taps;
    if (!taps.has(this.uri)) taps.set(this.uri, new Set());
    taps.get(this.uri).add(this.listener);
    const snap = await this.app.conn.subscribe(this.uri);
    if (snap) this.seed(snap);
  }

  seed(snap) {
    this.state = structuredClone(snap.state);
    this.fromSeq = snap.fromSeq ?? 0;
    const held = this.waiting;
    this.waiting = [];
    for (const env of held) this.take(env, true);
    this.changed(null);
  }

  take(env, quiet) {
    if (!this.state) { this.waiting.push(env); return; }
    if (env.serverSeq <= this.fromSeq) return;
    this.fromSeq = env.serverSeq;
    if (this.fold(this.state, env.action) && !quiet) this.changed(env.action);
  }

  stop() {
    const set = this.app.taps.get(this.uri);
    set?.delete(this.listener);
    if (set && !set.size) {
      this.app.taps.delete(this.uri);
      this.app.conn.unsubscribe(this.uri);
    }
  }
}

/** A file's status: added, deleted, binary, modified (renamed is found across files). */
function statusOf(file) {
  const meta = file._meta ?? {};
  if (meta['ahpd.binary']) return 'binary';
  if (!file.edit.before) return 'added';
  if (!file.edit.after) return 'deleted';
  return 'modified';
}

const pathOf = (file) => file._meta?.['ahpd.path'] ?? uriPath(file.edit.after?.uri ?? file.edit.before?.uri ?? file.id);

/** The files as the list shows them: an added and a deleted file of the same content are a rename. */
function listed(files) {
  const out = files.map((f) => ({ file: f, path: pathOf(f), status: statusOf(f), from: null }));
  for (const del of out.filter((x) => x.status === 'deleted')) {
    const twin = out.find((x) => x.status === 'added' && x.file.edit.after?.content.uri.split('/').pop() === del.file.edit.before?.content.uri.split('/').pop());
    if (twin) { twin.status = 'renamed'; twin.from = del.path; del.hidden = true; }
  }
  return out.filter((x) => !x.hidden).sort((a, b) => a.path.localeCompare(b.path));
}

/** A comment's feedback slot, when the annotation is one. */
const slotOf = (a) => a?._meta?.[FEEDBACK];
const isComment = (a) => !!slotOf(a)?.kind;

function authorOf(entry, index, kind) {
  const stamped = entry._meta?.[FEEDBACK]?.author;
  if (stamped) return stamped;
  if (index > 0) return 'user';
  return { user: 'user', codeReview: 'agent', prReview: 'prReviewer' }[kind] ?? 'unknown';
}

const AUTHOR_WORDS = { user: 'you', agent: 'agent', prReviewer: 'reviewer', unknown: 'someone' };

function stateWords(a) {
  if (a.resolved) return 'resolved';
  return { created: 'proposed', accepted: 'not sent yet', submitted: 'sent to the agent' }[slotOf(a)?.state] ?? slotOf(a)?.state ?? '';
}

/**
 * Opens the Changes view of `session` beside its chat (or shows it there again). The window has
 * one: another session's is closed first, so views never pile up beside each other.
 */
export async function openChanges(app, session, opts = {}) {
  style();
  app.changesViews ??= new Map();
  for (const [other, shown] of app.changesViews) if (other !== session) shown.close();
  let view = app.changesViews.get(session);
  if (!view) {
    view = new ChangesView(app, { session, chat: opts.chat });
    app.changesViews.set(session, view);
    const beside = app.panes.find((p) => p.session === session)?.el;
    if (beside) beside.after(view.el); else app.panesEl.prepend(view.el);
    app.welcome?.remove();
  }
  if (opts.chat) view.chat = opts.chat;
  // Brought into sight before its diff is drawn: scrolling to it later would lay a long one out.
  view.el.scrollIntoView({ behavior: 'smooth', inline: 'nearest', block: 'nearest' });
  await view.start(opts);
  return view;
}

/** The Changes view of one session. */
export class ChangesView {
  constructor(app, { session, chat }) {
    style();
    this.app = app;
    this.session = session;
    this.chat = chat ?? null;
    this.uri = null;
    this.changeset = null;
    this.annotations = null;
    this.selected = null;
    this.mode = 'unified';
    this.sides = new Map();
    this.drawToken = 0;
    this.marked = new Set();
    this.selection = null;
    this.rowEls = new Map();
    this.threadEls = [];
    this.el = h('section', { class: 'pane changes-pane', data: { session, changes: '' }, 'aria-label': 'Changes' });
    this.heading = h('h2', { class: 'pane-title', text: 'Changes' });
    this.scope = h('select', { class: 'scope', 'aria-label': 'Which changes', data: { role: 'scope' } });
    this.scope.addEventListener('change', () => this.pickScope());
    this.compareA = h('select', { 'aria-label': 'Compare from turn', data: { role: 'compare-from' } });
    this.compareB = h('select', { 'aria-label': 'Compare to turn', data: { role: 'compare-to' } });
    this.compareEl = h('span', { class: 'compare', hidden: true }, this.compareA, ' → ', this.compareB);
    for (const s of [this.compareA, this.compareB]) s.addEventListener('change', () => this.pickScope());
    this.about = h('div', { class: 'changes-about' });
    this.opsEl = h('div', { class: 'ops' });
    this.opsAbout = h('ul', { class: 'ops-about' });
    this.outcome = h('div', { class: 'op-outcome', role: 'status' });
    this.unifiedButton = h('button', { type: 'button', class: 'ghost on', data: { mode: 'unified' }, on: { click: () => this.setMode('unified') } }, 'Unified');
    this.splitButton = h('button', { type: 'button', class: 'ghost', data: { mode: 'split' }, on: { click: () => this.setMode('split') } }, 'Side by side');
    this.sendButton = h('button', { type: 'button', class: 'primary', data: { action: 'send-comments' }, on: { click: () => this.sendComments() } }, 'Send comments to the agent');
    this.totals = h('span', { class: 'totals' });
    this.filesEl = h('ul', { class: 'files', 'aria-label': 'Changed files' });
    this.diffHead = h('div', { class: 'diff-head' });
    this.diffBody = h('div', { class: 'diff-body', role: 'table' });
    this.diffEl = h('div', { class: 'diff-view' }, this.diffHead, this.diffBody);
    this.el.append(
      h('header', { class: 'pane-head' },
        h('div', { class: 'pane-heading' }, this.heading, this.scope, this.compareEl,
          h('div', { class: 'pane-actions' },
            h('button', { class: 'ghost close', type: 'button', title: 'Close', 'aria-label': 'Close', data: { action: 'close' }, on: { click: () => this.close() } }, '×'))),
        this.about),
      h('div', { class: 'ops-bar' }, this.opsEl, this.opsAbout, this.outcome),
      h('div', { class: 'changes-tools' }, this.totals, h('span', { class: 'spacer' }), this.unifiedButton, this.splitButton, this.sendButton),
      h('div', { class: 'changes-main' }, this.filesEl, this.diffEl));
    this.diffBody.addEventListener('click', (e) => this.clicked(e));
    this.diffBody.addEventListener('keydown', (e) => {
      const gap = e.target.closest?.('.gap');
      if (gap && (e.key === 'Enter' || e.key === ' ')) { e.preventDefault(); this.openGap(gap); }
    });
  }

  // ---- which changeset ----

  /** The changesets this session and its chat advertise, as [label, uri, kind] choices. */
  choices() {
    const out = [];
    const s = this.app.sessionStates.get(this.session);
    for (const c of s?.changesets ?? []) {
      if (c.changeKind === 'branch' || c.changeKind === 'uncommitted') out.push({ label: c.label, uri: c.uriTemplate, kind: c.changeKind, about: c.description });
    }
    const chat = this.chat ?? s?.defaultChat;
    const c = chat ? this.app.chats.get(chat) : null;
    const turnTemplate = c?.changesets?.find((x) => x.changeKind === 'turn')?.uriTemplate;
    const compareTemplate = c?.changesets?.find((x) => x.changeKind === 'compare-turns')?.uriTemplate;
    const branchOfChat = c?.changesets?.find((x) => x.changeKind === 'branch');
    if (branchOfChat) out.push({ label: branchOfChat.label, uri: branchOfChat.uriTemplate, kind: 'branch', about: branchOfChat.description });
    (c?.turns ?? []).forEach((t, i) => {
      if (turnTemplate) out.push({ label: `Turn ${i + 1}: ${(t.message?.text ?? '').slice(0, 40)}`, uri: turnTemplate.replace('{turnId}', encodeURIComponent(t.id)), kind: 'turn', turn: t.id, about: 'The files this turn changed, against the folder just before it.' });
    });
    if (compareTemplate && (c?.turns?.length ?? 0) >= 2) out.push({ label: 'Compare two turns…', uri: compareTemplate, kind: 'compare-turns', about: 'The files after one turn against the files after another.' });
    return { out, turns: c?.turns ?? [] };
  }

  async start(opts = {}) {
    if (!this.app.watching.has(this.session)) await this.app.watch(this.session);
    if (!this.annotationsWatch) {
      this.annotationsWatch = new Watched(this.app, `${this.session}/annotations`, applyAnnotations, () => this.commentsChanged());
      this.annotationsWatch.start().catch((e) => this.say(`Comments: ${e.message}`, true));
    }
    const { out, turns } = this.choices();
    this.fillScopes(out, turns);
    let uri = opts.uri;
    if (!uri && opts.turn) uri = out.find((c) => c.turn === opts.turn)?.uri;
    if (!uri) uri = out.find((c) => c.kind === 'branch')?.uri ?? out.find((c) => c.kind === 'uncommitted')?.uri ?? out[0]?.uri;
    if (!uri) { this.about.textContent = 'This session advertises no changes: it does not work in a Git folder.'; return; }
    await this.show(uri);
  }

  fillScopes(out, turns) {
    this.scopeChoices = out;
    this.shownTurns = turns.length;
    this.newestTurn = turns[turns.length - 1]?.id;
    this.scope.replaceChildren(...out.map((c, i) => h('option', { value: String(i), text: c.label })));
    const turnOptions = () => turns.map((t, i) => h('option', { value: t.id, text: `Turn ${i + 1}` }));
    this.compareA.replaceChildren(...turnOptions());
    this.compareB.replaceChildren(...turnOptions());
    if (turns.length >= 2) this.compareB.value = turns[turns.length - 1].id;
  }

  /**
   * A chat of the session changed: a turn that ended since the view opened joins its scopes and
   * the turns to compare, with what the person picked kept.
   */
  chatChanged(chat) {
    const mine = this.chat ?? this.app.sessionStates.get(this.session)?.defaultChat;
    if (chat !== mine || (this.app.chats.get(chat)?.turns?.length ?? 0) === this.shownTurns) return;
    const { out, turns } = this.choices();
    const [from, to, newest] = [this.compareA.value, this.compareB.value, this.newestTurn];
    this.fillScopes(out, turns);
    if (turns.some((t) => t.id === from)) this.compareA.value = from;
    // "To" left on the newest turn follows the newest; one the person picked stays.
    if (to !== newest && turns.some((t) => t.id === to)) this.compareB.value = to;
    const choice = this.scopeOf(this.uri);
    if (choice >= 0) this.scope.value = String(choice);
  }

  /** Which of the scope choices shows `uri` (a comparison of any two turns is the one choice). */
  scopeOf(uri) {
    return this.scopeChoices?.findIndex((c) => c.uri === uri || (c.kind === 'compare-turns' && uri?.includes('/compare/'))) ?? -1;
  }

  pickScope() {
    const c = this.scopeChoices?.[Number(this.scope.value)];
    if (!c) return;
    this.compareEl.hidden = c.kind !== 'compare-turns';
    let uri = c.uri;
    if (c.kind === 'compare-turns') uri = uri.replace('{originalTurnId}', encodeURIComponent(this.compareA.value)).replace('{modifiedTurnId}', encodeURIComponent(this.compareB.value));
    this.show(uri);
  }

  /** Shows the changeset at `uri`. */
  async show(uri) {
    if (this.uri === uri && this.watch) return;
    this.watch?.stop();
    this.uri = uri;
    this.el.dataset.changes = uri;
    this.selected = null;
    this.marked.clear();
    this.outcome.replaceChildren();
    const choice = this.scopeOf(uri);
    if (choice >= 0) this.scope.value = String(choice);
    const c = this.scopeChoices?.[choice];
    this.about.textContent = c ? c.about ?? '' : '';
    const title = this.app.titleOf(this.session);
    this.heading.textContent = `Changes: ${title}`;
    this.heading.title = title;
    // A changeset left for another before its snapshot came says nothing more here.
    const watch = new Watched(this.app, uri, applyChangeset, (a) => { if (this.watch === watch) this.changesetChanged(a); });
    this.watch = watch;
    try {
      await watch.start();
    } catch (e) {
      if (this.watch !== watch) return;
      this.changeset = null;
      this.filesEl.replaceChildren(h('li', { class: 'none', text: e.message }));
      this.diffBody.replaceChildren();
    }
  }

  close() {
    this.watch?.stop();
    this.annotationsWatch?.stop();
    this.drawToken++;
    this.el.remove();
    this.app.changesViews?.delete(this.session);
    if (!this.app.panes.length && !this.app.changesViews?.size) this.app.panesEl.append(this.app.welcome);
  }

  // ---- the changeset ----

  changesetChanged() {
    this.changeset = this.watch.state;
    this.el.dataset.status = this.changeset.status ?? '';
    this.drawOperations();
    this.drawFiles();
    const files = this.changeset.files;
    const current = files.find((f) => f.id === this.selected?.id);
    if (!current) {
      const first = listed(files)[0];
      if (first) this.select(first.file.id); else { this.selected = null; this.rows = null; this.diffHead.replaceChildren(); this.diffBody.replaceChildren(); }
    } else if (JSON.stringify(current.edit) !== JSON.stringify(this.selected.edit) || current._meta?.['ahpd.patch'] !== this.selected._meta?.['ahpd.patch']) {
      this.select(current.id);
    }
  }

  drawFiles() {
    const files = listed(this.changeset.files);
    let added = 0;
    let removed = 0;
    for (const { file } of files) { added += file.edit.diff?.added ?? 0; removed += file.edit.diff?.removed ?? 0; }
    this.totals.textContent = files.length ? changedLines({ additions: added, deletions: removed, files: files.length }) : '';
    if (!files.length) {
      const why = this.changeset.status === 'error' ? this.changeset.error?.message : 'No changes.';
      this.filesEl.replaceChildren(h('li', { class: 'none', text: why ?? 'No changes.' }));
      return;
    }
    this.filesEl.replaceChildren(...files.map(({ file, path, status, from }) => {
      const d = file.edit.diff;
      return h('li', {
        class: `file ${status}${this.selected?.id === file.id ? ' on' : ''}${this.marked.has(path) ? ' conflict' : ''}`,
        data: { file: file.id, path, status }, tabindex: 0,
        on: { click: () => this.select(file.id), keydown: (e) => { if (e.key === 'Enter') this.select(file.id); } },
      },
      h('span', { class: `badge ${status}`, title: status, text: { added: 'A', deleted: 'D', modified: 'M', renamed: 'R', binary: 'B' }[status] }),
      h('span', { class: 'path', title: from ? `${from} → ${path}` : path, text: from ? `${from} → ${path}` : path }),
      status === 'binary' ? h('span', { class: 'stat', text: 'binary' }) : h('span', { class: 'stat' }, h('span', { class: 'plus', text: `+${d?.added ?? 0}` }), ' ', h('span', { class: 'minus', text: `−${d?.removed ?? 0}` })),
      this.marked.has(path) ? h('span', { class: 'conflict-note', text: 'conflict' }) : null,
      this.reviewBox(file));
    }));
  }

  /** "Reviewed": kept by the host at the file's content, so a file that changes again comes back. */
  reviewBox(file) {
    const box = h('input', { type: 'checkbox', class: 'reviewed', title: 'Reviewed', 'aria-label': `Reviewed ${pathOf(file)}`, checked: !!file.reviewed, data: { action: 'reviewed' } });
    box.addEventListener('click', (e) => e.stopPropagation());
    box.addEventListener('change', () => this.app.act(this.uri, { type: 'changeset/filesReviewChanged', files: [file.id], reviewed: box.checked }));
    return box;
  }

  drawOperations() {
    const ops = this.changeset.operations ?? [];
    this.opsEl.replaceChildren(...ops.map((op) => h('button', {
      type: 'button', class: op.confirmation ? 'danger' : op.id === 'merge' ? 'primary' : '',
      title: op.description ?? '', data: { operation: op.id, status: op.status },
      disabled: op.status === 'disabled' || op.status === 'running',
      on: { click: () => this.invoke(op) },
    }, op.status === 'running' ? `${op.label}…` : op.label)));
    this.opsAbout.replaceChildren(...ops.filter((op) => op.description).map((op) => h('li', {}, h('strong', { text: op.label }), ': ', op.description)));
    const failed = ops.find((op) => op.status === 'error' && op.error);
    if (failed && !this.outcome.textContent) this.refused(failed.error.message);
  }

  async invoke(op) {
    if (op.confirmation && !(await this.app.ask(text(op.confirmation), op.label))) return;
    this.outcome.replaceChildren(h('span', { class: 'working', text: `${op.label}…` }));
    try {
      const result = await this.app.conn.request('invokeChangesetOperation', { channel: this.uri, operationId: op.id });
      this.marked.clear();
      this.outcome.replaceChildren(h('p', { class: 'op-done', data: { operation: op.id }, text: text(result?.message) || `${op.label}: done.` }));
      if (this.changeset) this.drawFiles();
    } catch (e) {
      this.refused(e.message, op.id);
    }
  }

  /** A refusal in the host's words, with the files it names marked in the list. */
  refused(message, id) {
    const files = listed(this.changeset?.files ?? []).map((f) => f.path).filter((p) => message.includes(p));
    this.marked = new Set(files);
    this.outcome.replaceChildren(h('div', { class: 'op-refused', role: 'alert', data: { operation: id ?? '' } },
      h('p', { text: message }),
      files.length ? h('p', { class: 'op-files' }, `${files.length === 1 ? 'The file' : 'The files'} it names: `, ...files.flatMap((p, i) => [i ? ', ' : '', h('code', { text: p })])) : null));
    if (this.changeset) this.drawFiles();
  }

  say(message, bad) {
    this.outcome.replaceChildren(h('p', { class: bad ? 'op-refused' : 'op-done', text: message }));
  }

  // ---- one file's diff ----

  async select(id) {
    const file = this.changeset?.files.find((f) => f.id === id);
    if (!file) return;
    this.selected = structuredClone(file);
    this.selection = null;
    for (const li of this.filesEl.querySelectorAll('li.file')) li.classList.toggle('on', li.dataset.file === id);
    const token = ++this.drawToken;
    const path = pathOf(file);
    const status = statusOf(file);
    this.diffHead.replaceChildren(h('span', { class: 'diff-path', text: path }), h('span', { class: `badge ${status}`, text: status }));
    this.diffEl.dataset.file = path;
    delete this.diffBody.dataset.drawn;
    this.diffBody.replaceChildren(h('p', { class: 'none', text: 'Loading…' }));
    if (status === 'binary') { this.rows = []; this.diffBody.replaceChildren(h('p', { class: 'none', text: 'A binary file: no text to compare.' })); return; }
    let rows;
    try {
      const patch = file._meta?.['ahpd.patch'];
      if (patch && !isCut(patch)) rows = parsePatch(patch);
      else rows = await rowsOffThread(await this.side(file.edit.before), await this.side(file.edit.after));
    } catch (e) {
      if (token === this.drawToken) this.diffBody.replaceChildren(h('p', { class: 'op-refused', text: `Could not show the diff: ${e.message}` }));
      return;
    }
    if (token !== this.drawToken) return;
    this.rows = rows;
    await this.drawRows(rows, token);
  }

  /** A side's text (read once, kept). */
  async side(side) {
    if (!side) return '';
    const key = side.content.uri;
    if (!this.sides.has(key)) {
      this.sides.set(key, this.app.conn.request('resourceRead', { channel: this.uri, uri: key }).then((r) => (r.encoding === 'base64' ? '' : r.data)));
    }
    try { return await this.sides.get(key); } catch (e) { this.sides.delete(key); throw e; }
  }

  setMode(mode) {
    if (this.mode === mode) return;
    this.mode = mode;
    this.unifiedButton.classList.toggle('on', mode === 'unified');
    this.splitButton.classList.toggle('on', mode === 'split');
    if (this.rows) this.drawRows(this.rows, ++this.drawToken);
  }

  /** Draws the rows a slice at a time, yielding between slices. */
  async drawRows(rows, token) {
    this.diffBody.replaceChildren();
    delete this.diffBody.dataset.drawn;
    this.diffBody.className = `diff-body ${this.mode}`;
    this.rowEls = new Map();
    this.threadEls = [];
    const units = this.mode === 'split' ? pairRows(rows) : rows.map((r) => [r]);
    if (!units.length) { this.diffBody.append(h('p', { class: 'none', text: 'No line changed.' })); return; }
    for (let i = 0; i < units.length; i += SLICE) {
      if (token !== this.drawToken) return;
      const chunk = h('div', { class: 'chunk' });
      for (const unit of units.slice(i, i + SLICE)) chunk.append(this.mode === 'split' ? this.splitRow(unit) : this.unifiedRow(unit[0]));
      this.diffBody.append(chunk);
      if (i + SLICE < units.length) await new Promise((resolve) => setTimeout(resolve, 0));
    }
    if (token !== this.drawToken) return;
    this.diffBody.dataset.drawn = String(rows.length);
    this.placeThreads();
  }

  unifiedRow(r) {
    if (r.kind === 'gap') return gapEl(r);
    if (r.kind === 'note') return h('div', { class: 'dl note', text: r.text });
    const cls = r.kind === '+' ? 'add' : r.kind === '-' ? 'del' : 'same';
    const el = h('div', { class: `dl ${cls}`, role: 'row', data: r.newNo ? { line: r.newNo } : {} },
      h('span', { class: 'ln old', text: r.oldNo ? String(r.oldNo) : '' }),
      h('span', { class: `ln new${r.newNo ? ' pick' : ''}`, text: r.newNo ? String(r.newNo) : '', title: r.newNo ? 'Comment on this line (Shift-click for a range)' : null }),
      h('span', { class: 'sign', text: r.kind === ' ' ? '' : r.kind }),
      codeEl(r));
    if (r.newNo) this.rowEls.set(r.newNo, el);
    return el;
  }

  splitRow([left, right]) {
    if (left?.kind === 'gap') return gapEl(left);
    if (left?.kind === 'note') return h('div', { class: 'dl note', text: left.text });
    const side = (r, which) => (r
      ? [h('span', { class: `ln ${which}${which === 'new' ? ' pick' : ''}`, text: String(which === 'old' ? r.oldNo : r.newNo) }), codeEl(r, r.kind === '+' ? 'add' : r.kind === '-' ? 'del' : 'same')]
      : [h('span', { class: `ln ${which}` }), h('span', { class: 'code empty' })]);
    const el = h('div', { class: 'sl', role: 'row', data: right?.newNo ? { line: right.newNo } : {} }, side(left, 'old'), side(right, 'new'));
    if (right?.newNo) this.rowEls.set(right.newNo, el);
    return el;
  }

  // ---- comments ----

  clicked(e) {
    const gap = e.target.closest('.gap');
    if (gap) { this.openGap(gap); return; }
    const pick = e.target.closest('.ln.pick');
    if (!pick) return;
    const row = pick.closest('[data-line]');
    const line = Number(row?.dataset.line);
    if (!line) return;
    if (e.shiftKey && this.selection) this.selection = { from: Math.min(this.selection.from, line), to: Math.max(this.selection.from, line) };
    else this.selection = { from: line, to: line };
    this.drawSelection();
    this.compose();
  }

  drawSelection() {
    for (const [line, el] of this.rowEls) el.classList.toggle('sel', !!this.selection && line >= this.selection.from && line <= this.selection.to);
  }

  /** The comment box under the selected lines. */
  compose() {
    this.composer?.remove();
    const { from, to } = this.selection;
    const field = h('textarea', { rows: 3, placeholder: 'Comment for the agent…', 'aria-label': 'Comment' });
    const write = () => {
      const body = field.value.trim();
      if (!body) return;
      this.writeComment(from, to, body);
      this.composer.remove();
      this.composer = null;
      this.selection = null;
      this.drawSelection();
    };
    field.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); write(); }
      if (e.key === 'Escape') { this.composer.remove(); this.composer = null; }
    });
    this.composer = h('div', { class: 'comment-box' },
      h('p', { class: 'comment-where', text: from === to ? `Line ${from}` : `Lines ${from}–${to}` }), field,
      h('div', { class: 'comment-actions' },
        h('button', { type: 'button', on: { click: () => { this.composer.remove(); this.composer = null; this.selection = null; this.drawSelection(); } } }, 'Cancel'),
        h('button', { type: 'button', class: 'primary', data: { action: 'comment' }, on: { click: write } }, 'Comment')));
    this.rowEls.get(to)?.after(this.composer);
    field.focus();
  }

  /** The resource a comment on the selected file names: the file in the folder. */
  resource() {
    return this.selected?.edit.after?.uri ?? this.selected?.edit.before?.uri ?? this.selected?.id;
  }

  writeComment(from, to, body) {
    const id = crypto.randomUUID();
    const endText = this.rows?.find((r) => r.newNo === to)?.text ?? '';
    const chat = this.chat ?? this.app.sessionStates.get(this.session)?.defaultChat;
    const annotation = {
      id,
      origin: { session: this.session, ...(chat ? { chat } : {}) },
      resource: this.resource(),
      range: { start: { line: from - 1, character: 0 }, end: { line: to - 1, character: endText.length } },
      resolved: false,
      entries: [{ id: `${id}:0`, text: body, _meta: { [FEEDBACK]: { author: 'user' } } }],
      // A person's comment is accepted as written: the agent's listComments sees it at once.
      _meta: { [FEEDBACK]: { kind: 'user', state: 'accepted', sessionResource: this.session } },
    };
    this.app.act(this.annotationsWatch.uri, { type: 'annotations/set', annotation });
  }

  comments() {
    return (this.annotationsWatch?.state?.annotations ?? []).filter(isComment);
  }

  commentsChanged() {
    const waiting = this.comments().filter((a) => !a.resolved && slotOf(a).kind === 'user' && slotOf(a).state === 'accepted');
    this.sendButton.textContent = waiting.length ? `Send ${count(waiting.length, 'comment')} to the agent` : 'Send comments to the agent';
    this.sendButton.disabled = !waiting.length;
    this.placeThreads();
  }

  /** The comment threads on the file shown, each under the last line it covers. */
  placeThreads() {
    for (const el of this.threadEls) el.remove();
    this.threadEls = [];
    const resource = this.resource();
    if (!resource) return;
    for (const a of this.comments()) {
      if (a.resource !== resource) continue;
      const line = (a.range?.end.line ?? 0) + 1;
      const row = this.rowEls.get(line);
      if (!row) continue;
      const el = this.thread(a);
      row.after(el);
      this.threadEls.push(el);
    }
  }

  thread(a) {
    const kind = slotOf(a).kind;
    const from = (a.range?.start.line ?? 0) + 1;
    const to = (a.range?.end.line ?? 0) + 1;
    const reply = h('input', { type: 'text', placeholder: 'Reply…', 'aria-label': 'Reply' });
    reply.addEventListener('keydown', (e) => {
      if (e.key !== 'Enter' || !reply.value.trim()) return;
      this.app.act(this.annotationsWatch.uri, { type: 'annotations/entrySet', annotationId: a.id, entry: { id: `${a.id}:${crypto.randomUUID()}`, text: reply.value.trim(), _meta: { [FEEDBACK]: { author: 'user' } } } });
      reply.value = '';
    });
    return h('div', { class: `thread${a.resolved ? ' resolved' : ''}`, data: { comment: a.id, state: a.resolved ? 'resolved' : slotOf(a).state } },
      h('div', { class: 'thread-head' },
        h('span', { class: 'thread-where', text: from === to ? `line ${from}` : `lines ${from}–${to}` }),
        h('span', { class: 'thread-state', text: stateWords(a) }),
        h('span', { class: 'spacer' }),
        h('button', { type: 'button', class: 'ghost', data: { action: a.resolved ? 'reopen' : 'resolve' }, on: { click: () => this.resolve(a, !a.resolved) } }, a.resolved ? 'Reopen' : 'Resolve')),
      ...a.entries.map((e, i) => {
        const author = authorOf(e, i, kind);
        return h('div', { class: `entry ${author}`, data: { author } }, h('span', { class: 'who', text: AUTHOR_WORDS[author] ?? author }), h('span', { class: 'what', text: text(e.text) }));
      }),
      a.resolved ? null : reply);
  }

  /** Resolves (or reopens) a comment as the agent's resolveComments does: flag and state. */
  resolve(a, resolved) {
    const next = structuredClone(a);
    next.resolved = resolved;
    next._meta[FEEDBACK] = { ...next._meta[FEEDBACK], state: resolved ? 'resolved' : 'submitted' };
    delete next._meta[FEEDBACK].pendingAgentReveal;
    this.app.act(this.annotationsWatch.uri, { type: 'annotations/set', annotation: next });
  }

  /** Marks the unsent comments sent and starts a turn asking the agent to address them. */
  async sendComments() {
    const waiting = this.comments().filter((a) => !a.resolved && slotOf(a).kind === 'user' && slotOf(a).state === 'accepted');
    if (!waiting.length) return;
    const chat = this.chat ?? this.app.sessionStates.get(this.session)?.defaultChat;
    if (!chat) { this.say('This session has no chat to send the comments to.', true); return; }
    const lines = waiting.map((a) => {
      const from = (a.range?.start.line ?? 0) + 1;
      const to = (a.range?.end.line ?? 0) + 1;
      // The path in the repository, as the changeset names it, when the file is one of its own.
      const file = this.changeset?.files.find((f) => f.id === a.resource || f.edit.after?.uri === a.resource);
      return `- ${file ? pathOf(file) : uriPath(a.resource)} ${from === to ? `line ${from}` : `lines ${from}-${to}`}: ${text(a.entries[0]?.text)}`;
    });
    const message = {
      text: `Please address my review comments (${waiting.length}):\n${lines.join('\n')}\n\nThey are also in listComments. Reply to each with replyToComment saying what you did, and resolve it with resolveComments once it is done.`,
      origin: { kind: 'user' },
    };
    for (const a of waiting) {
      const next = structuredClone(a);
      next._meta[FEEDBACK] = { ...next._meta[FEEDBACK], state: 'submitted' };
      this.app.act(this.annotationsWatch.uri, { type: 'annotations/set', annotation: next });
    }
    if (!this.app.chats.has(chat)) await this.app.open(this.session);
    const running = !!this.app.chats.get(chat)?.activeTurn;
    if (running) this.app.act(chat, { type: 'chat/pendingMessageSet', kind: 'queued', id: crypto.randomUUID(), message });
    else this.app.act(chat, { type: 'chat/turnStarted', turnId: crypto.randomUUID(), startedAt: new Date().toISOString(), message });
    this.say(`Sent ${count(waiting.length, 'comment')} to the agent.`);
  }

  /** Opens an unchanged run: its lines come from the file after. */
  async openGap(el) {
    const gap = { oldNo: Number(el.dataset.old), newNo: Number(el.dataset.new), count: Number(el.dataset.count) };
    if (!this.selected?.edit.after) return;
    const after = linesOf(await this.side(this.selected.edit.after));
    const rows = gapRows(gap, after);
    const at = this.rows.findIndex((r) => r.kind === 'gap' && r.newNo === gap.newNo);
    if (at >= 0) this.rows.splice(at, 1, ...rows);
    el.replaceWith(...rows.map((r) => (this.mode === 'split' ? this.splitRow([r, r]) : this.unifiedRow(r))));
    this.placeThreads();
  }
}

function gapEl(r) {
  return h('div', { class: 'gap', role: 'button', tabindex: 0, title: 'Show these lines', data: { old: r.oldNo, new: r.newNo, count: r.count } },
    `⋯ ${count(r.count, 'unchanged line')}`);
}

function codeEl(r, cls) {
  const el = h('span', { class: `code${cls ? ` ${cls}` : ''}` });
  if (!r.marks) { el.textContent = r.text; return el; }
  let at = 0;
  for (const [from, to] of r.marks) {
    el.append(r.text.slice(at, from), h('mark', { text: r.text.slice(from, to) }));
    at = to;
  }
  el.append(r.text.slice(at));
  return el;
}

/** Rows side by side: each removed line beside the added line it became, the rest beside itself. */
function pairRows(rows) {
  const out = [];
  for (let t = 0; t < rows.length;) {
    const r = rows[t];
    if (r.kind !== '-' && r.kind !== '+') { out.push(r.kind === ' ' ? [r, r] : [r, null]); t++; continue; }
    let u = t;
    while (u < rows.length && rows[u].kind === '-') u++;
    let w = u;
    while (w < rows.length && rows[w].kind === '+') w++;
    const dels = rows.slice(t, u);
    const adds = rows.slice(u, w);
    for (let p = 0; p < Math.max(dels.length, adds.length); p++) out.push([dels[p] ?? null, adds[p] ?? null]);
    t = w;
  }
  return out;
}
