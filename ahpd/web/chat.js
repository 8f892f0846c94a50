// chat.js: one open chat, drawn as a pane: its turns (the message, the reply as markdown, reasoning
// folded, tool calls with their status, output and diffs, questions, errors), what waits in its
// queue, and a composer that sends, queues, steers and cancels. Drawing happens once per animation
// frame and touches only the parts whose version moved since the last frame.

import { h, uriPath, changedLines } from './dom.js';
import { MarkdownView, render as renderMarkdown } from './markdown.js';
import { Status, activityOf } from './reducer.js';
import { TerminalDrawer } from './terminal.js';
import { keptContent } from './kept.js';

/** A session's or chat's state at a glance: [css class, words]. */
export function glance(status, waitingFor) {
  if (status & Status.IsArchived && activityOf(status) === Status.Idle) return ['archived', 'archived'];
  switch (activityOf(status)) {
    case Status.InputNeeded: return ['waiting', waitingFor ? `needs you: ${waitingFor}` : 'needs you'];
    case Status.InProgress: return waitingFor === 'client tool' ? ['waiting', 'waiting: client tool'] : ['streaming', 'streaming'];
    case Status.Error: return ['failed', 'failed'];
    default: return ['idle', 'idle'];
  }
}

const text = (s) => (typeof s === 'string' ? s : s?.markdown ?? '');

/** A confined session's box in its header (the host's `_meta['ahpd.box']`): its level and
 *  engine, what it reaches and its limits in the tooltip. */
function boxed(box) {
  const limits = [box.cpuLimit != null ? `${box.cpuLimit} CPUs` : null,
    box.memoryLimitBytes != null ? `${Math.round(box.memoryLimitBytes / 1048576)} MiB` : null].filter(Boolean);
  const reaches = (box.reaches ?? []).join(', ');
  const words = box.level === 'container' ? `in a container on ${box.engine}` : `in a sandbox (${box.engine})`;
  const title = [`Everything this session runs is ${words}`, reaches ? `it reaches only ${reaches}` : null,
    limits.length ? `limits ${limits.join(', ')}` : null].filter(Boolean).join('; ');
  return h('span', { class: 'pane-box', title },
    h('span', { class: 'box-level', text: box.level === 'container' ? 'Container' : 'Sandbox' }),
    limits.length ? ` ${limits.join(', ')}` : null);
}

/** Agent Merge in a session's header: what it follows and when it merges. */
function agentMerge(merge) {
  const doing = merge.monitoring === 'monitoringPullRequest' ? `watching #${merge.pullRequest}`
    : merge.monitoring === 'backingOff' ? 'backing off'
    : merge.monitoring === 'stoppedForPendingReview' ? 'stopped: a reply waits in your pending review'
    : 'waiting for a pull request';
  const merges = { always: 'merges when ready', ifUnchanged: 'merges if unchanged', never: 'does not merge' }[merge.merges] ?? merge.merges;
  const watches = (merge.watches ?? []).join(', ') || 'nothing';
  return h('span', { class: 'pane-merge', title: `Agent Merge on ${merge.branch ?? 'its branch'}: follows ${watches}; ${merges}` },
    h('span', { class: 'merge-name', text: 'Agent Merge' }), ` ${doing} · ${merges}`);
}

/**
 * The branch a worktree changeset names, and its base: the worktrees feature labels it
 * "<branch> (against <base>)" (ahpd/src/worktrees/changes.rs, `branch_entry`), AHP's changeset
 * having no field of its own for either.
 */
export function branchOf(changesets) {
  const set = (changesets ?? []).find((c) => c.changeKind === 'branch');
  if (!set) return null;
  const m = /^(.*) \(against (.*)\)$/.exec(set.label ?? '');
  return m ? { name: m[1], base: m[2] === 'the commit it was cut from' ? null : m[2] } : { name: set.label, base: null };
}

/** The model a chat's latest turn ran on (or was asked for), else the session's setting. */
export function modelOf(chat, session) {
  const last = chat?.activeTurn ?? chat?.turns?.at(-1);
  const model = last?.usage?.model ?? last?.message?.model?.id ?? session?.config?.values?.model;
  return typeof model === 'string' && model ? model : null;
}

/** One open chat. */
export class ChatPane {
  constructor(app, session, chat) {
    this.app = app;
    this.session = session;
    this.chat = chat;
    this.turns = new Map();
    this.state = null;
    this.visible = true;
    this.following = true;
    /** The scrollTop the page itself last scrolled the log to. */
    this.pinned = null;
    this.drawnHead = '';
    this.el = h('section', { class: 'pane', data: { session, chat } });
    this.title = h('h2', { class: 'pane-title', title: 'Rename', on: { dblclick: () => this.rename() } });
    this.chip = h('span', { class: 'chip' });
    // Which attempt at a task this chat is ("Attempt 2 of 3"): its attempts share one title.
    this.attemptEl = h('span', { class: 'pane-attempt', hidden: true });
    this.meta = h('div', { class: 'pane-meta' });
    this.where = h('div', { class: 'pane-where' });
    this.drawer = new TerminalDrawer(app, this);
    this.archiveButton = h('button', { class: 'ghost', type: 'button', data: { action: 'archive' }, on: { click: () => this.app.archive(session) } }, 'Archive');
    const head = h('header', { class: 'pane-head' },
      h('div', { class: 'pane-heading' }, this.chip, this.attemptEl, this.title,
        h('div', { class: 'pane-actions' },
          h('button', { class: 'ghost', type: 'button', title: 'Rename', data: { action: 'rename' }, on: { click: () => this.rename() } }, 'Rename'),
          h('button', { class: 'ghost', type: 'button', title: 'A terminal in the session’s folder (t)', data: { action: 'terminal' }, on: { click: () => this.drawer.toggle() } }, 'Terminal'),
          this.archiveButton,
          h('button', { class: 'ghost danger', type: 'button', data: { action: 'delete' }, on: { click: () => this.app.remove(session) } }, 'Delete'),
          h('button', { class: 'ghost close', type: 'button', title: 'Close', 'aria-label': 'Close', data: { action: 'close' }, on: { click: () => this.app.close(this) } }, '×'))),
      this.meta, this.where);
    // The turns sit in `turnsEl` inside the scrolling log, so its growth can be watched.
    this.turnsEl = h('div', { class: 'log-turns' });
    this.log = h('div', { class: 'log', role: 'log', 'aria-live': 'polite' }, this.turnsEl);
    this.empty = h('p', { class: 'empty', text: 'Loading…' });
    this.turnsEl.append(this.empty);
    this.newer = h('button', { class: 'newer', type: 'button', hidden: true, title: 'Go down to the newest and follow it again',
      data: { action: 'newer' }, on: { click: () => this.follow() } }, 'New messages');
    this.log.addEventListener('scroll', () => this.scrolled(), { passive: true });
    // Whatever makes the log's content or its box change size (a reply growing, turns drawn for
    // the first time when they come into sight, the terminal opening) keeps a following chat at
    // the bottom. Called after layout, before paint: nothing jumps on screen.
    this.sizes = new ResizeObserver(() => { if (this.following && this.visible) this.pin(); });
    this.sizes.observe(this.turnsEl);
    this.sizes.observe(this.log);
    this.pendingEl = h('div', { class: 'pending' });
    this.input = h('textarea', { rows: 2, placeholder: 'Message…', title: 'Enter sends; Shift+Enter starts a new line', 'aria-label': 'Message' });
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); this.submit('auto'); }
    });
    this.sendButton = h('button', { class: 'primary', type: 'button', data: { action: 'send' }, on: { click: () => this.submit('auto') } }, 'Send');
    this.steerButton = h('button', { type: 'button', title: 'Tell the running turn now', data: { action: 'steer' }, on: { click: () => this.submit('steering') } }, 'Steer');
    this.stopButton = h('button', { class: 'danger', type: 'button', data: { action: 'stop' }, on: { click: () => this.cancel() } }, 'Stop');
    this.composer = h('div', { class: 'composer' }, this.input, h('div', { class: 'composer-actions' }, this.stopButton, this.steerButton, this.sendButton));
    // Nothing can be sent before the chat's state is in.
    this.input.disabled = true;
    this.sendButton.disabled = true;
    this.el.append(head, h('div', { class: 'log-wrap' }, this.log, this.newer), this.pendingEl, this.drawer.el, this.composer);
  }

  /** A fresh state (a snapshot): everything is drawn again. */
  reset(state) {
    this.state = state;
    this.input.disabled = false;
    this.sendButton.disabled = false;
    this.turns.clear();
    this.turnsEl.replaceChildren();
    this.drawnPending = null;
    this.draw();
    this.follow();
  }

  /**
   * The chat follows new output unless the person scrolled up. Only the person's own scrolling
   * decides: a scroll event at the place the page itself scrolled to is the page's (so content
   * that grows between the page's scroll and its event does not count as the person leaving).
   */
  scrolled() {
    const top = this.log.scrollTop;
    if (top === this.pinned) return;
    this.pinned = null;
    this.following = this.log.scrollHeight - top - this.log.clientHeight <= 40;
    if (this.following) this.caughtUp();
  }

  /** Goes down to the newest and follows again (the marker's click, a message sent). */
  follow() {
    this.following = true;
    this.caughtUp();
    this.pin();
  }

  /** Keeps a following chat at the bottom (when it comes into sight). */
  settle() {
    if (this.following && this.visible) this.pin();
  }

  pin() {
    this.log.scrollTop = this.log.scrollHeight - this.log.clientHeight;
    this.pinned = this.log.scrollTop;
  }

  caughtUp() {
    this.seenNews = this.news;
    this.newer.hidden = true;
  }

  /** Something new arrived: a following chat shows it; one the person scrolled up in says so. */
  noticeNews(all) {
    const active = this.state?.activeTurn;
    this.news = `${all.length}|${all.at(-1)?.state ?? ''}|${active ? active.responseParts.reduce((n, p) => n + (p._v ?? 0) + 1, 0) : ''}`;
    if (this.following || this.seenNews === undefined) this.caughtUp();
    else if (this.news !== this.seenNews) this.newer.hidden = false;
  }

  draw() {
    const c = this.state;
    this.drawHead();
    if (!c) return;
    const all = c.activeTurn ? [...c.turns, c.activeTurn] : c.turns;
    if (!all.length) {
      if (!this.turnsEl.contains(this.empty)) this.turnsEl.replaceChildren(this.empty);
      this.empty.textContent = 'No messages yet. Say something below.';
    } else if (this.turnsEl.contains(this.empty)) this.empty.remove();
    for (const turn of all) {
      let view = this.turns.get(turn.id);
      if (!view) {
        view = new TurnView(this, turn);
        this.turns.set(turn.id, view);
        this.turnsEl.append(view.el);
      }
      view.sync(turn, turn === c.activeTurn);
    }
    if (this.turns.size > all.length) {
      const ids = new Set(all.map((t) => t.id));
      for (const [id, view] of this.turns) if (!ids.has(id)) { view.el.remove(); this.turns.delete(id); }
    }
    this.noticeNews(all);
    this.drawPending();
    const running = !!c.activeTurn;
    this.sendButton.textContent = running ? 'Queue' : 'Send';
    this.steerButton.hidden = !running;
    this.stopButton.hidden = !running;
  }

  drawHead() {
    const summary = this.app.sessions.get(this.session);
    const s = this.app.sessionStates.get(this.session);
    const title = this.app.titleOf(this.session);
    const attempt = this.app.attempts.label(summary ?? s);
    const model = modelOf(this.state, s);
    const status = this.state?.status ?? summary?.status ?? s?.status ?? 1;
    const [cls, words] = glance(status, this.app.waitingFor(this.session));
    const provider = summary?.provider ?? s?.provider ?? '';
    const folder = uriPath((s?.workingDirectories ?? summary?.workingDirectories ?? [])[0]);
    const changes = summary?.changes;
    const archived = ((s?.status ?? summary?.status ?? 0) & Status.IsArchived) !== 0;
    const branch = branchOf(this.state?.changesets) ?? branchOf(s?.changesets);
    const merge = s?._meta?.['ahpd.agentMerge'];
    const box = s?._meta?.['ahpd.box'];
    const key = [title, attempt, model, cls, words, provider, folder, JSON.stringify(changes), archived, s?.lifecycle, JSON.stringify(branch), JSON.stringify(merge), JSON.stringify(box)].join('|');
    if (key === this.drawnHead) return;
    this.drawnHead = key;
    if (!this.title.querySelector('input')) this.title.textContent = title;
    this.attemptEl.textContent = attempt ?? '';
    this.attemptEl.hidden = !attempt;
    this.chip.className = `chip ${cls}`;
    this.chip.textContent = words;
    this.archiveButton.textContent = archived ? 'Unarchive' : 'Archive';
    this.drawWhere(folder, branch, merge, box);
    const bits = [provider, model];
    // What the session changed opens its Changes view.
    if (changes && (changes.additions || changes.deletions || changes.files)) bits.push(h('button', { class: 'changes-link', type: 'button', data: { action: 'changes' }, title: 'Show the changes',
      on: { click: () => this.app.openChanges(this.session, { chat: this.chat }) } }, changes.files ? changedLines(changes) : `+${changes.additions ?? 0} −${changes.deletions ?? 0}`));
    if (s?.lifecycle === 'failed') bits.push(`could not start: ${s.creationError?.message ?? 'unknown'}`);
    this.meta.replaceChildren(...bits.filter(Boolean).flatMap((b, i) => (i ? [' · ', b] : [b])));
  }

  /** The folder the session works in and, for a worktree, its branch and the base it came from;
   *  its box, when it is confined; and Agent Merge, while it is on (the host's
   *  `_meta['ahpd.agentMerge']`). */
  drawWhere(folder, branch, merge, box) {
    this.where.replaceChildren(...[
      folder ? h('span', { class: 'pane-folder', title: folder, text: folder }) : null,
      branch ? h('span', { class: 'pane-branch', title: `branch ${branch.name}${branch.base ? `, cut from ${branch.base}` : ''}` },
        // A long name gives way from its middle: its last part (an attempt's `/2`) stays in sight.
        h('span', { class: 'branch-name' }, h('span', { class: 'branch-head', text: branch.name.slice(0, branch.name.lastIndexOf('/') + 1) }),
          h('span', { class: 'branch-tail', text: branch.name.slice(branch.name.lastIndexOf('/') + 1) })),
        branch.base ? h('span', { class: 'branch-base', text: ` ← ${branch.base}` }) : null) : null,
      box?.level ? boxed(box) : null,
      merge?.enabled ? agentMerge(merge) : null,
    ].filter(Boolean));
  }

  /** The session's folder as a URI (where a new terminal starts). */
  folderUri() {
    const s = this.app.sessionStates.get(this.session);
    return (s?.workingDirectories ?? this.app.sessions.get(this.session)?.workingDirectories ?? [])[0] ?? null;
  }

  drawPending() {
    const c = this.state;
    const items = [];
    if (c.steeringMessage) items.push(['steering', c.steeringMessage]);
    for (const m of c.queuedMessages ?? []) items.push(['queued', m]);
    const key = JSON.stringify(items.map(([k, m]) => [k, m.id, m.message.text]));
    if (key === this.drawnPending) return;
    this.drawnPending = key;
    this.pendingEl.replaceChildren(...items.map(([kind, m]) => h('div', { class: `pending-item ${kind}` },
      h('span', { class: 'pending-kind', text: kind === 'steering' ? 'steer' : 'queued' }),
      h('span', { class: 'pending-text', text: m.message.text }),
      h('button', { class: 'ghost', type: 'button', title: 'Take back', 'aria-label': 'Take back',
        on: { click: () => this.app.act(this.chat, { type: 'chat/pendingMessageRemoved', kind, id: m.id }) } }, '×'))));
  }

  submit(mode) {
    const body = this.input.value;
    if (!body.trim() || !this.state) return;
    const message = { text: body, origin: { kind: 'user' } };
    const running = !!this.state.activeTurn;
    if (mode === 'steering' && running) {
      this.app.act(this.chat, { type: 'chat/pendingMessageSet', kind: 'steering', id: crypto.randomUUID(), message });
    } else if (running) {
      this.app.act(this.chat, { type: 'chat/pendingMessageSet', kind: 'queued', id: crypto.randomUUID(), message });
    } else {
      this.app.act(this.chat, { type: 'chat/turnStarted', turnId: crypto.randomUUID(), startedAt: new Date().toISOString(), message });
    }
    this.input.value = '';
    // The person wants to see what they said and what comes of it.
    this.follow();
  }

  cancel() {
    const turn = this.state?.activeTurn;
    if (!turn) return;
    const duration = Math.max(0, Date.now() - Date.parse(turn.startedAt)) | 0;
    this.app.act(this.chat, { type: 'chat/turnCancelled', turnId: turn.id, duration });
  }

  rename() {
    if (this.title.querySelector('input')) return;
    const field = h('input', { class: 'rename', value: this.title.textContent, 'aria-label': 'Title' });
    const done = (keep) => {
      const title = field.value.trim();
      this.drawnHead = '';
      field.remove();
      if (keep && title) this.app.act(this.session, { type: 'session/titleChanged', title });
      this.drawHead();
    };
    field.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') done(true);
      if (e.key === 'Escape') done(false);
    });
    field.addEventListener('blur', () => done(true));
    this.title.replaceChildren(field);
    field.focus();
    field.select();
  }
}

/** One turn: the person's message and everything the agent answered. */
class TurnView {
  constructor(pane, turn) {
    this.pane = pane;
    this.parts = new Map();
    this.el = h('article', { class: 'turn', data: { turn: turn.id } });
    this.message = h('div', { class: 'msg user' });
    this.partsEl = h('div', { class: 'parts' });
    this.foot = h('div', { class: 'turn-foot' });
    this.el.append(this.message, this.partsEl, this.foot);
    this.drawnMessage = null;
    this.drawnFoot = '';
  }

  sync(turn, active) {
    if (this.drawnMessage !== turn.message?.text) {
      this.drawnMessage = turn.message?.text;
      this.message.textContent = turn.message?.text ?? '';
    }
    turn.responseParts.forEach((part, i) => {
      const key = partKey(part, i);
      let view = this.parts.get(key);
      if (!view) {
        view = new PartView(this.pane, turn, part);
        this.parts.set(key, view);
        this.partsEl.append(view.el);
      }
      view.sync(turn, part);
    });
    const bits = [];
    if (active) bits.push(h('span', { class: 'dots', 'aria-label': 'working' }, h('i'), h('i'), h('i')));
    else if (turn.state === 'cancelled') bits.push('cancelled');
    else if (turn.state === 'error') bits.push('failed');
    if (!active && turn.duration != null) bits.push(`${(turn.duration / 1000).toFixed(1)} s`);
    if (turn.usage?.outputTokens) bits.push(`${turn.usage.inputTokens ?? 0} in / ${turn.usage.outputTokens} out`);
    if (turn.usage?.model) bits.push(turn.usage.model);
    const turnChanges = !active && this.pane.state?.changesets?.some((c) => c.changeKind === 'turn');
    if (turnChanges) bits.push(h('button', { class: 'changes-link', type: 'button', data: { action: 'turn-changes' }, on: { click: () => this.pane.app.openChanges(this.pane.session, { chat: this.pane.chat, turn: turn.id }) } }, 'changes'));
    const key = `${active}|${turn.state}|${turn.duration}|${JSON.stringify(turn.usage ?? {})}|${turnChanges}`;
    if (key !== this.drawnFoot) {
      this.drawnFoot = key;
      this.foot.replaceChildren(...bits.flatMap((b, i) => (i ? [' · ', b] : [b])));
      this.el.classList.toggle('active', active);
      this.el.classList.toggle('failed', turn.state === 'error');
    }
  }
}

function partKey(part, i) {
  switch (part.kind) {
    case 'markdown': case 'reasoning': return `${part.kind}:${part.id}`;
    case 'toolCall': return `tool:${part.toolCall.toolCallId}`;
    case 'inputRequest': return `input:${part.request.id}`;
    default: return `${part.kind}:${i}`;
  }
}

/** One part of a reply. */
class PartView {
  constructor(pane, turn, part) {
    this.pane = pane;
    this.v = -1;
    switch (part.kind) {
      case 'markdown':
        this.el = h('div', { class: 'part md', data: { part: part.id } });
        this.md = new MarkdownView(this.el);
        break;
      case 'reasoning': {
        const body = h('div', { class: 'reasoning-body' });
        this.el = h('details', { class: 'part reasoning', data: { part: part.id } }, h('summary', { text: 'Reasoning' }), body);
        this.md = new MarkdownView(body);
        break;
      }
      default:
        this.el = h('div', { class: `part ${part.kind}` });
    }
  }

  sync(turn, part) {
    const v = part._v ?? 0;
    if (v === this.v) return;
    this.v = v;
    switch (part.kind) {
      case 'markdown': case 'reasoning': this.md.update(part.content ?? ''); break;
      case 'toolCall': this.el.replaceChildren(...toolCall(this.pane, turn, part.toolCall)); this.el.className = `part tool ${part.toolCall.status}`; break;
      case 'inputRequest': this.drawQuestion(turn, part); break;
      case 'error':
        this.el.replaceChildren(h('strong', { text: part.error?.errorType ?? 'Error' }), ': ', part.error?.message ?? '');
        break;
      case 'systemNotification': this.el.replaceChildren(...renderMarkdown(text(part.content))); break;
      case 'contentRef': this.el.textContent = `[content: ${part.uri}]`; break;
      default: this.el.textContent = `[${part.kind}]`;
    }
  }

  drawQuestion(turn, part) {
    const key = `${part.response ?? ''}|${JSON.stringify(part.request.questions ?? [])}`;
    if (key === this.drawnQuestion) return;
    this.drawnQuestion = key;
    this.el.replaceChildren(...question(this.pane, turn, part));
  }
}

function toolCall(pane, turn, t) {
  const out = [];
  const head = h('div', { class: 'tool-head' },
    h('span', { class: 'tool-status', text: toolStatusWords(t) }),
    h('span', { class: 'tool-name', text: t.displayName || t.toolName }),
    t.invocationMessage ? h('span', { class: 'tool-what', text: text(t.invocationMessage) }) : null);
  out.push(head);
  if (t.status === 'pending-confirmation') {
    out.push(h('div', { class: 'confirm' },
      h('p', { class: 'confirm-title', text: text(t.confirmationTitle) || 'Allow this?' }),
      t.toolInput && typeof t.toolInput === 'string' ? h('pre', { class: 'tool-input', text: pretty(t.toolInput) }) : null,
      t.riskAssessment ? h('p', { class: 'risk', text: JSON.stringify(t.riskAssessment) }) : null,
      h('div', { class: 'confirm-actions' }, ...confirmButtons(pane, turn.id, t))));
  } else if (t.status === 'pending-result-confirmation') {
    out.push(...results(t, pane));
    out.push(h('div', { class: 'confirm-actions' },
      h('button', { class: 'primary', type: 'button', on: { click: () => pane.app.act(pane.chat, { type: 'chat/toolCallResultConfirmed', turnId: turn.id, toolCallId: t.toolCallId, approved: true }) } }, 'Keep result'),
      h('button', { class: 'danger', type: 'button', on: { click: () => pane.app.act(pane.chat, { type: 'chat/toolCallResultConfirmed', turnId: turn.id, toolCallId: t.toolCallId, approved: false }) } }, 'Discard')));
  } else if (t.status === 'running' && t.contributor?.kind === 'client') {
    out.push(h('p', { class: 'tool-note', text: `Runs in client ${t.contributor.clientId}` }));
    out.push(...results(t, pane));
  } else {
    out.push(...results(t, pane));
  }
  return out;
}

/** Approve/deny buttons: the tool's own options, else Allow and Deny. */
export function confirmButtons(app_or_pane, turnId, t, chat) {
  const app = app_or_pane.app ?? app_or_pane;
  const target = chat ?? app_or_pane.chat;
  const send = (approved, option) => app.act(target, {
    type: 'chat/toolCallConfirmed', turnId, toolCallId: t.toolCallId, approved,
    ...(approved ? { confirmed: 'user-action' } : {}), ...(option ? { selectedOptionId: option } : {}),
  });
  const options = t.options?.length ? t.options : [{ id: null, label: 'Allow', kind: 'approve' }, { id: null, label: 'Deny', kind: 'deny' }];
  return options.map((o) => h('button', { class: o.kind === 'approve' ? 'primary' : 'danger', type: 'button', data: { option: o.id ?? o.kind }, on: { click: () => send(o.kind === 'approve', o.id) } }, o.label));
}

function toolStatusWords(t) {
  switch (t.status) {
    case 'streaming': return 'preparing';
    case 'pending-confirmation': return 'waiting for you';
    case 'running': return 'running';
    case 'pending-result-confirmation': return 'result to review';
    case 'auth-required': return 'needs sign-in';
    case 'completed': return t.success === false ? 'failed' : 'done';
    case 'cancelled': return t.reason === 'denied' ? 'denied' : t.reason === 'skipped' ? 'skipped' : 'cancelled';
    default: return t.status;
  }
}

function pretty(input) {
  try { return JSON.stringify(JSON.parse(input), null, 2); } catch { return input; }
}

function results(t, pane) {
  const out = [];
  if (t.pastTenseMessage) out.push(h('p', { class: 'tool-past', text: text(t.pastTenseMessage) }));
  if (t.reasonMessage) out.push(h('p', { class: 'tool-past', text: text(t.reasonMessage) }));
  for (const c of t.content ?? []) {
    switch (c.type) {
      case 'text': out.push(h('pre', { class: 'tool-out', text: c.text })); break;
      case 'fileEdit': out.push(diff(c)); break;
      case 'terminal': out.push(h('p', { class: 'tool-note' }, `terminal: ${c.title} `,
        h('button', { class: 'ghost', type: 'button', data: { action: 'show-terminal', terminal: c.resource }, on: { click: () => pane.drawer.show(c.resource) } }, 'Show'))); break;
      case 'subagent': out.push(h('p', { class: 'tool-note', text: `subagent ${c.agentName ?? ''}: ${c.title}` })); break;
      case 'resource': out.push(keptContent(pane.app, pane.session, c)); break;
      default: out.push(h('p', { class: 'tool-note', text: `[${c.type}]` }));
    }
  }
  if (t.error) out.push(h('pre', { class: 'tool-out error', text: typeof t.error === 'string' ? t.error : JSON.stringify(t.error, null, 2) }));
  return out.length ? [h('details', { class: 'tool-body', open: t.status !== 'completed' || (t.content ?? []).some((c) => ['fileEdit', 'terminal', 'resource'].includes(c.type)) }, h('summary', { text: 'Output' }), ...out)] : [];
}

/** A file edit: its unified diff, lines marked added or removed. */
function diff(edit) {
  const name = edit.after?.uri ?? edit.before?.uri ?? '';
  const lines = (edit.diff ?? '').split('\n');
  return h('div', { class: 'diff' },
    name ? h('div', { class: 'diff-file', text: uriPath(name) }) : null,
    h('pre', {}, ...lines.map((l) => h('span', { class: l.startsWith('+') && !l.startsWith('+++') ? 'add' : l.startsWith('-') && !l.startsWith('---') ? 'del' : l.startsWith('@@') ? 'hunk' : '', text: `${l}\n` }))));
}

function question(pane, turn, part) {
  const r = part.request;
  const out = [h('p', { class: 'q-message', text: text(r.message) || 'The agent asks:' })];
  if (part.response) {
    const answers = Object.values(r.answers ?? {}).map((a) => answerText(a)).filter(Boolean).join('; ');
    out.push(h('p', { class: 'q-done', text: part.response === 'accept' ? `Answered: ${answers}` : `Not answered (${part.response})` }));
    return out;
  }
  const fields = [];
  for (const q of r.questions ?? []) {
    const label = q.title || q.message;
    let input;
    switch (q.kind) {
      case 'boolean': input = h('input', { type: 'checkbox', checked: !!q.defaultValue }); break;
      case 'number': case 'integer': input = h('input', { type: 'number', step: q.kind === 'integer' ? 1 : 'any', value: q.defaultValue }); break;
      case 'single-select': case 'multi-select':
        input = h('select', { multiple: q.kind === 'multi-select' }, ...(q.options ?? []).map((o) => h('option', { value: o.id, text: o.label })));
        break;
      default: input = h('input', { type: 'text', value: q.defaultValue, required: !!q.required });
    }
    input.dataset.question = q.id;
    fields.push({ q, input });
    out.push(h('label', { class: 'q-field' }, h('span', { text: label }), input));
  }
  const answer = () => {
    const answers = {};
    for (const { q, input } of fields) {
      let value;
      switch (q.kind) {
        case 'boolean': value = { kind: 'boolean', value: input.checked }; break;
        case 'number': case 'integer': value = { kind: 'number', value: Number(input.value) }; break;
        case 'single-select': value = { kind: 'selected', value: input.value }; break;
        case 'multi-select': value = { kind: 'selected-many', value: [...input.selectedOptions].map((o) => o.value) }; break;
        default: value = { kind: 'text', value: input.value };
      }
      answers[q.id] = { state: 'submitted', value };
    }
    pane.app.act(pane.chat, { type: 'chat/inputCompleted', requestId: r.id, response: 'accept', answers });
  };
  for (const { input } of fields) input.addEventListener('keydown', (e) => { if (e.key === 'Enter') answer(); });
  out.push(h('div', { class: 'confirm-actions' },
    h('button', { class: 'primary', type: 'button', on: { click: answer } }, 'Answer'),
    h('button', { type: 'button', on: { click: () => pane.app.act(pane.chat, { type: 'chat/inputCompleted', requestId: r.id, response: 'decline' }) } }, 'Decline')));
  return out;
}

function answerText(a) {
  const v = a?.value;
  if (!v) return '';
  return Array.isArray(v.value) ? v.value.join(', ') : String(v.value);
}
