// diff.js: line diffs for the Changes view, no DOM. A unified patch (git's, as a changeset file's
// `ahpd.patch` carries it) is parsed into rows; two whole texts are compared line by line (Myers'
// O(ND) algorithm after trimming what both share at either end), and the rows are grouped into
// hunks with three lines of context, the long unchanged runs between them kept as gaps a person
// can open. Changed line pairs get word-level marks. The same file runs as a module worker
// (`rowsOf` off the main thread, so a 5 000-line comparison never holds the page).

/** A row: kind ' ' (same), '+', '-', 'gap' (unchanged lines not shown) or 'note'. */
export const CONTEXT = 3;
/** Beyond this many differing lines the comparison gives up on finding common lines inside. */
const MAX_D = 4000;

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
 * ' ', '-' or '+', in order.
 */
export function diffLines(a, b) {
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) { endA--; endB--; }
  const ops = [];
  for (let i = 0; i < start; i++) ops.push([' ', i, i]);
  middle(a, b, start, endA, start, endB, ops);
  for (let i = 0; i < a.length - endA; i++) ops.push([' ', endA + i, endB + i]);
  return ops;
}

/** Myers' greedy algorithm on a[a0..a1) against b[b0..b1), with its trace kept to walk back. */
function middle(a, b, a0, a1, b0, b1, ops) {
  const n = a1 - a0;
  const m = b1 - b0;
  if (!n || !m) {
    for (let i = a0; i < a1; i++) ops.push(['-', i, b0]);
    for (let j = b0; j < b1; j++) ops.push(['+', a1, j]);
    return;
  }
  // Lines as numbers: equal lines, equal numbers.
  const ids = new Map();
  const id = (s) => { let v = ids.get(s); if (v === undefined) { v = ids.size; ids.set(s, v); } return v; };
  const x = new Int32Array(n);
  const y = new Int32Array(m);
  for (let i = 0; i < n; i++) x[i] = id(a[a0 + i]);
  for (let j = 0; j < m; j++) y[j] = id(b[b0 + j]);
  const max = Math.min(n + m, MAX_D);
  const offset = max + 1;
  const v = new Int32Array(2 * max + 3);
  const trace = [];
  let found = -1;
  for (let d = 0; d <= max && found < 0; d++) {
    trace.push(v.slice(offset - d - 1, offset + d + 2));
    for (let k = -d; k <= d; k += 2) {
      let i = k === -d || (k !== d && v[offset + k - 1] < v[offset + k + 1]) ? v[offset + k + 1] : v[offset + k - 1] + 1;
      let j = i - k;
      while (i < n && j < m && x[i] === y[j]) { i++; j++; }
      v[offset + k] = i;
      if (i >= n && j >= m) { found = d; break; }
    }
  }
  if (found < 0) {
    // Too different to be worth finding what the middle shares: all of it goes, all of it comes.
    for (let i = a0; i < a1; i++) ops.push(['-', i, b0]);
    for (let j = b0; j < b1; j++) ops.push(['+', a1, j]);
    return;
  }
  // Walk back through the trace, collecting the script backwards.
  const back = [];
  let i = n;
  let j = m;
  for (let d = found; d > 0; d--) {
    const prev = trace[d];
    const at = (k) => prev[k + d + 1];
    const k = i - j;
    const down = k === -d || (k !== d && at(k - 1) < at(k + 1));
    const pk = down ? k + 1 : k - 1;
    const pi = at(pk);
    const pj = pi - pk;
    while (i > pi && j > pj) { i--; j--; back.push([' ', a0 + i, b0 + j]); }
    if (down) { j--; back.push(['+', a0 + i, b0 + j]); } else { i--; back.push(['-', a0 + i, b0 + j]); }
  }
  while (i > 0 && j > 0) { i--; j--; back.push([' ', a0 + i, b0 + j]); }
  for (let t = back.length - 1; t >= 0; t--) ops.push(back[t]);
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
 * changed in place, and each pair marks the part between what they share at either end
 * (`mark: [from, to]` in the row's text).
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
  if (a.length > 2000 || b.length > 2000) return;
  let s = 0;
  while (s < a.length && s < b.length && a[s] === b[s]) s++;
  // Back to the start of a word, so a mark covers whole words.
  while (s > 0 && /\w/.test(a[s - 1])) s--;
  let e = 0;
  while (e < a.length - s && e < b.length - s && a[a.length - 1 - e] === b[b.length - 1 - e]) e++;
  while (e > 0 && /\w/.test(a[a.length - e])) e--;
  // A pair with nothing in common is two different lines, not one changed.
  if (s === 0 && e === 0) return;
  del.mark = [s, a.length - e];
  add.mark = [s, b.length - e];
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
