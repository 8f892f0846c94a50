// markdown.js: a small markdown renderer that builds DOM nodes and never parses HTML. Raw HTML in
// the text stays text; links become links only for http(s) and mail addresses; images are named,
// never loaded. `MarkdownView` renders a growing text (a streaming reply) without redrawing what
// is already there: finished blocks are drawn once, and the open paragraph grows by appending the
// settled part of its text, so a delta costs the size of the delta, not of the reply.

import { h, safeLink } from './dom.js';

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`]*)$/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
const HR = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const LIST = /^(\s*)([-*+]|\d{1,9}[.)])(\s+|$)(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const TABLE = /^\s*\|.*\|\s*$/;

/** The kind of block a line begins. */
function kindOf(line) {
  if (line.trim() === '') return 'blank';
  if (FENCE.test(line)) return 'fence';
  if (HEADING.test(line)) return 'heading';
  if (HR.test(line)) return 'hr';
  if (LIST.test(line)) return 'list';
  if (QUOTE.test(line)) return 'quote';
  if (TABLE.test(line)) return 'table';
  return 'text';
}

/** Whether a line of kind `k` carries on a block of kind `kind`. */
function continues(kind, k, line) {
  switch (kind) {
    case 'text': return k === 'text';
    case 'list': return k === 'list' || (k === 'text' && /^\s{2,}/.test(line));
    case 'quote': return k === 'quote';
    case 'table': return k === 'table';
    default: return false;
  }
}

function lineAt(text, pos) {
  const nl = text.indexOf('\n', pos);
  return nl < 0 ? { line: text.slice(pos), end: text.length, complete: false } : { line: text.slice(pos, nl), end: nl + 1, complete: true };
}

/**
 * The block that starts at or after `pos`: { kind, start, end, complete }. A block is complete when
 * what follows it is known; the last, unfinished line belongs to the block before it for now.
 */
export function scanBlock(text, pos) {
  for (;;) {
    if (pos >= text.length) return null;
    const l = lineAt(text, pos);
    if (!l.complete || l.line.trim() !== '') break;
    pos = l.end;
  }
  const first = lineAt(text, pos);
  const kind = kindOf(first.line);
  const open = { kind, start: pos, end: text.length, complete: false };
  if (!first.complete) return open;
  if (kind === 'heading' || kind === 'hr') return { kind, start: pos, end: first.end, complete: true };
  let p = first.end;
  if (kind === 'fence') {
    const marker = FENCE.exec(first.line)[1];
    while (p < text.length) {
      const l = lineAt(text, p);
      if (!l.complete) return open;
      const t = l.line.trim();
      if (t.startsWith(marker) && t.replace(/^[`~]+/, '') === '') return { kind, start: pos, end: l.end, complete: true };
      p = l.end;
    }
    return open;
  }
  while (p < text.length) {
    const l = lineAt(text, p);
    if (!l.complete) return open;
    const k = kindOf(l.line);
    if (k === 'blank' || !continues(kind, k, l.line)) return { kind, start: pos, end: p, complete: true };
    p = l.end;
  }
  return open;
}

/** Renders a whole markdown text into nodes. */
export function render(text) {
  const out = [];
  let pos = 0;
  for (let b = scanBlock(text, pos); b; b = scanBlock(text, pos)) {
    out.push(renderBlock(b.kind, text.slice(b.start, b.end)));
    pos = b.end;
  }
  return out;
}

/** Renders one block. */
export function renderBlock(kind, src) {
  const lines = src.replace(/\n$/, '').split('\n');
  switch (kind) {
    case 'heading': {
      const m = HEADING.exec(lines[0]);
      const level = Math.min(6, (m?.[1].length ?? 1) + 2);
      return h(`h${level}`, { class: 'md-h' }, inline(m?.[2] ?? ''));
    }
    case 'hr': return h('hr');
    case 'fence': {
      const m = FENCE.exec(lines[0]);
      const body = lines.slice(1);
      const last = body[body.length - 1];
      if (last !== undefined && last.trim().startsWith(m[1]) && last.trim().replace(/^[`~]+/, '') === '') body.pop();
      return h('pre', { class: 'md-code', data: { lang: (m[2] || '').trim().split(/\s/)[0] } }, h('code', { text: body.join('\n') }));
    }
    case 'list': return renderList(lines);
    case 'quote': return h('blockquote', {}, render(lines.map((l) => QUOTE.exec(l)?.[1] ?? l).join('\n')));
    case 'table': return renderTable(lines);
    default: return h('p', {}, inline(lines.join('\n')));
  }
}

function renderList(lines) {
  const first = LIST.exec(lines[0]);
  const ordered = /\d/.test(first[2]);
  const indent = first[1].length;
  const items = [];
  for (const line of lines) {
    const m = LIST.exec(line);
    if (m && m[1].length <= indent + 1) items.push([m[4]]);
    else if (items.length) items[items.length - 1].push(line.replace(new RegExp(`^\\s{0,${indent + 2 + (ordered ? 2 : 0)}}`), ''));
  }
  const list = h(ordered ? 'ol' : 'ul');
  if (ordered && parseInt(first[2], 10) !== 1) list.setAttribute('start', String(parseInt(first[2], 10)));
  for (const item of items) {
    const body = item.join('\n');
    const li = h('li');
    // One paragraph stays inline (no margins); anything more is rendered as blocks.
    if (item.length === 1 || !/\n\s*([-*+]|\d+[.)])\s/.test(body)) li.append(...inline(body));
    else li.append(...render(body));
    list.append(li);
  }
  return list;
}

function renderTable(lines) {
  const cells = (l) => l.trim().replace(/^\|/, '').replace(/\|$/, '').split('|').map((c) => c.trim());
  const table = h('table', { class: 'md-table' });
  let rows = lines;
  if (lines.length > 1 && /^\s*\|?\s*:?-{1,}:?\s*(\|\s*:?-{1,}:?\s*)*\|?\s*$/.test(lines[1])) {
    table.append(h('thead', {}, h('tr', {}, cells(lines[0]).map((c) => h('th', {}, inline(c))))));
    rows = lines.slice(2);
  }
  table.append(h('tbody', {}, rows.map((l) => h('tr', {}, cells(l).map((c) => h('td', {}, inline(c)))))));
  return h('div', { class: 'md-table-wrap' }, table);
}

const ESCAPABLE = /[\\`*_{}[\]()#+\-.!~|>]/;

/** Where the run of `mark` that closes an emphasis opened before `from` is, or -1. */
function closing(src, from, mark) {
  for (let j = src.indexOf(mark, from); j >= 0; j = src.indexOf(mark, j + 1)) {
    if (j > from && !/\s/.test(src[j - 1]) && src[j - 1] !== '\\') {
      if (mark.length === 1 && src[j + 1] === mark) { j++; continue; }
      return j;
    }
  }
  return -1;
}

/** Renders inline markdown into nodes: code, strong, emphasis, strike, links, line breaks. */
export function inline(src) {
  const out = [];
  let text = '';
  const flush = () => { if (text) { out.push(document.createTextNode(text)); text = ''; } };
  for (let i = 0; i < src.length;) {
    const c = src[i];
    if (c === '\\' && ESCAPABLE.test(src[i + 1] ?? '')) { text += src[i + 1]; i += 2; continue; }
    if (c === '\n') { flush(); out.push(h('br')); i++; continue; }
    if (c === '`') {
      const run = /^`+/.exec(src.slice(i, i + 16))[0];
      const end = src.indexOf(run, i + run.length);
      if (end > i) { flush(); out.push(h('code', { text: src.slice(i + run.length, end) })); i = end + run.length; continue; }
      text += run; i += run.length; continue;
    }
    if (c === '*' || c === '_' || (c === '~' && src[i + 1] === '~')) {
      const mark = src[i + 1] === c ? c + c : c;
      const intraword = c === '_' && /\w/.test(src[i - 1] ?? '');
      const close = intraword || /\s/.test(src[i + mark.length] ?? ' ') ? -1 : closing(src, i + mark.length, mark);
      if (close > 0) {
        flush();
        const tag = c === '~' ? 'del' : mark.length === 2 ? 'strong' : 'em';
        out.push(h(tag, {}, inline(src.slice(i + mark.length, close))));
        i = close + mark.length;
        continue;
      }
      text += mark; i += mark.length; continue;
    }
    if (c === '[' || (c === '!' && src[i + 1] === '[')) {
      const image = c === '!';
      const link = parseLink(src, image ? i + 1 : i);
      if (link) {
        flush();
        if (image) out.push(h('span', { class: 'md-image', text: `[image: ${link.text || link.url}]` }));
        else out.push(safeLink(link.url, inline(link.text)) ?? h('span', { class: 'md-inert-link' }, inline(link.text), ` (${link.url})`));
        i = link.end;
        continue;
      }
    }
    text += c; i++;
  }
  flush();
  return out;
}

/** `[text](url)` at `i`: { text, url, end }, or null. */
function parseLink(src, i) {
  let depth = 0;
  let j = i;
  for (; j < src.length; j++) {
    if (src[j] === '\\') { j++; continue; }
    if (src[j] === '[') depth++;
    else if (src[j] === ']' && --depth === 0) break;
  }
  if (j >= src.length || src[j + 1] !== '(') return null;
  let close = j + 2;
  for (let parens = 1; close < src.length; close++) {
    if (src[close] === '(') parens++;
    else if (src[close] === ')' && --parens === 0) break;
  }
  if (close >= src.length) return null;
  const url = src.slice(j + 2, close).trim().split(/\s+/)[0] ?? '';
  return { text: src.slice(i + 1, j), url, end: close + 1 };
}

/**
 * The end of the longest prefix of `src` past `from` that ends on white space with nothing open
 * (code, emphasis, link): drawing that part now cannot change how the rest is drawn. Past `force`
 * characters without such a point, the last white space will do.
 */
export function settled(src, from, force = 600) {
  let code = '';
  let bracket = 0;
  let target = 0;
  const open = new Set();
  let cut = from;
  let lastSpace = -1;
  for (let i = from; i < src.length; i++) {
    const c = src[i];
    if (code) {
      if (src.startsWith(code, i)) { i += code.length - 1; code = ''; }
      continue;
    }
    if (c === '\\') { i++; continue; }
    if (c === '`') { code = /^`+/.exec(src.slice(i, i + 16))[0]; i += code.length - 1; continue; }
    if (target) { if (c === '(') target++; else if (c === ')') target--; continue; }
    if (c === '[') { bracket++; continue; }
    if (c === ']') { if (bracket > 0) bracket--; if (src[i + 1] === '(') { target = 1; i++; } continue; }
    if (c === '*' || c === '_' || c === '~') {
      const mark = src[i + 1] === c ? c + c : c;
      if (c !== '~' || mark.length === 2) {
        if (open.has(mark)) open.delete(mark); else if (!/\s/.test(src[i + mark.length] ?? ' ') && !(c === '_' && /\w/.test(src[i - 1] ?? ''))) open.add(mark);
      }
      i += mark.length - 1;
      continue;
    }
    if (/\s/.test(c)) {
      // Before a line break, after a space: a paragraph's last line break is no break at all.
      const at = c === '\n' ? i : i + 1;
      lastSpace = at;
      if (!bracket && !target && !open.size) cut = at;
    }
  }
  if (cut === from && src.length - from > force && lastSpace > from) return lastSpace;
  return cut;
}

/** The open paragraph of a growing text: settled text is appended once; the rest is redrawn. */
class ParagraphStream {
  constructor() {
    this.el = h('p');
    this.live = h('span', { class: 'md-live' });
    this.el.append(this.live);
    this.src = '';
    this.liveSrc = '';
    this.done = 0;
  }

  update(src) {
    if (!src.startsWith(this.src.slice(0, this.done))) return false;
    this.src = src;
    const cut = settled(src, this.done);
    if (cut > this.done) {
      const settledPart = src.slice(this.done, cut);
      this.live.before(...inline(settledPart));
      this.done = cut;
    }
    const rest = src.slice(this.done);
    if (rest !== this.liveSrc) {
      this.live.replaceChildren(...inline(rest));
      this.liveSrc = rest;
    }
    return true;
  }

  /** The paragraph is whole: what is drawn stays, unless the text it drew has changed. */
  finish(src) {
    const body = src.replace(/\n+$/, '');
    if (!body.startsWith(this.src.slice(0, this.done)) || this.done > body.length) return false;
    this.live.before(...inline(body.slice(this.done)));
    this.live.remove();
    this.done = body.length;
    return true;
  }
}

/** An open code block: its text grows in place. */
class FenceStream {
  constructor() {
    this.code = h('code');
    this.text = document.createTextNode('');
    this.code.append(this.text);
    this.el = h('pre', { class: 'md-code' }, this.code);
  }

  update(src) {
    const nl = src.indexOf('\n');
    const body = nl < 0 ? '' : src.slice(nl + 1);
    const old = this.text.data;
    if (body.startsWith(old)) this.text.appendData(body.slice(old.length)); else this.text.data = body;
    if (nl > 0 && !this.el.dataset.lang) this.el.dataset.lang = (FENCE.exec(src.slice(0, nl))?.[2] ?? '').trim().split(/\s/)[0];
    return true;
  }

  finish() { return false; }
}

/** Any other open block (a list, a table, a quote) is short: redrawn whole. */
class BlockStream {
  constructor(kind) { this.kind = kind; this.el = h('div', { class: 'md-open' }); }
  update(src) { this.el.replaceChildren(renderBlock(this.kind, src)); return true; }
  finish() { return false; }
}

/** A view of a growing markdown text in `el`. */
export class MarkdownView {
  constructor(el) {
    this.el = el;
    this.text = '';
    this.stable = 0;
    this.tail = null;
  }

  /** Shows `text`, which usually extends the text shown before. */
  update(text) {
    if (!text.startsWith(this.text.slice(0, this.stable))) this.reset();
    this.text = text;
    for (;;) {
      const b = scanBlock(text, this.stable);
      if (!b) { this.dropTail(); return; }
      const src = text.slice(b.start, b.end);
      if (!b.complete) { this.streamTail(b, src); return; }
      const kept = this.tail && this.tail.start === b.start && this.tail.kind === b.kind && this.tail.view.finish(src);
      if (!kept) {
        this.dropTail();
        this.el.append(renderBlock(b.kind, src));
      }
      this.tail = null;
      this.stable = b.end;
    }
  }

  streamTail(b, src) {
    if (!this.tail || this.tail.start !== b.start || this.tail.kind !== b.kind) {
      this.dropTail();
      const view = b.kind === 'text' ? new ParagraphStream() : b.kind === 'fence' ? new FenceStream() : new BlockStream(b.kind);
      this.tail = { start: b.start, kind: b.kind, view };
      this.el.append(view.el);
    }
    if (!this.tail.view.update(src)) {
      this.dropTail();
      this.streamTail(b, src);
    }
  }

  dropTail() {
    if (this.tail) this.tail.view.el.remove();
    this.tail = null;
  }

  reset() {
    this.el.replaceChildren();
    this.text = '';
    this.stable = 0;
    this.tail = null;
  }
}
