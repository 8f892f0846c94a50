// kept.js: content a tool returned that the host kept for the session (a `resource` in a call's
// result, named by a `session-db-resource:` reference), read with `resourceRead` on the session's
// channel: a picture drawn inline, larger on a click, and anything else offered as a download. The
// bytes become a `blob:` URL the page made itself (the page's policy allows images from `blob:` and
// nowhere else beyond its own origin), read once per reference however often the call is drawn.

import { h } from './dom.js';

/** Reads already asked for, by reference: a promise of `{ url, type, size }`. */
const reads = new Map();

/** The bytes `uri` names, read through `app`'s connection on `session`'s channel, as a blob URL. */
function read(app, session, uri, fallbackType) {
  let pending = reads.get(uri);
  if (!pending) {
    pending = app.conn.request('resourceRead', { channel: session, uri }).then((r) => {
      const bytes = r.encoding === 'utf-8'
        ? new TextEncoder().encode(r.data)
        : Uint8Array.from(atob(r.data), (c) => c.charCodeAt(0));
      const type = r.contentType || fallbackType || 'application/octet-stream';
      return { url: URL.createObjectURL(new Blob([bytes], { type })), type, size: bytes.length };
    });
    // A failed read is asked again the next time the call is drawn.
    pending.catch(() => reads.delete(uri));
    reads.set(uri, pending);
  }
  return pending;
}

/** "12 KiB", "3.4 MiB", "300 bytes". */
function size(bytes) {
  if (bytes == null) return '';
  if (bytes >= 1024 * 1024) return `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;
  if (bytes >= 1024) return `${Math.round(bytes / 1024)} KiB`;
  return `${bytes} bytes`;
}

/** A name to save the content under: its call's and place's, with the type's extension. */
function fileName(uri, type) {
  const parts = uri.split('/');
  const [call, place] = [decodeURIComponent(parts.at(-2) ?? 'content'), parts.at(-1) ?? '0'];
  const ext = (type ?? '').split('/')[1]?.split(/[;+]/)[0] || 'bin';
  return `${call.replace(/[^A-Za-z0-9_-]/g, '_')}-${place}.${ext}`;
}

/** True for a reference the host keeps for a session (the only kind the page reads). */
export function isKept(uri) {
  return typeof uri === 'string' && uri.startsWith('session-db-resource:/');
}

/** One `resource` of a call's result: a picture inline, else a download. */
export function keptContent(app, session, c) {
  if (!isKept(c.uri)) return h('p', { class: 'tool-note', text: `resource: ${c.uri}` });
  if ((c.contentType ?? '').startsWith('image/')) return picture(app, session, c);
  return download(app, session, c);
}

function picture(app, session, c) {
  const frame = h('button', { class: 'kept-image loading', type: 'button', title: 'Show larger', data: { kept: c.uri } },
    h('span', { class: 'kept-note', text: `an image, ${size(c.sizeHint)}` }));
  read(app, session, c.uri, c.contentType).then(({ url }) => {
    const img = document.createElement('img');
    img.alt = 'An image the tool returned';
    img.src = url; // a blob: URL this page made from the bytes it read
    frame.replaceChildren(img);
    frame.classList.remove('loading');
  }, (e) => {
    frame.classList.remove('loading');
    frame.classList.add('failed');
    frame.replaceChildren(h('span', { class: 'kept-note', text: `The image could not be read: ${e.message}` }));
  });
  frame.addEventListener('click', () => enlarge(app, session, c));
  return h('div', { class: 'kept' }, frame);
}

/** The picture as large as the window allows, over the page; a click or Escape closes it. */
function enlarge(app, session, c) {
  read(app, session, c.uri, c.contentType).then(({ url }) => {
    const img = document.createElement('img');
    img.alt = 'An image the tool returned, enlarged';
    img.src = url;
    const shade = h('dialog', { class: 'kept-large', 'aria-label': 'The image, larger' },
      h('div', { class: 'kept-large-bar' },
        h('span', { text: `${fileName(c.uri, c.contentType)} · ${size(c.sizeHint)}` }),
        saveButton(app, session, c, 'Download'),
        h('button', { class: 'ghost', type: 'button', data: { action: 'close' }, on: { click: () => shade.close() } }, 'Close')),
      img);
    shade.addEventListener('close', () => shade.remove());
    shade.addEventListener('click', (e) => { if (e.target === shade || e.target === img) shade.close(); });
    document.body.append(shade);
    shade.showModal();
  }, (e) => app.toast?.(`The image could not be read: ${e.message}`));
}

function download(app, session, c) {
  const what = c.contentType ? `${c.contentType}, ${size(c.sizeHint)}` : size(c.sizeHint);
  return h('p', { class: 'kept-file' },
    h('span', { class: 'kept-note', text: `${fileName(c.uri, c.contentType)} (${what})` }),
    ' ', saveButton(app, session, c, 'Download'));
}

function saveButton(app, session, c, label) {
  return h('button', { class: 'ghost', type: 'button', data: { action: 'download', kept: c.uri }, on: { click: () => {
    read(app, session, c.uri, c.contentType).then(({ url, type }) => {
      const a = document.createElement('a');
      a.href = url; // a blob: URL this page made
      a.download = fileName(c.uri, type);
      document.body.append(a);
      a.click();
      a.remove();
    }, (e) => app.toast?.(`It could not be read: ${e.message}`));
  } } }, label);
}
