// diff_check.mjs: checks the page's diff module (ahpd/web/diff.js, its comparisons made by the
// vendored jsdiff) under Node, no browser: the edit script between two texts rebuilds both and is
// as short as the longest common subsequence allows (against a dynamic-programming LCS on
// thousands of small random cases); a middle too different to compare keeps its shared ends; a
// patch parses into the right line numbers and folded runs; changed words are marked, each changed
// word apart, and a pair sharing no word is left unmarked. Prints one JSON line; exits 1 on the
// first failure.

import { diffLines, markWords, parsePatch, rowsOf } from '../../ahpd/web/diff.js';

function fail(why) {
  console.log(JSON.stringify({ ok: false, why }));
  process.exit(1);
}

function lcs(a, b) {
  const t = Array.from({ length: a.length + 1 }, () => new Array(b.length + 1).fill(0));
  for (let i = a.length - 1; i >= 0; i--) for (let j = b.length - 1; j >= 0; j--) t[i][j] = a[i] === b[j] ? t[i + 1][j + 1] + 1 : Math.max(t[i + 1][j], t[i][j + 1]);
  return t[0][0];
}

// A fixed seed, so a failure repeats.
let seed = 28;
const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const lines = (n) => Array.from({ length: n }, () => 'abcd'[Math.floor(random() * 4)]);

let cases = 0;
for (; cases < 4000; cases++) {
  const a = lines(Math.floor(random() * 14));
  const b = lines(Math.floor(random() * 14));
  const ops = diffLines(a, b);
  const left = [];
  const right = [];
  for (const [kind, i, j] of ops) {
    if (kind !== '+') left.push(a[i]);
    if (kind !== '-') right.push(b[j]);
    if (kind === ' ' && a[i] !== b[j]) fail(`a kept line differs: ${a} | ${b}`);
  }
  if (left.join('') !== a.join('') || right.join('') !== b.join('')) fail(`the script does not rebuild ${a} | ${b}: ${JSON.stringify(ops)}`);
  const same = ops.filter(([k]) => k === ' ').length;
  if (same !== lcs(a, b)) fail(`not minimal for ${a} | ${b}: kept ${same}, could keep ${lcs(a, b)}`);
}

const rows = parsePatch('@@ -2,3 +2,3 @@ f\n a\n-b c\n+b d\n e\n@@ -10 +10,2 @@\n x\n+y\n');
const kind = (r) => (r.kind === ' ' ? '=' : r.kind);
const shape = rows.map((r) => `${kind(r)}${r.oldNo}/${r.newNo}${r.count ? `x${r.count}` : ''}`).join(' ');
if (shape !== 'gap1/1x1 =2/2 -3/0 +0/3 =4/4 gap5/5x5 =10/10 +0/11') fail(`patch rows: ${shape}`);
if (JSON.stringify(rows[2].marks) !== '[[2,3]]' || JSON.stringify(rows[3].marks) !== '[[2,3]]') fail(`word marks: ${JSON.stringify(rows.slice(2, 4))}`);

// Words changed apart are marked apart; words changed side by side (spaces between) as one.
const pairOf = (before, after) => {
  const two = [{ kind: '-', text: before }, { kind: '+', text: after }];
  markWords(two);
  return JSON.stringify(two.map((r) => (r.marks ?? []).map(([from, to]) => r.text.slice(from, to))));
};
const apart = pairOf('let total = count(items) + 1;', 'let sum = count(things) + 1;');
if (apart !== '[["total","items"],["sum","things"]]') fail(`marks apart: ${apart}`);
const together = pairOf('line 2', 'line two, renamed');
if (together !== '[["2"],["two, renamed"]]') fail(`marks together: ${together}`);
const unrelated = pairOf('alpha beta', 'gamma delta');
if (unrelated !== '[[],[]]') fail(`a pair sharing no word is two lines: ${unrelated}`);

// Past the edit limit the middle is given up on, but the shared ends stay unchanged.
const ends = ['head'];
const tail = ['tail'];
const left = ends.concat(Array.from({ length: 2500 }, (_, i) => `a${i}`), tail);
const right = ends.concat(Array.from({ length: 2500 }, (_, i) => `b${i}`), tail);
const script = diffLines(left, right).map(([k]) => k).join('');
if (script !== ` ${'-'.repeat(2500)}${'+'.repeat(2500)} `) fail(`given up: ${script.length} ops, ${script.slice(0, 4)}…`);

const before = Array.from({ length: 40 }, (_, i) => `l${i}`).join('\n') + '\n';
const after = before.replace('l20\n', 'l20 changed\n');
const folded = rowsOf(before, after).map((r) => (r.kind === 'gap' ? `gap${r.count}` : kind(r))).join(' ');
if (folded !== 'gap17 = = = - + = = = gap16') fail(`folded: ${folded}`);

console.log(JSON.stringify({ ok: true, cases }));
