// rpc.js: one AHP 1.0.0 connection to the daemon that served this page — JSON-RPC 2.0, one message
// per WebSocket text frame — that comes back on its own. When the socket drops (the daemon
// restarted, the laptop slept) it asks `/ui/door` until the daemon answers, opens a new socket,
// and resumes with `reconnect` (replay or snapshots); if the daemon does not know this client any
// more it starts afresh with `initialize`, subscribed to the same channels. A refused token stops
// the retries and says so.

export const ROOT = 'ahp-root://';
const VERSIONS = ['1.0.0'];

export class Connection {
  /**
   * @param {object} o
   * @param {string|null} o.token the connection token, or null
   * @param {(kind: 'snapshot'|'replay', data: object) => void} o.onResync after every (re)start
   * @param {(env: object) => void} o.onAction an action envelope
   * @param {(method: string, params: object) => void} o.onNotify a protocol notification
   * @param {(state: string) => void} o.onState 'connecting' | 'online' | 'offline'
   * @param {(why: string) => void} o.onRefused the daemon refused the token
   */
  constructor(o) {
    Object.assign(this, o);
    this.clientId = `web-${crypto.randomUUID()}`;
    this.nextId = 1;
    this.clientSeq = 0;
    this.pending = new Map();
    this.subscriptions = new Set([ROOT]);
    this.lastSeq = 0;
    this.started = false;
    this.ws = null;
    this.retry = 0;
    this.stopped = false;
    // Messages wait here and are taken in slices of a few milliseconds: the browser hands a burst
    // of WebSocket messages over in one task, and folding thousands of deltas at once would hold
    // the page still.
    this.inbox = [];
    this.draining = false;
    this.tick = new MessageChannel();
    this.tick.port1.onmessage = () => this.drain();
  }

  start() { this.open(); }

  async open() {
    if (this.stopped) return;
    this.onState('connecting');
    let door;
    try {
      door = await fetch('/ui/door', { headers: this.token ? { Authorization: `Bearer ${this.token}` } : {}, cache: 'no-store' });
    } catch {
      return this.later();
    }
    if (door.status === 401 || door.status === 403) {
      this.stopped = true;
      this.onRefused((await door.text()).trim());
      return;
    }
    if (!door.ok) return this.later();
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const query = this.token ? `?tkn=${encodeURIComponent(this.token)}` : '';
    const ws = new WebSocket(`${proto}//${location.host}/${query}`);
    this.ws = ws;
    ws.onmessage = (e) => {
      this.inbox.push(e.data);
      if (!this.draining) { this.draining = true; this.tick.port2.postMessage(null); }
    };
    ws.onclose = () => this.closed(ws);
    ws.onopen = () => this.handshake().catch((e) => { console.warn('handshake failed', e); ws.close(); });
  }

  later() {
    const wait = Math.min(2000, 100 * 2 ** this.retry++);
    setTimeout(() => this.open(), wait);
  }

  closed(ws) {
    if (this.ws !== ws) return;
    this.ws = null;
    this.drain();
    for (const { reject } of this.pending.values()) reject(new Error('the connection closed'));
    this.pending.clear();
    this.onState('offline');
    this.later();
  }

  async handshake() {
    const subscriptions = [...this.subscriptions];
    if (this.started && this.lastSeq > 0) {
      try {
        const result = await this.request('reconnect', { channel: ROOT, clientId: this.clientId, lastSeenServerSeq: this.lastSeq, subscriptions });
        if (result.type === 'replay') {
          for (const uri of result.missing ?? []) this.subscriptions.delete(uri);
          this.online();
          this.onResync('replay', result);
        } else {
          const have = new Set(result.snapshots.map((s) => s.resource));
          for (const uri of subscriptions) if (!have.has(uri)) this.subscriptions.delete(uri);
          this.lastSeq = Math.max(0, ...result.snapshots.map((s) => s.fromSeq));
          this.online();
          this.onResync('snapshot', { snapshots: result.snapshots });
        }
        return;
      } catch (e) {
        console.info('reconnect refused; starting afresh', e);
      }
    }
    const init = await this.request('initialize', {
      channel: ROOT, protocolVersions: VERSIONS, clientId: this.clientId,
      clientInfo: { name: 'ahpd-web', title: 'ahpd window', version: '1' },
      initialSubscriptions: subscriptions, locale: navigator.language,
    });
    this.lastSeq = init.serverSeq ?? 0;
    const have = new Set(init.snapshots.map((s) => s.resource));
    for (const uri of subscriptions) if (!have.has(uri) && uri !== ROOT) this.subscriptions.delete(uri);
    this.started = true;
    this.online();
    this.onResync('snapshot', init);
  }

  online() {
    this.retry = 0;
    this.onState('online');
  }

  /** Takes waiting messages for at most ~6 ms, then lets the page breathe and comes back. */
  drain() {
    const until = performance.now() + 6;
    let i = 0;
    while (i < this.inbox.length && performance.now() < until) {
      const batch = Math.min(this.inbox.length, i + 64);
      for (; i < batch; i++) this.receive(this.inbox[i]);
    }
    this.inbox = i === this.inbox.length ? [] : this.inbox.slice(i);
    if (this.inbox.length) this.tick.port2.postMessage(null); else this.draining = false;
  }

  receive(data) {
    let m;
    try { m = JSON.parse(data); } catch { return; }
    if (m.id !== undefined && m.method === undefined) {
      const waiting = this.pending.get(m.id);
      if (!waiting) return;
      this.pending.delete(m.id);
      if (m.error) waiting.reject(Object.assign(new Error(m.error.message), { code: m.error.code, data: m.error.data }));
      else waiting.resolve(m.result);
      return;
    }
    if (m.id !== undefined) {
      // A request from the daemon (resource reads, watches): this page serves none of them.
      this.send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: `the web window does not answer ${m.method}` } });
      return;
    }
    if (m.method === 'action') {
      const seq = m.params.serverSeq;
      if (seq > this.lastSeq) this.lastSeq = seq;
      this.onAction(m.params);
    } else if (m.method) {
      this.onNotify(m.method, m.params);
    }
  }

  send(message) {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(message));
    else throw new Error('not connected');
  }

  request(method, params) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      try { this.send({ jsonrpc: '2.0', id, method, params }); } catch (e) { reject(e); return; }
      this.pending.set(id, { resolve, reject });
    });
  }

  /** Dispatches an action; the daemon's echo (or its rejection) comes back as an envelope. */
  dispatch(channel, action) {
    const clientSeq = ++this.clientSeq;
    this.send({ jsonrpc: '2.0', method: 'dispatchAction', params: { channel, clientSeq, action } });
    return clientSeq;
  }

  async subscribe(uri) {
    const result = await this.request('subscribe', { channel: uri });
    this.subscriptions.add(uri);
    return result.snapshot;
  }

  unsubscribe(uri) {
    if (!this.subscriptions.delete(uri)) return;
    try { this.send({ jsonrpc: '2.0', method: 'unsubscribe', params: { channel: uri } }); } catch { /* gone with the socket */ }
  }
}
