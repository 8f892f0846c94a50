// dom.js: builds DOM nodes from data, never from markup. Text goes in through textContent and text
// nodes only, so nothing a model or another client says can become HTML, script or a link.

/** An element: props set attributes, `class`, `text`, `on` (listeners), `data` (dataset). */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value == null || value === false) continue;
    switch (key) {
      case 'class': el.className = value; break;
      case 'text': el.textContent = value; break;
      case 'value': el.value = value; break;
      case 'checked': case 'disabled': case 'open': case 'selected': case 'hidden': el[key] = true; break;
      case 'on': for (const [event, fn] of Object.entries(value)) el.addEventListener(event, fn); break;
      case 'data': for (const [k, v] of Object.entries(value)) el.dataset[k] = String(v); break;
      default:
        // Handlers and addresses never come from here: a stray one would be a way in.
        if (/^on|^(style|href|src|srcdoc|action|formaction)$/i.test(key)) throw new Error(`h(): ${key} is not allowed`);
        el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

/** Appends children: nodes as they are, strings and numbers as text, arrays flattened. */
export function append(el, children) {
  for (const child of children) {
    if (child == null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
  return el;
}

/** A link that opens outside the page, only for web and mail addresses; anything else is text. */
export function safeLink(url, children) {
  const href = String(url).trim();
  if (!/^(https?:\/\/|mailto:)/i.test(href)) return null;
  const a = document.createElement('a');
  a.href = href;
  a.rel = 'noopener noreferrer nofollow';
  a.target = '_blank';
  a.title = href;
  append(a, children);
  return a;
}

/** A count with its noun, singular for one: "1 file", "2 files", "0 files". */
export function count(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

/** What a change added and removed, as every count of it is said: "+3 −1 in 1 file". */
export function changedLines({ additions = 0, deletions = 0, files = 0 } = {}) {
  return `+${additions ?? 0} −${deletions ?? 0} in ${count(files ?? 0, 'file')}`;
}

/** "now", "5 min", "3 h", "2 d" since an ISO time. */
export function ago(iso) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, (Date.now() - t) / 1000);
  if (s < 45) return 'now';
  if (s < 3600) return `${Math.round(s / 60)} min`;
  if (s < 86400) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

/** A file URI's path, for people. */
export function uriPath(uri) {
  if (typeof uri !== 'string') return '';
  if (!uri.startsWith('file://')) return uri;
  try { return decodeURIComponent(uri.slice('file://'.length)); } catch { return uri.slice('file://'.length); }
}

/** A path as a file URI. */
export function pathUri(path) {
  const p = path.trim();
  if (/^[a-z][a-z0-9+.-]*:/i.test(p)) return p;
  return 'file://' + p.split('/').map(encodeURIComponent).join('/');
}

/** A random id (RFC 4122 v4). */
export function uuid() {
  return crypto.randomUUID();
}
