// attention.js: how the tab says that sessions need the person — the count in its title, a badge on
// its icon (drawn on a canvas), and, once the person allowed it, a system notification when a
// session starts needing them while the tab is hidden.

import { h } from './dom.js';

const TITLE = 'ahpd';

export class Attention {
  constructor(app) {
    this.app = app;
    this.waiting = new Set();
    this.drawn = null;
    this.icon = document.createElement('link');
    this.icon.rel = 'icon';
    document.head.append(this.icon);
    const can = 'Notification' in window;
    this.askButton = h('button', {
      class: 'ghost notify-ask', type: 'button', data: { action: 'notify' }, hidden: !can || Notification.permission !== 'default',
      title: 'Tell me when a session needs me while this tab is hidden',
      on: { click: () => this.ask() },
    }, 'Notify me');
    this.draw(0);
  }

  async ask() {
    try { await Notification.requestPermission(); } catch { /* the browser said nothing */ }
    this.askButton.hidden = Notification.permission !== 'default';
  }

  /** The sessions that need the person now; says so when that changed. */
  update() {
    const now = new Set();
    for (const [uri, s] of this.app.sessions) if (this.app.kindOf(s) === 'waiting') now.add(uri);
    const fresh = [...now].filter((uri) => !this.waiting.has(uri));
    this.waiting = now;
    if (now.size !== this.drawn) this.draw(now.size);
    if (fresh.length && document.hidden) for (const uri of fresh) this.tell(uri);
  }

  /** The title and the icon for `n` sessions waiting. */
  draw(n) {
    this.drawn = n;
    document.title = n ? `(${n}) ${TITLE} — ${n === 1 ? 'a session needs you' : `${n} sessions need you`}` : TITLE;
    const canvas = document.createElement('canvas');
    canvas.width = canvas.height = 32;
    const g = canvas.getContext('2d');
    if (!g) return;
    g.fillStyle = '#2f6fed';
    g.beginPath();
    if (g.roundRect) g.roundRect(2, 2, 28, 28, 7); else g.rect(2, 2, 28, 28);
    g.fill();
    g.fillStyle = '#ffffff';
    g.font = 'bold 17px system-ui, sans-serif';
    g.textAlign = 'center';
    g.textBaseline = 'middle';
    g.fillText('a', n ? 12 : 16, 17);
    if (n) {
      g.fillStyle = '#c77700';
      g.beginPath();
      g.arc(23, 10, 9, 0, Math.PI * 2);
      g.fill();
      g.fillStyle = '#ffffff';
      g.font = 'bold 13px system-ui, sans-serif';
      g.fillText(n > 9 ? '9+' : String(n), 23, 11);
    }
    this.icon.href = canvas.toDataURL('image/png');
    this.icon.dataset.waiting = String(n);
  }

  /** A system notification for one session that started needing the person. */
  tell(uri) {
    if (!('Notification' in window) || Notification.permission !== 'granted') return;
    const what = this.app.waitingFor(uri);
    try {
      const note = new Notification(`${this.app.titleOf(uri)} needs you`, {
        body: what ? `It waits for a ${what}.` : 'It waits for you.', tag: uri,
      });
      note.onclick = () => { window.focus(); this.app.open(uri); note.close(); };
    } catch { /* some browsers allow notifications only from a service worker */ }
  }
}
