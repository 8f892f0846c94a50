// automations.js: the Automations view. The catalogue (`ahp-automations://`) folded here as any
// client folds it: each automation with its next run in the person's time zone and its last runs;
// a form to create or edit one, whose schedule is previewed (the daemon computes the next
// occurrences: `ahpd/automationSchedulePreview`, the same code that runs them) and whose events
// (a webhook, a branch that moved, a GitHub pull request, …) are the host's trigger definitions,
// each with its settings as the host's schema names them; run now, turn on
// or off, remove; a run cancelled, or its session opened beside the others, where its changes are
// reviewed and merged as any session's.

import { h, uriPath, pathUri } from './dom.js';

const CATALOGUE = 'ahp-automations://';

/** The person's time zone, as the browser knows it. */
const ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';

/** A time in the person's zone. */
function local(iso) {
  if (!iso) return '';
  return new Date(iso).toLocaleString([], { timeZone: ZONE, weekday: 'short', day: 'numeric', month: 'short', hour: '2-digit', minute: '2-digit' });
}

/** Folds an action into the catalogue, as `ahp::reducers` does; answers whether it changed. */
function fold(state, action) {
  if (action.type === 'automation/set') {
    const at = state.entries.findIndex((e) => e.resource === action.automation.resource);
    if (at >= 0) state.entries[at] = action.automation; else state.entries.push(action.automation);
    return true;
  }
  if (action.type === 'automation/removed') {
    const before = state.entries.length;
    state.entries = state.entries.filter((e) => e.resource !== action.resource);
    return state.entries.length !== before;
  }
  return false;
}

/** What a run's lifecycle ended as (or is), and when. */
function runWhen(run) {
  const l = run.lifecycle;
  return l.completedAt ?? l.startedAt ?? l.createdAt;
}

/** The schedule a form's choice makes: a cron expression, or none. */
function cronOf(kind, time, custom) {
  const [hh, mm] = (time || '09:00').split(':').map((n) => Number.parseInt(n, 10) || 0);
  switch (kind) {
    case 'daily': return `${mm} ${hh} * * *`;
    case 'weekdays': return `${mm} ${hh} * * 1-5`;
    case 'hourly': return `${mm} * * * *`;
    case 'custom': return custom.trim();
    default: return null;
  }
}

/**
 * One event trigger in the form: what it listens to (a type the host defines), the events of it
 * that start a run, and its settings as the type's schema names them (every one a text). `row.trigger()`
 * answers the trigger to save, keeping what the form does not show of an edited one.
 */
function eventRow(definitions, trigger, n) {
  const kind = h('select', { name: 'event-type' },
    definitions.map((d) => h('option', { value: d.type, text: d.title, selected: d.type === trigger?.type })));
  const about = h('p', { class: 'hint' });
  const body = h('div', { class: 'event-body' });
  const row = h('fieldset', { class: 'event-trigger', data: { n } },
    h('legend', { text: `Event ${n}` }),
    h('label', {}, h('span', { text: 'Listen to' }), kind), about, body,
    h('button', { type: 'button', data: { action: 'remove-event' }, on: { click: () => row.remove() } }, 'Remove this event'));
  const definition = () => definitions.find((d) => d.type === kind.value);
  const draw = () => {
    const d = definition();
    const same = trigger?.type === d?.type;
    about.textContent = d?.description ?? '';
    const required = d?.configSchema?.required ?? [];
    body.replaceChildren(
      h('div', { class: 'events', role: 'group', 'aria-label': 'Which events' }, (d?.events ?? []).map((e) => h('label', { class: 'check', title: e.description ?? '' },
        h('input', { type: 'checkbox', name: 'event', value: e.id, checked: same ? trigger.events.some((x) => x.id === e.id) : d.events.length === 1 }),
        h('span', { text: e.title })))),
      ...Object.entries(d?.configSchema?.properties ?? {}).map(([key, p]) => h('label', { title: p.description ?? '' },
        h('span', { text: required.includes(key) ? p.title : `${p.title} (optional)` }),
        h('input', { type: 'text', name: `config-${key}`, value: same ? String(trigger.config?.[key] ?? '') : '', placeholder: p.description ?? '' }))));
  };
  kind.addEventListener('change', draw);
  draw();
  /** What must be filled before it can be saved, said; or null. */
  row.problem = () => {
    const d = definition();
    if (!d) return null;
    if (!body.querySelector('input[name=event]:checked')) return `Event ${n}: pick which of its events start a run.`;
    const missing = (d.configSchema?.required ?? []).find((key) => !body.querySelector(`input[name="config-${key}"]`)?.value.trim());
    return missing ? `Event ${n}: ${d.configSchema.properties[missing]?.title ?? missing} is needed.` : null;
  };
  row.trigger = () => {
    const d = definition();
    if (!d) return null;
    const same = trigger?.type === d.type;
    const config = same ? { ...(trigger.config ?? {}) } : {};
    for (const key of Object.keys(d.configSchema?.properties ?? {})) {
      const value = body.querySelector(`input[name="config-${key}"]`).value.trim();
      if (value) config[key] = value; else delete config[key];
    }
    const events = [...body.querySelectorAll('input[name=event]:checked')].map((c) => d.events.find((e) => e.id === c.value));
    return { kind: 'event', id: same ? trigger.id : `${d.type}-${n}`, type: d.type, title: d.title, events, config };
  };
  return row;
}

export class Automations {
  constructor(app) {
    this.app = app;
    this.state = null;
    this.fromSeq = 0;
    this.waiting = [];
    this.dialog = null;
    this.listener = (env, snap) => (snap ? this.seed(snap) : env ? this.take(env) : this.again());
  }

  /** Opens the view (watching the catalogue while it is open). */
  async show() {
    if (this.dialog) return;
    this.list = h('ul', { class: 'automation-list', 'aria-label': 'Automations' });
    this.editorEl = h('div', { class: 'automation-editor-slot' });
    this.dialog = h('dialog', { class: 'automations' },
      h('div', { class: 'automations-head' },
        h('h2', { text: 'Automations' }),
        h('span', { class: 'zone', text: `Times in ${ZONE}` }),
        h('span', { class: 'spacer' }),
        h('button', { class: 'primary', type: 'button', data: { action: 'new-automation' }, on: { click: () => this.edit(null) } }, 'New automation'),
        h('button', { type: 'button', on: { click: () => this.dialog.close() } }, 'Close')),
      this.editorEl, this.list);
    this.dialog.addEventListener('close', () => this.hide());
    document.body.append(this.dialog);
    this.dialog.showModal();
    const taps = this.app.taps;
    if (!taps.has(CATALOGUE)) taps.set(CATALOGUE, new Set());
    taps.get(CATALOGUE).add(this.listener);
    try {
      const snap = await this.app.conn.subscribe(CATALOGUE);
      if (snap) this.seed(snap);
    } catch (e) { this.app.toast(`Automations: ${e.message}`); }
  }

  hide() {
    const set = this.app.taps.get(CATALOGUE);
    set?.delete(this.listener);
    if (set && !set.size) { this.app.taps.delete(CATALOGUE); this.app.conn.unsubscribe(CATALOGUE); }
    this.dialog?.remove();
    this.dialog = null;
    this.state = null;
  }

  again() {
    this.state = null;
    this.app.conn.subscribe(CATALOGUE).then((snap) => snap && this.seed(snap)).catch(() => {});
  }

  seed(snap) {
    this.state = structuredClone(snap.state);
    this.fromSeq = snap.fromSeq ?? 0;
    const held = this.waiting;
    this.waiting = [];
    for (const env of held) this.take(env);
    this.render();
  }

  take(env) {
    if (!this.state) { this.waiting.push(env); return; }
    if (env.serverSeq <= this.fromSeq) return;
    this.fromSeq = env.serverSeq;
    if (fold(this.state, env.action)) this.render();
  }

  render() {
    if (!this.dialog || !this.state) return;
    const entries = this.state.entries;
    if (!entries.length) {
      this.list.replaceChildren(h('li', { class: 'empty', text: 'No automations yet. An automation runs an agent on a schedule or an event, with nobody watching; its changes wait for you to merge them.' }));
      return;
    }
    this.list.replaceChildren(...entries.map((e) => this.row(e)));
  }

  row(entry) {
    const d = entry.definition;
    const schedule = d.triggers.map((t) => (t.kind === 'schedule' ? t.schedule.expression : t.title)).join(', ') || 'when run';
    const toggle = h('input', { type: 'checkbox', checked: d.enabled, 'aria-label': 'On',
      on: { change: () => this.app.act(CATALOGUE, { type: 'automation/updateRequested', resource: entry.resource, changes: { enabled: toggle.checked } }) } });
    const runs = entry.runs.slice(0, 5).map((run) => h('li', { class: 'run', data: { status: run.lifecycle.status, run: run.resource } },
      h('span', { class: `run-status ${run.lifecycle.status}`, text: run.lifecycle.status }),
      h('span', { class: 'when', text: local(runWhen(run)) }),
      run.lifecycle.status === 'failed' ? h('span', { class: 'why', text: run.lifecycle.error?.message ?? '' }) : null,
      run.primarySession ? h('button', { type: 'button', class: 'ghost', data: { action: 'open-run' }, on: { click: () => this.openRun(run) } }, 'Open') : null,
      ['pending', 'running'].includes(run.lifecycle.status)
        ? h('button', { type: 'button', class: 'ghost danger', on: { click: () => this.cancel(run) } }, 'Cancel') : null));
    return h('li', { class: 'automation', data: { automation: entry.resource } },
      h('div', { class: 'automation-line' },
        h('label', { class: 'onoff' }, toggle, h('span', { text: 'On' })),
        h('strong', { class: 'title', text: d.title }),
        h('span', { class: 'schedule', text: schedule }),
        h('span', { class: 'next', text: entry.nextRunAt ? `Next: ${local(entry.nextRunAt)}` : (d.enabled ? (d.triggers.length ? 'On an event' : 'No schedule') : 'Off') }),
        h('span', { class: 'spacer' }),
        h('button', { type: 'button', data: { action: 'run-now' }, on: { click: () => this.runNow(entry) } }, 'Run now'),
        h('button', { type: 'button', class: 'ghost', on: { click: () => this.edit(entry) } }, 'Edit'),
        h('button', { type: 'button', class: 'ghost danger', on: { click: () => this.remove(entry) } }, 'Remove')),
      runs.length ? h('ul', { class: 'runs', 'aria-label': 'Last runs' }, runs) : h('p', { class: 'no-runs', text: 'Not run yet.' }));
  }

  async runNow(entry) {
    try {
      await this.app.conn.request('runAutomation', { channel: CATALOGUE, automation: entry.resource, requestId: crypto.randomUUID() });
    } catch (e) { this.app.toast(`Run now: ${e.message}`); }
  }

  cancel(run) {
    this.app.conn.subscribe(run.resource)
      .then(() => this.app.act(run.resource, { type: 'automationRun/cancelRequested' }))
      .catch((e) => this.app.toast(`Cancel: ${e.message}`));
  }

  async remove(entry) {
    if (!(await this.app.ask(`Remove “${entry.definition.title}”? Its runs' sessions stay.`, 'Remove'))) return;
    this.app.act(CATALOGUE, { type: 'automation/removed', resource: entry.resource });
  }

  /** The run's session, opened beside the others (where its changes are reviewed and merged). */
  openRun(run) {
    this.dialog?.close();
    this.app.open(run.primarySession);
  }

  /** The form for a new automation (`entry` null) or to edit one. */
  edit(entry) {
    const d = entry?.definition;
    const agents = this.app.root?.agents ?? [];
    const schedule = d?.triggers.find((t) => t.kind === 'schedule');
    const title = h('input', { name: 'title', type: 'text', value: d?.title ?? '', placeholder: 'Nightly dependency bump' });
    const message = h('textarea', { name: 'message', rows: '3', placeholder: 'What each run is asked to do' });
    message.value = d?.message.text ?? '';
    const agent = h('select', { name: 'agent' }, agents.map((a) => h('option', { value: a.provider, text: a.displayName || a.provider, selected: a.provider === d?.session.provider })));
    const folder = h('input', { name: 'folder', type: 'text', value: uriPath(d?.session.workingDirectories?.[0] ?? this.app.defaultDirectory ?? ''), placeholder: '/path/to/project' });
    const kind = h('select', { name: 'when' },
      [['daily', 'Every day'], ['weekdays', 'Weekdays'], ['hourly', 'Every hour'], ['custom', 'Cron expression'], ['none', 'Only when run']]
        .map(([v, t]) => h('option', { value: v, text: t, selected: schedule ? v === 'custom' : v === (d ? 'none' : 'daily') })));
    const time = h('input', { name: 'time', type: 'time', value: '09:00' });
    const custom = h('input', { name: 'cron', type: 'text', value: schedule?.schedule.expression ?? '', placeholder: '0 9 * * 1-5' });
    const preview = h('ol', { class: 'preview', 'aria-label': 'Next runs' });
    const error = h('p', { class: 'form-error' });
    const zone = schedule?.schedule.timeZone ?? ZONE;
    const refresh = async () => {
      time.closest('label').hidden = !['daily', 'weekdays', 'hourly'].includes(kind.value);
      custom.closest('label').hidden = kind.value !== 'custom';
      const expression = cronOf(kind.value, time.value, custom.value);
      if (!expression) { preview.replaceChildren(h('li', { class: 'none', text: 'No schedule: it runs when you run it, or on an event below.' })); return; }
      try {
        const r = await this.app.conn.request('ahpd/automationSchedulePreview', { channel: CATALOGUE, schedule: { expression, timeZone: zone }, count: 3 });
        preview.replaceChildren(...r.occurrences.map((at) => h('li', { text: local(at) })));
        error.textContent = '';
      } catch (e) { preview.replaceChildren(); error.textContent = e.message; }
    };
    // Events that start a run too, as the host defines them (listAutomationTriggerDefinitions).
    const events = h('div', { class: 'event-triggers' });
    const addEvent = h('button', { type: 'button', data: { action: 'add-event' }, disabled: true }, 'Add an event');
    let definitions = [];
    let added = 0;
    const rowOf = (trigger) => eventRow(definitions, trigger, ++added);
    addEvent.addEventListener('click', () => events.append(rowOf(null)));
    this.app.conn.request('listAutomationTriggerDefinitions', { channel: CATALOGUE })
      .then((r) => {
        definitions = r.items ?? [];
        events.replaceChildren(...(d?.triggers ?? []).filter((t) => t.kind === 'event').map(rowOf));
        addEvent.disabled = !definitions.length;
      })
      .catch((e) => { error.textContent = `Events: ${e.message}`; });
    for (const el of [kind, time, custom]) el.addEventListener('input', refresh);
    kind.addEventListener('change', refresh);
    const save = h('button', { class: 'primary', type: 'button', data: { action: 'save-automation' } }, entry ? 'Save' : 'Create');
    const form = h('form', { class: 'automation-editor' },
      h('h3', { text: entry ? `Edit “${d.title}”` : 'New automation' }),
      h('label', {}, h('span', { text: 'Title' }), title),
      h('label', {}, h('span', { text: 'Message' }), message),
      h('label', {}, h('span', { text: 'Agent' }), agent),
      h('label', {}, h('span', { text: 'Folder' }), folder),
      h('label', {}, h('span', { text: 'When' }), kind),
      h('label', {}, h('span', { text: 'At' }), time),
      h('label', {}, h('span', { text: 'Cron' }), custom),
      h('div', { class: 'preview-box' }, h('span', { text: `Next runs (${zone})` }), preview),
      h('div', { class: 'events-box' }, h('span', { text: 'Also when an event happens' }), events, addEvent),
      h('p', { class: 'hint', text: 'Each run is a new session in a worktree of its own; nobody answers its questions, so it decides; a confirmation waits for you.' }),
      error,
      h('div', { class: 'dialog-actions' }, h('button', { type: 'button', on: { click: () => this.editorEl.replaceChildren() } }, 'Cancel'), save));
    save.addEventListener('click', () => {
      const rows = [...events.querySelectorAll('fieldset.event-trigger')];
      const problem = rows.map((row) => row.problem()).find(Boolean);
      if (problem) { error.textContent = problem; return; }
      const expression = cronOf(kind.value, time.value, custom.value);
      const definition = {
        title: title.value.trim(),
        message: { text: message.value, origin: { kind: 'automation' } },
        session: { provider: agent.value, ...(folder.value.trim() ? { workingDirectories: [pathUri(folder.value.trim())] } : {}) },
        enabled: d?.enabled ?? true,
        triggers: [
          ...rows.map((row) => row.trigger()).filter(Boolean),
          ...(expression ? [{ kind: 'schedule', id: schedule?.id ?? 'schedule', schedule: { expression, timeZone: zone }, misfirePolicy: schedule?.misfirePolicy ?? 'runOnce' }] : []),
        ],
      };
      if (entry) {
        this.app.act(CATALOGUE, { type: 'automation/updateRequested', resource: entry.resource, changes: definition });
      } else {
        const id = definition.title.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '') || crypto.randomUUID();
        this.app.act(CATALOGUE, { type: 'automation/createRequested', resource: `ahp-automation:/${id}`, definition });
      }
      this.editorEl.replaceChildren();
    });
    this.editorEl.replaceChildren(form);
    refresh();
    title.focus();
  }
}
