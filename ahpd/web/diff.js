// diff.js: line diffs for the Changes view, no DOM. A unified patch (git's, as a changeset file's
// `ahpd.patch` carries it) is parsed into rows; two whole texts are compared line by line by
// jsdiff (vendored, pinned: vendor/jsdiff/, its `diffArrays` over the lines), and the rows are
// grouped into hunks with three lines of context, the long unchanged runs between them kept as gaps
// a person can open. Changed line pairs get word-level marks (jsdiff's `diffWordsWithSpace`). The
// same file runs as a module worker (`rowsOf` off the main thread, so a 5 000-line comparison never
// holds the page).

import { diffArrays } from './vendor/jsdiff/diff/array.js';
import { diffWordsWithSpace } from './vendor/jsdiff/diff/word.js';

/** A row: kind ' ' (same), '+', '-', 'gap' (unchanged lines not shown) or 'note'. */
export const CONTEXT = 3;
/** Beyond this many differing lines the comparison gives up on finding common lines inside. */
const MAX_EDITS = 4000;
/** Lines longer than this get no word marks (comparing them word by word costs more than it shows). */
const MAX_MARKED_LINE = 2000;

/** Parses a unified diff into rows with old and new line numbers (1-based; 0 when none). */
export function parsePatch(patch) {
  const rows = [];
  let oldNo = 0;
  let newNo = 0;
  let seenHunk = false;
  const lines = patch.split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  for (const line of lines) {
    const hunk = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@/.exec(line);
    if (hunk) {
      const nextOld = Number(hunk[1]);
      const nextNew = Number(hunk[3]);
      const hidden = seenHunk ? nextNew - newNo : nextNew - 1;
      if (hidden > 0) rows.push({ kind: 'gap', oldNo: seenHunk ? oldNo : 1, newNo: seenHunk ? newNo : 1, count: hidden });
      // A hunk of zero lines on a side starts one before its first line.
      oldNo = hunk[2] === '0' ? nextOld + 1 : nextOld;
      newNo = hunk[4] === '0' ? nextNew + 1 : nextNew;
      seenHunk = true;
      continue;
    }
    if (!seenHunk) continue;
    const sign = line[0];
    const text = line.slice(1);
    if (sign === '+') rows.push({ kind: '+', oldNo: 0, newNo: newNo++, text });
    else if (sign === '-') rows.push({ kind: '-', oldNo: oldNo++, newNo: 0, text });
    else if (sign === ' ') rows.push({ kind: ' ', oldNo: oldNo++, newNo: newNo++, text });
    else if (sign === '\\') continue;
    else if (line.startsWith('[ahpd:')) rows.push({ kind: 'note', text: line });
  }
  markWords(rows);
  return rows;
}

/** True when the host cut this patch (the rest must come from the file's sides). */
export const isCut = (patch) => /\n\[ahpd: this diff is cut here/.test(patch ?? '');

/** The lines of a text (no trailing empty line for a final newline). */
export function linesOf(text) {
  if (!text) return [];
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/**
 * The edit script between two line arrays: a list of [kind, oldIndex, newIndex] with kind
 * ' ', '-' or '+', in order, as short as the longest common subsequence allows.
 */
export function diffLines(a, b) {
  // What both share at either end is kept before jsdiff looks at the middle, so a middle too
  // different to compare still shows its shared ends as unchanged.
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) { endA--; endB--; }
  const ops = [];
  for (let i = 0; i < start; i++) ops.push([' ', i, i]);
  const changes = endA > start && endB > start
    ? diffArrays(a.slice(start, endA), b.slice(start, endB), { maxEditLength: MAX_EDITS })
    : undefined;
  let i = start;
  let j = start;
  if (changes) {
    for (const change of changes) {
      for (let c = 0; c < change.count; c++) {
        if (change.removed) ops.push(['-', i++, j]);
        else if (change.added) ops.push(['+', i, j++]);
        else ops.push([' ', i++, j++]);
      }
    }
  } else {
    // One side empty, or too different to be worth finding what the middle shares: all of it
    // goes, all of it comes (jsdiff gives up past MAX_EDITS).
    while (i < endA) ops.push(['-', i++, j]);
    while (j < endB) ops.push(['+', i, j++]);
  }
  for (let k = 0; k < a.length - endA; k++) ops.push([' ', endA + k, endB + k]);
  return ops;
}

/** Rows for two whole texts: the changes with CONTEXT lines around, the rest as gaps. */
export function rowsOf(before, after) {
  const a = linesOf(before);
  const b = linesOf(after);
  const ops = diffLines(a, b);
  const keep = new Uint8Array(ops.length);
  for (let t = 0; t < ops.length; t++) {
    if (ops[t][0] === ' ') continue;
    for (let u = Math.max(0, t - CONTEXT); u <= Math.min(ops.length - 1, t + CONTEXT); u++) keep[u] = 1;
  }
  const rows = [];
  for (let t = 0; t < ops.length;) {
    const [kind, i, j] = ops[t];
    if (!keep[t]) {
      let u = t;
      while (u < ops.length && !keep[u]) u++;
      // A run of a line or two is shown: folding it would hide as much as it saves.
      if (u - t > 2) {
        rows.push({ kind: 'gap', oldNo: i + 1, newNo: j + 1, count: u - t });
        t = u;
        continue;
      }
    }
    if (kind === ' ') rows.push({ kind, oldNo: i + 1, newNo: j + 1, text: b[j] });
    else if (kind === '-') rows.push({ kind, oldNo: i + 1, newNo: 0, text: a[i] });
    else rows.push({ kind, oldNo: 0, newNo: j + 1, text: b[j] });
    t++;
  }
  markWords(rows);
  return rows;
}

/**
 * Word-level marks: a run of removed lines followed by as many added ones is read as lines
 * changed in place, and each pair marks the words that differ (`marks: [[from, to], ...]` in the
 * row's text, ranges apart only by spaces joined into one).
 */
export function markWords(rows) {
  for (let t = 0; t < rows.length;) {
    if (rows[t].kind !== '-') { t++; continue; }
    let u = t;
    while (u < rows.length && rows[u].kind === '-') u++;
    let w = u;
    while (w < rows.length && rows[w].kind === '+') w++;
    if (w - u === u - t && u - t <= 50) {
      for (let p = 0; p < u - t; p++) pair(rows[t + p], rows[u + p]);
    }
    t = w > u ? w : u;
  }
}

function pair(del, add) {
  const a = del.text;
  const b = add.text;
  if (a.length > MAX_MARKED_LINE || b.length > MAX_MARKED_LINE) return;
  const gone = [];
  const came = [];
  let i = 0;
  let j = 0;
  let shared = false;
  for (const part of diffWordsWithSpace(a, b)) {
    const n = part.value.length;
    if (part.removed) { widen(gone, a, i, i + n); i += n; }
    else if (part.added) { widen(came, b, j, j + n); j += n; }
    else { shared ||= /\S/.test(part.value); i += n; j += n; }
  }
  // A pair with nothing but spaces in common is two different lines, not one changed.
  if (!shared) return;
  if (gone.length) del.marks = gone;
  if (came.length) add.marks = came;
}

/** Adds [from, to) to a line's marks, joined to the last one when only spaces lie between. */
function widen(marks, text, from, to) {
  const last = marks[marks.length - 1];
  if (last && !/\S/.test(text.slice(last[1], from))) last[1] = to;
  else marks.push([from, to]);
}

/** The rows of a file's unchanged run `gap`, from the text after (to open a gap). */
export function gapRows(gap, afterLines) {
  const rows = [];
  for (let c = 0; c < gap.count; c++) {
    const text = afterLines[gap.newNo - 1 + c];
    if (text === undefined) break;
    rows.push({ kind: ' ', oldNo: gap.oldNo + c, newNo: gap.newNo + c, text });
  }
  return rows;
}

// As a worker: {id, before, after} in, {id, rows} out.
if (typeof WorkerGlobalScope !== 'undefined' && globalThis instanceof WorkerGlobalScope) {
  globalThis.onmessage = (e) => {
    const { id, before, after } = e.data;
    try { globalThis.postMessage({ id, rows: rowsOf(before, after) }); } catch (err) { globalThis.postMessage({ id, error: String(err) }); }
  };
}

let worker = null;
let nextJob = 1;
const jobs = new Map();

/** `rowsOf` in a worker: the page stays free while two long texts are compared. */
export function rowsOffThread(before, after) {
  if (typeof Worker === 'undefined') return Promise.resolve(rowsOf(before, after));
  if (!worker) {
    worker = new Worker(new URL('./diff.js', import.meta.url), { type: 'module' });
    worker.onmessage = (e) => {
      const job = jobs.get(e.data.id);
      jobs.delete(e.data.id);
      if (!job) return;
      if (e.data.error) job.reject(new Error(e.data.error)); else job.resolve(e.data.rows);
    };
  }
  const id = nextJob++;
  return new Promise((resolve, reject) => {
    jobs.set(id, { resolve, reject });
    worker.postMessage({ id, before, after });
  });
}
