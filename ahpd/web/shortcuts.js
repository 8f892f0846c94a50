// shortcuts.js: the window's keyboard shortcuts, and the list of them `?` shows. A key typed into a
// field is the field's; the shortcuts take only keys pressed elsewhere, without Ctrl, Alt or Meta.

import { h } from './dom.js';

/** [keys, what they do]. */
const KEYS = [
  [['?'], 'Show these shortcuts'],
  [['/'], 'Search the sessions'],
  [['n'], 'Start a new session'],
  [['j', 'k'], 'Next and previous session in the list (Enter opens it)'],
  [[']', '['], 'Next and previous open chat (its message field)'],
  [['t'], 'Show or hide the terminal of the chat you are in'],
  [['Tab'], 'Move through buttons: Allow, Deny and every option of a confirmation'],
  [['Enter'], 'Send (in a message field); Shift+Enter starts a new line'],
  [['Esc'], 'Leave a field, or close this list'],
  [['Shift+Esc'], 'Leave a terminal for the chat’s message field (a terminal keeps every other key)'],
];

const typing = (el) => /INPUT|TEXTAREA|SELECT/.test(el?.tagName ?? '') || el?.isContentEditable || el?.closest?.('.xterm');

export function installShortcuts(app) {
  let dialog = null;
  const show = () => {
    if (dialog) { dialog.close(); return; }
    dialog = h('dialog', { class: 'keys', 'aria-label': 'Keyboard shortcuts' },
      h('h2', { text: 'Keyboard shortcuts' }),
      h('table', {}, h('tbody', {}, KEYS.map(([keys, what]) => h('tr', {},
        h('td', {}, keys.flatMap((k, i) => (i ? [' ', h('kbd', { text: k })] : [h('kbd', { text: k })]))),
        h('td', { text: what }))))),
      h('div', { class: 'dialog-actions' }, h('button', { type: 'button', on: { click: () => dialog.close() } }, 'Close')));
    dialog.addEventListener('close', () => { dialog.remove(); dialog = null; });
    document.body.append(dialog);
    dialog.showModal();
  };
  /** The open chat the focus is in, else the first. */
  const currentPane = () => app.panes.find((p) => p.el.contains(document.activeElement)) ?? app.panes[0];
  const movePane = (step) => {
    if (!app.panes.length) return;
    const at = app.panes.indexOf(currentPane());
    const next = app.panes[(at + step + app.panes.length) % app.panes.length];
    next.el.scrollIntoView({ inline: 'nearest', block: 'nearest' });
    next.input.focus({ preventScroll: true });
  };
  const moveSession = (step) => {
    const items = [...app.list.querySelectorAll('li.session')];
    if (!items.length) return;
    const at = items.indexOf(document.activeElement?.closest('li.session'));
    items[at < 0 ? 0 : Math.min(items.length - 1, Math.max(0, at + step))].focus();
  };
  // Before the terminal sees it: the one key that leaves a terminal.
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || !e.shiftKey || !document.activeElement?.closest?.('.xterm')) return;
    e.preventDefault();
    e.stopPropagation();
    currentPane()?.input.focus();
  }, true);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && typing(document.activeElement) && !document.activeElement.closest('.xterm')) { document.activeElement.blur(); return; }
    if (e.ctrlKey || e.metaKey || e.altKey || e.defaultPrevented || typing(document.activeElement) || document.querySelector('dialog[open]:not(.keys)')) return;
    const act = {
      '?': show,
      '/': () => app.searchInput.focus(),
      n: () => app.newSession(),
      j: () => moveSession(1),
      k: () => moveSession(-1),
      ']': () => movePane(1),
      '[': () => movePane(-1),
      t: () => currentPane()?.drawer.toggle(),
    }[e.key];
    if (!act) return;
    e.preventDefault();
    act();
  });
  return { show };
}
