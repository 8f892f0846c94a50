// attempts.js: several attempts at one task. From New session, one prompt goes to several agents
// (or one agent several times, each with its model), each in a worktree of its own on a branch of
// its own; the list shows them as one task; a compare view sets them side by side (state, tokens,
// time, files and lines) and merges the one a person picks while discarding the others.
//
// The group is kept in the branch names: attempt N of a task is `attempts/<slug>-<group>/<N>`, so
// its worktree's folder (every session summary's workingDirectories) says which task it belongs
// to. Every client, a reload and a restart see it with nothing stored anywhere else, and so does
// `git branch` (docs/worktrees.md, "Several attempts at one task").

import { h, uriPath, count, changedLines } from './dom.js';
import { Status, activityOf } from './reducer.js';
import { glance, modelOf } from './chat.js';

/** Attempts this tab merged, and what the host said of it (a merged branch shows no change). */
const MERGED_KEY = 'ahpd.merged';

/** The folder of attempt N: `…/attempts-<slug>-<group>-<N>` (the branch's `/` spelled `-`). */
const FOLDER = /\/attempts-(.+?)-([0-9a-f]{8})-(\d+)(?:\/|$)/;

/** Which task a session is an attempt at: {group, index}, or null. */
export function attemptOf(summary) {
  const folder = uriPath(summary?.workingDirectories?.[0] ?? '');
  const m = FOLDER.exec(folder);
  return m ? { group: m[2], index: Number(m[3]) } : null;
}

/** A branch-name piece from a prompt: lowercase words, at most 30 characters. */
function slug(prompt) {
  const s = prompt.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 30).replace(/-+$/, '');
  return s || 'task';
}

function groupId() {
  return [...crypto.getRandomValues(new Uint8Array(4))].map((b) => b.toString(16).padStart(2, '0')).join('');
}

function tokens(n) {
  return n >= 10_000 ? `${Math.round(n / 1000)}k` : String(n);
}

function duration(ms) {
  if (!(ms >= 0)) return '';
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** The lines a changeset file added and removed, and its path for people. */
function fileOf(f) {
  const meta = f.edit?._meta ?? f._meta ?? {};
  const path = meta['ahpd.path'] ?? uriPath(f.edit?.after?.uri ?? f.edit?.before?.uri ?? f.id);
  return { path, added: f.edit?.diff?.added ?? 0, removed: f.edit?.diff?.removed ?? 0, binary: !!meta['ahpd.binary'] };
}

export class Attempts {
  constructor(app) {
    this.app = app;
    // The open compare view: {group, el, body, files: Map(session → {key, files}), busy, said}.
    this.view = null;
    // session → {into, said}: the attempts merged from this tab (kept across its reloads).
    this.merged = new Map();
    try { this.merged = new Map(Object.entries(JSON.parse(sessionStorage.getItem(MERGED_KEY) ?? '{}'))); } catch { /* none kept */ }
  }

  /** The sessions of task `group`, attempt 1 first. */
  members(group) {
    return [...this.app.sessions.values()]
      .map((s) => [s, attemptOf(s)])
      .filter(([, a]) => a?.group === group)
      .sort((x, y) => x[1].index - y[1].index)
      .map(([s]) => s);
  }

  /**
   * "Attempt 2 of 3" for a session that is an attempt at a task, else null. Of how many: the
   * attempts still there (or the highest number among them); once the others are gone (merged,
   * discarded), only its number.
   */
  label(summary) {
    const a = attemptOf(summary);
    if (!a) return null;
    const members = this.members(a.group);
    if (members.length < 2) return `Attempt ${a.index}`;
    const of = Math.max(members.length, ...members.map((s) => attemptOf(s).index));
    return `Attempt ${a.index} of ${of}`;
  }

  /** Sessions the open compare view watches (their usage and changesets). */
  watched() {
    return this.view ? this.members(this.view.group).map((s) => s.resource) : [];
  }

  // ---- the New session dialog ----

  /**
   * The dialog's "several attempts" part: a prompt and a row per attempt (agent and model). Its
   * `plan()` answers null when it is off.
   */
  section(agents, firstAgent) {
    const rows = h('ol', { class: 'attempt-rows' });
    const prompt = h('textarea', { name: 'prompt', rows: 3, placeholder: 'What every attempt is asked to do', 'aria-label': 'Prompt' });
    const row = (provider) => {
      const agent = h('select', { name: 'attempt-agent', 'aria-label': 'Agent' }, agents.map((a) => h('option', { value: a.provider, text: a.displayName || a.provider, selected: a.provider === provider })));
      const model = h('select', { name: 'attempt-model', 'aria-label': 'Model' });
      const models = () => {
        const list = agents.find((a) => a.provider === agent.value)?.models ?? [];
        model.replaceChildren(h('option', { value: '', text: list.length ? 'its default model' : 'no model choice' }), ...list.map((m) => h('option', { value: m.id, text: m.name || m.id })));
        model.disabled = !list.length;
      };
      agent.addEventListener('change', models);
      models();
      const li = h('li', { class: 'attempt-row' }, agent, model,
        h('button', { class: 'ghost', type: 'button', title: 'Remove this attempt', 'aria-label': 'Remove this attempt', on: { click: () => { if (rows.children.length > 2) li.remove(); } } }, '×'));
      rows.append(li);
    };
    const add = h('button', { type: 'button', data: { action: 'add-attempt' }, on: { click: () => row(rows.lastElementChild?.querySelector('select').value ?? firstAgent.value) } }, 'Add an attempt');
    const box = h('div', { class: 'attempts-form', hidden: true },
      h('label', {}, h('span', { text: 'Prompt' }), prompt),
      h('p', { class: 'agent-about', text: 'Each attempt starts on its own branch in a worktree of its own, cut from the folder\'s repository. The settings above apply to the attempts on the agent chosen above.' }),
      rows, add);
    const toggle = h('input', { type: 'checkbox', name: 'attempts' });
    toggle.addEventListener('change', () => {
      box.hidden = !toggle.checked;
      // Every attempt works in a worktree on a branch named for its task: those two are not asked.
      toggle.closest('dialog')?.classList.toggle('attempts-on', toggle.checked);
      if (toggle.checked && !rows.children.length) { row(firstAgent.value); row(firstAgent.value); }
    });
    const el = h('div', { class: 'attempts-section' },
      h('label', { class: 'check' }, toggle, h('span', { text: 'Several attempts at one task' })), box);
    return {
      el,
      plan: () => {
        if (!toggle.checked) return null;
        return {
          prompt: prompt.value.trim(),
          attempts: [...rows.children].map((li) => {
            const [agent, model] = li.querySelectorAll('select');
            return { provider: agent.value, model: model.value || null };
          }),
        };
      },
    };
  }

  /**
   * Starts every attempt of a plan: each session is made in its worktree (on its own branch), then
   * opened and sent the prompt. `configFor(provider)` answers the settings chosen in the dialog.
   */
  async start(plan, folder, configFor) {
    if (!plan.prompt) throw new Error('Write the prompt every attempt is given.');
    if (plan.attempts.length < 2) throw new Error('Several attempts need at least two.');
    if (!folder) throw new Error('Name the folder of a Git repository: each attempt works in a worktree cut from it.');
    const group = groupId();
    const name = slug(plan.prompt.replace(/^!/, ''));
    const made = [];
    for (const [i, attempt] of plan.attempts.entries()) {
      const session = `ahp-session:/${crypto.randomUUID()}`;
      const config = { ...configFor(attempt.provider), isolation: 'worktree', branch: `attempts/${name}-${group}/${i + 1}` };
      try {
        await this.app.conn.request('createSession', { channel: session, provider: attempt.provider, workingDirectories: [folder], config });
      } catch (e) {
        // Whole or not at all: the attempts already made go again (nothing was done in their
        // worktrees, so the host removes them with their branches).
        for (const m of made) await this.app.conn.request('disposeSession', { channel: m.session }).catch(() => {});
        throw new Error(made.length ? `Attempt ${i + 1} could not start, so none was: ${e.message}` : e.message);
      }
      made.push({ session, attempt });
    }
    // They open side by side and stream; "Compare" on the task in the list sets them against each other.
    for (const { session, attempt } of made) this.send(session, plan.prompt, attempt.model);
    return group;
  }

  /** Opens the attempt's chat and sends it the prompt once its chat is in. */
  async send(session, text, model) {
    await this.app.open(session);
    const pane = this.app.panes.find((p) => p.session === session);
    // An agent may take a while to start (app.watchChat waits for its chat the same way); a pane
    // closed meanwhile means the person let this attempt go.
    while (pane && this.app.panes.includes(pane) && !(pane.chat && this.app.chats.has(pane.chat))) {
      await new Promise((r) => setTimeout(r, 100));
    }
    if (!pane?.chat || !this.app.chats.has(pane.chat)) { this.app.toast(`The prompt was not sent to ${session}: its chat was closed first.`); return; }
    const message = { text, origin: { kind: 'user' }, ...(model ? { model: { id: model } } : {}) };
    this.app.act(pane.chat, { type: 'chat/turnStarted', turnId: crypto.randomUUID(), startedAt: new Date().toISOString(), message });
  }

  // ---- the session list ----

  /** The list's items with each task's attempts gathered under one heading, where the first was. */
  group(shown, itemFor) {
    const byGroup = new Map();
    for (const s of shown) {
      const a = attemptOf(s);
      if (!a) continue;
      if (!byGroup.has(a.group)) byGroup.set(a.group, []);
      byGroup.get(a.group).push(s);
    }
    const out = [];
    const done = new Set();
    for (const s of shown) {
      const a = attemptOf(s);
      if (!a) { out.push(itemFor(s)); continue; }
      if (done.has(a.group)) continue;
      done.add(a.group);
      const members = byGroup.get(a.group).sort((x, y) => attemptOf(x).index - attemptOf(y).index);
      out.push(this.taskItem(a.group, members, itemFor));
    }
    return out;
  }

  taskItem(group, members, itemFor) {
    const title = members.find((s) => s.title)?.title || 'Task';
    const working = members.filter((s) => activityOf(s.status) === Status.InProgress).length;
    const words = `${count(members.length, 'attempt')}${working ? `, ${working} working` : ''}`;
    return h('li', { class: 'task', data: { task: group } },
      h('div', { class: 'task-head' },
        h('span', { class: 'task-title', text: title }),
        h('span', { class: 'task-count', text: words }),
        h('button', { type: 'button', data: { action: 'compare' }, on: { click: () => this.open(group) } }, 'Compare')),
      h('ul', { class: 'task-attempts' }, members.map((s) => {
        const li = itemFor(s);
        li.dataset.attempt = String(attemptOf(s).index);
        li.querySelector('.title')?.prepend(h('span', { class: 'attempt-no', text: `#${attemptOf(s).index} ` }));
        return li;
      })));
  }

  // ---- the compare view ----

  open(group) {
    this.close();
    const body = h('div', { class: 'compare-columns' });
    const said = h('p', { class: 'compare-said', role: 'status' });
    const el = h('dialog', { class: 'compare', data: { task: group } },
      h('header', { class: 'compare-head' },
        h('h2', { text: 'Compare attempts' }),
        h('button', { class: 'ghost close', type: 'button', 'aria-label': 'Close', data: { action: 'close-compare' }, on: { click: () => this.close() } }, '×')),
      body, said);
    el.addEventListener('close', () => { if (this.view?.el === el) this.close(); });
    this.view = { group, el, body, said, files: new Map(), busy: false };
    document.body.append(el);
    el.showModal();
    this.app.refreshWatches();
    this.draw();
  }

  close() {
    const view = this.view;
    if (!view) return;
    this.view = null;
    for (const [, f] of view.files) if (f.uri) this.app.conn.unsubscribe(f.uri);
    if (view.el.open) view.el.close();
    view.el.remove();
    this.app.refreshWatches();
  }

  /** The branch changeset an attempt advertises (its worktree against its base). */
  branchOf(session) {
    const listed = this.app.sessionStates.get(session)?.changesets ?? [];
    return listed.find((c) => c.changeKind === 'branch')?.uriTemplate ?? `ahp-changeset:/session/${session.replace(/^ahp-session:\//, '')}/branch`;
  }

  /** Reads an attempt's files again when its counts moved since they were read. */
  async readFiles(s) {
    const view = this.view;
    const key = JSON.stringify(s.changes ?? {});
    const had = view.files.get(s.resource);
    if (had && had.key === key) return;
    const uri = this.branchOf(s.resource);
    view.files.set(s.resource, { key, uri, files: had?.files ?? null });
    try {
      if (had?.uri) this.app.conn.unsubscribe(had.uri);
      const snap = await this.app.conn.subscribe(uri);
      if (this.view !== view) { this.app.conn.unsubscribe(uri); return; }
      view.files.set(s.resource, { key, uri, files: (snap?.state?.files ?? []).map(fileOf) });
    } catch (e) {
      view.files.set(s.resource, { key, uri: null, files: [], error: e.message });
    }
    this.draw();
  }

  /** Redraws the open compare view (on every list redraw, and when an attempt's files are read). */
  draw() {
    const view = this.view;
    if (!view || view.busy) return;
    const members = this.members(view.group);
    if (!members.length) { view.body.replaceChildren(h('p', { class: 'empty', text: 'No attempt of this task is left.' })); return; }
    const working = members.some((s) => activityOf(s.status) === Status.InProgress || activityOf(s.status) === Status.InputNeeded);
    for (const s of members) this.readFiles(s);
    // Drawn again only when something it shows moved, so a button is not replaced under the pointer.
    const seen = JSON.stringify(members.map((s) => {
      const state = this.app.sessionStates.get(s.resource);
      const chat = this.app.chats.get(state?.defaultChat ?? s.defaultChat);
      return [s.resource, s.status, s.changes, s.modifiedAt, this.app.waitingFor(s.resource), state?._meta?.usage, state?.changesets, chat?.turns?.at(-1)?.usage?.model, view.files.get(s.resource), this.merged.get(s.resource)];
    }));
    if (seen === view.seen && !working) return;
    view.seen = seen;
    view.body.replaceChildren(...members.map((s) => this.column(s, members, working)));
  }

  column(s, members, working) {
    const a = attemptOf(s);
    const [cls, words] = glance(s.status, this.app.waitingFor(s.resource));
    const usage = this.app.sessionStates.get(s.resource)?._meta?.usage;
    const total = (usage?.inputTokens ?? 0) + (usage?.outputTokens ?? 0);
    const spent = usage ? `${tokens(total)} ${total === 1 ? 'token' : 'tokens'} (${tokens(usage.inputTokens ?? 0)} in, ${tokens(usage.outputTokens ?? 0)} out)` : 'no usage reported';
    const end = activityOf(s.status) === Status.InProgress ? Date.now() : Date.parse(s.modifiedAt);
    const took = duration(end - Date.parse(s.createdAt));
    const c = s.changes ?? {};
    // Merged: its branch holds nothing its base does not, which is no "+0 −0": where it landed.
    const merged = !c.files ? this.merged.get(s.resource) : null;
    const lines = merged ? `merged into ${merged.into}` : changedLines(c);
    // The model its last turn ran on, when its chat is open here (a session's summary does not say).
    const state = this.app.sessionStates.get(s.resource);
    const model = modelOf(this.app.chats.get(state?.defaultChat ?? s.defaultChat), state);
    const branch = (state?.changesets ?? []).find((x) => x.changeKind === 'branch')?.label ?? '';
    const read = this.view.files.get(s.resource);
    const files = merged ? h('p', { class: 'merged', text: merged.said })
      : read?.files == null
      ? h('p', { class: 'muted', text: read?.error ?? 'Reading its files…' })
      : read.files.length
        ? h('ul', { class: 'compare-files' }, read.files.map((f) => h('li', { data: { path: f.path } },
          h('span', { class: 'path', text: f.path }),
          f.binary ? h('span', { class: 'muted', text: 'binary' }) : h('span', { class: 'stat' }, h('span', { class: 'add', text: `+${f.added}` }), ' ', h('span', { class: 'del', text: `−${f.removed}` })))))
        : h('p', { class: 'muted', text: 'No file changed.' });
    const others = members.length - 1;
    const nothing = !c.files;
    const why = working ? 'Wait until every attempt has finished (or stop them) first'
      : merged ? `Merged into ${merged.into}`
      : nothing ? 'Nothing on its branch is left to merge'
        : `Merge attempt ${a.index} and discard the ${count(others, 'other')}`;
    const merge = h('button', { class: 'primary', type: 'button', data: { action: 'merge-this' }, disabled: working || nothing, title: why,
      on: { click: () => this.pick(s, members) } }, others ? 'Merge this one' : 'Merge');
    return h('section', { class: 'compare-column', data: { session: s.resource, attempt: a.index } },
      h('h3', {}, h('span', { class: `dot ${cls}`, 'aria-hidden': 'true' }), ` Attempt ${a.index}`, merged ? h('span', { class: 'merged-tag', text: 'merged' }) : null),
      h('p', { class: 'who', text: model ? `${s.provider} · ${model}` : s.provider }),
      h('dl', {},
        h('dt', { text: 'Branch' }), h('dd', { class: 'branch', data: { field: 'branch' }, text: branch || '…' }),
        h('dt', { text: 'State' }), h('dd', { class: `state ${cls}`, data: { field: 'state' }, text: words }),
        h('dt', { text: 'Tokens' }), h('dd', { data: { field: 'tokens' }, text: spent }),
        h('dt', { text: 'Time' }), h('dd', { data: { field: 'time' }, text: took }),
        h('dt', { text: 'Changed' }), h('dd', { data: { field: 'lines' }, text: lines })),
      files,
      h('div', { class: 'compare-actions' },
        h('button', { type: 'button', data: { action: 'open-chat' }, on: { click: () => { this.close(); this.app.open(s.resource); } } }, 'Open chat'),
        merge));
  }

  /** Keeps that `s` was merged, where to (its branch's base, as the host labels the branch), and
   *  the host's words. */
  remember(s, said) {
    const label = (this.app.sessionStates.get(s.resource)?.changesets ?? []).find((x) => x.changeKind === 'branch')?.label ?? '';
    const into = /\(against (.*)\)$/.exec(label)?.[1] ?? /into (\S+)/.exec(said)?.[1] ?? 'its base';
    this.merged.set(s.resource, { into, said });
    try { sessionStorage.setItem(MERGED_KEY, JSON.stringify(Object.fromEntries(this.merged))); } catch { /* not kept */ }
  }

  /**
   * Merges the picked attempt into the branch it was cut from and discards the others: each
   * other's changeset is discarded (its worktree back where its branch parted from the base, so
   * nothing in it is unmerged), then its session is deleted, and with it the host removes the
   * worktree and the branch. A refused merge stops everything, and the host's words are shown.
   */
  async pick(chosen, members) {
    const view = this.view;
    const others = members.filter((s) => s !== chosen);
    const n = attemptOf(chosen).index;
    const say = (text, cls = '') => { view.said.className = `compare-said ${cls}`; view.said.textContent = text; };
    say('');
    const question = others.length
      ? `Merge attempt ${n} into the branch it was cut from, and discard attempt${others.length === 1 ? '' : 's'} ${others.map((s) => attemptOf(s).index).join(', ')}? Their changes, worktrees, branches and chats are deleted; this cannot be undone.`
      : `Merge attempt ${n} into the branch it was cut from?`;
    if (!(await this.app.ask(question, others.length ? 'Merge and discard the others' : 'Merge'))) return;
    view.busy = true;
    view.el.classList.add('busy');
    say(`Merging attempt ${n}…`);
    let merged;
    try {
      const r = await this.app.conn.request('invokeChangesetOperation', { channel: this.branchOf(chosen.resource), operationId: 'merge' });
      merged = typeof r?.message === 'string' ? r.message : r?.message?.markdown ?? 'Merged.';
      this.remember(chosen, merged);
    } catch (e) {
      view.busy = false;
      view.el.classList.remove('busy');
      say(`Attempt ${n} was not merged: ${e.message} Nothing was discarded.`, 'error');
      return;
    }
    const failed = [];
    for (const s of others) {
      const i = attemptOf(s).index;
      say(`${merged} Discarding attempt ${i}…`);
      try {
        await this.app.conn.request('invokeChangesetOperation', { channel: this.branchOf(s.resource), operationId: 'discard' });
        await this.app.conn.request('disposeSession', { channel: s.resource });
      } catch (e) {
        failed.push(`attempt ${i}: ${e.message}`);
      }
    }
    view.busy = false;
    view.el.classList.remove('busy');
    this.draw();
    const gone = others.length - failed.length;
    say(`${merged} ${gone ? `Discarded ${count(gone, 'other attempt')}, with ${gone === 1 ? 'its worktree and branch' : 'their worktrees and branches'}.` : ''}${failed.length ? ` Not discarded: ${failed.join('; ')}` : ''}`, failed.length ? 'error' : 'done');
  }
}
