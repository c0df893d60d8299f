/**
 * The SQLite ready index's own structures against the libraries that could replace them,
 * on the operations the claim path does (src/store/sqlite/ready-index/):
 *
 * - Deque (each group's line in fair-queue.ts: push, peek, shift) against `denque`:
 *   push N then peek+shift them all (100 k and 1 M); a steady backlog of 100 k, each step
 *   a push and a peek+shift; and 100 k lines of one entry each (a backlog where every job
 *   is a group of its own, as in group-backlog.mjs: make the line, push, peek+shift).
 * - The heap (ready-index.ts's runAt heap of `{ runAt, id }`, and fair-queue.ts's heap of
 *   the groups' first entries; `tinyqueue`, which replaced a hand-written MinHeap that
 *   this benchmark found no faster) against `heap-js` and `fastpriorityqueue`:
 *   push N random runAt entries then peek+pop them all (100 k and 1 M); and a steady heap
 *   of 100 k and of 1 M, each step a push of a later runAt and a peek+pop.
 *
 * Figures: ns per operation (a push, or a peek+shift/pop) and the heap bytes kept per
 * entry (`process.memoryUsage().heapUsed` after global.gc(), filled minus empty, divided
 * by the entries pushed), for the filled structure and after draining it to 1 % (what a
 * drained backlog keeps). Each entry is copied as it is pushed, so the structure is all
 * that keeps it: the figure holds the entry's own object (the same for every
 * implementation), and an implementation that keeps taken entries reachable shows it. Each implementation runs in a child process
 * of its own (`node --expose-gc`), so none shares JIT feedback or garbage with another;
 * the rounds alternate the order. Every figure is the median of the rounds with min–max.
 *
 * The libraries are not Kiln's dependencies: they are loaded from the node_modules folder
 * named by BENCH_DS_LIBS (e.g. `mkdir -p /tmp/dslibs && cd /tmp/dslibs && npm init -y &&
 * npm install denque tinyqueue heap-js fastpriorityqueue`, then
 * BENCH_DS_LIBS=/tmp/dslibs/node_modules). Without it, or where one is missing, those
 * baselines are skipped and said so, and Kiln's are measured alone.
 *
 *   node bench/ready-index-structures.mjs [--size tiny|full] [--runs N]
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ROOT_DIR } from './lib/processes.mjs';
import { benchOptions, formatSummary, printTable, runBenchmark, summarize, writeResult } from './lib/report.mjs';

const NAME = 'ready-index-structures';
const CHILD_ENV = 'BENCH_READY_INDEX_STRUCTURES_CHILD';
const SIZES = {
  full: { small: 100_000, large: 1_000_000, steps: 1_000_000, lines: 100_000, warm: 20_000 },
  tiny: { small: 2_000, large: 5_000, steps: 5_000, lines: 2_000, warm: 500 },
};

const dist = (file) => pathToFileURL(join(ROOT_DIR, 'dist', 'src', 'store', 'sqlite', 'ready-index', file)).href;

/**
 * Each implementation as the calls the claim path makes. `make` answers a new, empty
 * structure; `lib` names the npm package (null: Kiln's own).
 */
const DEQUES = {
  kiln: {
    lib: null,
    load: async () => (await import(dist('deque.js'))).Deque,
    // fair-queue.ts makes each group's line with new Deque(4).
    make: (Deque) => () => new Deque(4),
    push: (q, x) => q.push(x),
    peek: (q) => q.peek(),
    shift: (q) => q.shift(),
  },
  denque: {
    lib: 'denque',
    load: async () => await loadLib('denque', (m) => m.default ?? m),
    make: (Denque) => () => new Denque(),
    push: (q, x) => q.push(x),
    peek: (q) => q.peekFront(),
    shift: (q) => q.shift(),
  },
};

// ready-index.ts's runAt order: the earlier runAt, then the smaller id (as a comparator, and as a less-than).
const less = (a, b) => a.runAt < b.runAt || (a.runAt === b.runAt && a.id < b.id);
const compare = (a, b) => a.runAt - b.runAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

const HEAPS = {
  // Kiln's heap: tinyqueue, a dependency of Kiln since this benchmark matched it with the
  // hand-written heap it replaced (see bench/README.md).
  tinyqueue: {
    lib: null,
    load: async () =>
      (await import(pathToFileURL(createRequire(join(ROOT_DIR, 'noop.js')).resolve('tinyqueue')).href)).default,
    make: (TinyQueue) => () => new TinyQueue([], compare),
    push: (h, x) => h.push(x),
    peek: (h) => h.peek(),
    pop: (h) => h.pop(),
  },
  'heap-js': {
    lib: 'heap-js',
    load: async () => await loadLib('heap-js', (m) => m.Heap ?? m.default?.Heap ?? m.default),
    make: (Heap) => () => new Heap(compare),
    // add(x) is push(...xs) without the rest array.
    push: (h, x) => h.add(x),
    peek: (h) => h.peek(),
    pop: (h) => h.pop(),
  },
  fastpriorityqueue: {
    lib: 'fastpriorityqueue',
    load: async () => await loadLib('fastpriorityqueue', (m) => m.default ?? m),
    make: (FastPriorityQueue) => () => new FastPriorityQueue(less),
    push: (h, x) => h.add(x),
    peek: (h) => h.peek(),
    pop: (h) => h.poll(),
  },
};

/** A library from BENCH_DS_LIBS, or null (with the reason) when it cannot be loaded. */
function libDir() {
  const dir = process.env.BENCH_DS_LIBS;
  return dir === undefined || dir === '' ? null : dir;
}

function libVersion(name) {
  const dir = libDir();
  if (dir === null) return null;
  try {
    return JSON.parse(readFileSync(join(dir, name, 'package.json'), 'utf8')).version;
  } catch {
    return null;
  }
}

async function loadLib(name, pick) {
  const dir = libDir();
  if (dir === null) throw new Error('BENCH_DS_LIBS is not set');
  const require = createRequire(join(dir, 'noop.js'));
  return pick(await import(pathToFileURL(require.resolve(name)).href));
}

// ---------------------------------------------------------------- child: one implementation

/**
 * Fresh code per call: `new Function` gives each scenario its own compiled function and
 * feedback, and the implementation's calls are written into it, so no call site sees two
 * classes and no adapter sits between the loop and the structure.
 */
function compile(body, impl, names) {
  // $op(a, b): each argument a plain expression without parentheses or commas.
  const src = body.replace(/\$(\w+)\(([^()]*)\)/g, (_, op, args) => {
    const f = impl[op];
    if (f === undefined) throw new Error(`no ${op}`);
    // The adapter's text: (q, x) => q.push(x) → the call on the given arguments.
    const m = /^\(([^)]*)\)\s*=>\s*(.*)$/s.exec(f.toString());
    const params = m[1].split(',').map((s) => s.trim());
    const values = args.split(',').map((s) => s.trim());
    let call = m[2];
    params.forEach((p, i) => {
      call = call.replace(new RegExp(`\\b${p}\\b`, 'g'), values[i]);
    });
    return `(${call})`;
  });
  return new Function(...names, src);
}

const DEQUE_SCENARIOS = {
  // push N, then take them all as fair-queue.ts does: peek the head, then shift it.
  fillDrain: `
    const q = make();
    const n = entries.length;
    const t0 = now();
    for (let i = 0; i < n; i++) $push(q, entries[i]);
    for (let i = 0; i < n; i++) { if ($peek(q) !== entries[i]) throw new Error('order'); $shift(q); }
    return (now() - t0) * 1e6 / (2 * n);`,
  // a backlog of entries.length, then `steps` steps of a push and a peek+shift.
  steady: `
    const q = make();
    const n = entries.length;
    for (let i = 0; i < n; i++) $push(q, entries[i]);
    const t0 = now();
    for (let s = 0; s < steps; s++) { $push(q, entries[s % n]); if ($peek(q) === undefined) throw new Error('empty'); $shift(q); }
    return (now() - t0) * 1e6 / (2 * steps);`,
  // one line per entry (every job its own group): make it, push, then peek+shift each.
  lines: `
    const n = entries.length;
    const lines = new Array(n);
    const t0 = now();
    for (let i = 0; i < n; i++) { const q = make(); $push(q, entries[i]); lines[i] = q; }
    for (let i = 0; i < n; i++) { const q = lines[i]; if ($peek(q) !== entries[i]) throw new Error('order'); $shift(q); }
    return (now() - t0) * 1e6 / (2 * n);`,
  // heap bytes kept per entry: filled with all, then drained to 1 %.
  memory: `
    const n = entries.length;
    gc(); gc();
    const before = heapUsed();
    const q = make();
    for (let i = 0; i < n; i++) $push(q, { ...entries[i] });
    gc(); gc();
    const filled = heapUsed();
    for (let i = 0; i < n - Math.ceil(n / 100); i++) $shift(q);
    gc(); gc();
    const drained = heapUsed();
    keep(q);
    return { filled: (filled - before) / n, drained: (drained - before) / n };`,
  linesMemory: `
    const n = entries.length;
    gc(); gc();
    const before = heapUsed();
    const lines = new Array(n);
    for (let i = 0; i < n; i++) { const q = make(); $push(q, { ...entries[i] }); lines[i] = q; }
    gc(); gc();
    const filled = heapUsed();
    keep(lines);
    return { filled: (filled - before) / n, drained: null };`,
};

const HEAP_SCENARIOS = {
  // push N random runAt entries, then peek+pop them all (promoteDue's loop).
  fillDrain: `
    const h = make();
    const n = entries.length;
    const t0 = now();
    for (let i = 0; i < n; i++) $push(h, entries[i]);
    let last = -Infinity;
    for (let i = 0; i < n; i++) { const top = $peek(h); if (top.runAt < last) throw new Error('order'); last = top.runAt; $pop(h); }
    return (now() - t0) * 1e6 / (2 * n);`,
  // a heap of entries.length, then steps of a push of a later runAt and a peek+pop.
  steady: `
    const h = make();
    const n = entries.length;
    for (let i = 0; i < n; i++) $push(h, entries[i]);
    const t0 = now();
    for (let s = 0; s < steps; s++) {
      const top = $peek(h);
      $pop(h);
      $push(h, later[s]);
      if (top === undefined) throw new Error('empty');
    }
    return (now() - t0) * 1e6 / (2 * steps);`,
  memory: `
    const n = entries.length;
    gc(); gc();
    const before = heapUsed();
    const h = make();
    for (let i = 0; i < n; i++) { const e = { runAt: entries[i].runAt, id: entries[i].id }; $push(h, e); }
    gc(); gc();
    const filled = heapUsed();
    for (let i = 0; i < n - Math.ceil(n / 100); i++) $pop(h);
    gc(); gc();
    const drained = heapUsed();
    keep(h);
    return { filled: (filled - before) / n, drained: (drained - before) / n };`,
};

/** A small seeded generator, so every implementation sees the same runAt values. */
function random(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const kept = [];
const heapUsed = () => process.memoryUsage().heapUsed;
const now = () => performance.now();

function queueEntries(n) {
  // The shape of fair-queue.ts's IndexEntry.
  return Array.from({ length: n }, (_, i) => ({
    id: `j${i}`,
    type: 't',
    priority: 5,
    group: null,
    readyAt: 0,
    round: 0,
    seq: i,
  }));
}

function runAtEntries(n, rand, base = 1_700_000_000_000) {
  return Array.from({ length: n }, (_, i) => ({ runAt: base + Math.floor(rand() * 3_600_000), id: `j${i}` }));
}

async function child(kind, name, size) {
  if (typeof globalThis.gc !== 'function') throw new Error('the child needs --expose-gc');
  const sizes = SIZES[size];
  const impl = (kind === 'deque' ? DEQUES : HEAPS)[name];
  const make = impl.make(await impl.load());
  const scenarios = kind === 'deque' ? DEQUE_SCENARIOS : HEAP_SCENARIOS;
  const names = ['make', 'entries', 'later', 'steps', 'now', 'gc', 'heapUsed', 'keep'];
  const fns = Object.fromEntries(Object.entries(scenarios).map(([k, body]) => [k, compile(body, impl, names)]));
  const call = (fn, entries, later = null, steps = 0) =>
    fn(make, entries, later, steps, now, globalThis.gc, heapUsed, (x) => kept.push(x));
  const out = {};
  const rand = random(42);

  if (kind === 'deque') {
    const warm = queueEntries(sizes.warm);
    for (let i = 0; i < 5; i++) {
      call(fns.fillDrain, warm);
      call(fns.steady, warm, null, sizes.warm);
      call(fns.lines, warm);
    }
    const small = queueEntries(sizes.small);
    const large = queueEntries(sizes.large);
    out[`fill+drain ${sizes.small}`] = call(fns.fillDrain, small);
    out[`fill+drain ${sizes.large}`] = call(fns.fillDrain, large);
    out[`steady ${sizes.small}`] = call(fns.steady, small, null, sizes.steps);
    out[`lines ${sizes.lines}`] = call(fns.lines, queueEntries(sizes.lines));
    const memory = call(fns.memory, large);
    kept.length = 0;
    const lines = call(fns.linesMemory, queueEntries(sizes.lines));
    kept.length = 0;
    return {
      ns: out,
      bytes: {
        [`filled ${sizes.large}`]: memory.filled,
        [`drained to 1 %`]: memory.drained,
        [`lines ${sizes.lines}`]: lines.filled,
      },
    };
  }

  const laterOf = (entries, steps) => {
    // Each step pushes an entry later than the backlog's, as timers added at now + delay.
    const r = random(7);
    return Array.from({ length: steps }, (_, i) => ({
      runAt: 1_700_000_000_000 + 3_600_000 + Math.floor(r() * 3_600_000),
      id: `k${i}`,
    }));
  };
  const warm = runAtEntries(sizes.warm, rand);
  const warmLater = laterOf(warm, sizes.warm);
  for (let i = 0; i < 5; i++) {
    call(fns.fillDrain, warm);
    call(fns.steady, warm, warmLater, sizes.warm);
  }
  const small = runAtEntries(sizes.small, rand);
  const large = runAtEntries(sizes.large, rand);
  const later = laterOf(null, sizes.steps);
  out[`fill+drain ${sizes.small}`] = call(fns.fillDrain, small);
  out[`fill+drain ${sizes.large}`] = call(fns.fillDrain, large);
  out[`steady ${sizes.small}`] = call(fns.steady, small, later, sizes.steps);
  out[`steady ${sizes.large}`] = call(fns.steady, large, later, sizes.steps);
  const memory = call(fns.memory, large);
  kept.length = 0;
  return { ns: out, bytes: { [`filled ${sizes.large}`]: memory.filled, [`drained to 1 %`]: memory.drained } };
}

// ---------------------------------------------------------------- parent

function runChild(kind, name, size) {
  const result = spawnSync(
    process.execPath,
    ['--expose-gc', '--max-old-space-size=2048', fileURLToPath(import.meta.url)],
    {
      env: { ...process.env, [CHILD_ENV]: JSON.stringify({ kind, name, size }) },
      encoding: 'utf8',
      maxBuffer: 1 << 20,
    },
  );
  if (result.status !== 0) {
    throw new Error(`${kind} ${name} exited ${result.status ?? result.signal}: ${result.stderr}`);
  }
  return JSON.parse(result.stdout.trim().split('\n').at(-1));
}

/** Which implementations can run here; the libraries' absence is reported, not an error. */
async function available(table) {
  const ready = [];
  const skipped = [];
  for (const [name, impl] of Object.entries(table)) {
    if (impl.lib === null) {
      ready.push(name);
      continue;
    }
    try {
      await impl.load();
      ready.push(name);
    } catch (error) {
      skipped.push({ name, reason: libDir() === null ? 'BENCH_DS_LIBS is not set' : String(error.message ?? error) });
    }
  }
  return { ready, skipped };
}

async function main() {
  const options = benchOptions({ full: 5, tiny: 1 });
  const kinds = { deque: await available(DEQUES), heap: await available(HEAPS) };
  for (const [kind, { skipped }] of Object.entries(kinds)) {
    for (const { name, reason } of skipped) console.log(`${kind} baseline ${name} skipped: ${reason}`);
  }
  if (libDir() === null) {
    console.log('the library baselines were skipped (set BENCH_DS_LIBS to a node_modules folder that has them)');
  }

  // rounds[kind][name] = [{ ns, bytes }, ...]
  const rounds = { deque: {}, heap: {} };
  for (let run = 0; run < options.runs; run++) {
    for (const kind of ['deque', 'heap']) {
      const names = kinds[kind].ready;
      // Alternate the order: each round starts one later.
      const order = names.map((_, i) => names[(i + run) % names.length]);
      for (const name of order) {
        const started = Date.now();
        const result = runChild(kind, name, options.size);
        (rounds[kind][name] ??= []).push(result);
        console.log(
          `round ${run + 1}/${options.runs}: ${kind} ${name} (${((Date.now() - started) / 1000).toFixed(1)} s)`,
        );
      }
    }
  }

  const results = {};
  for (const kind of ['deque', 'heap']) {
    const names = kinds[kind].ready;
    const first = rounds[kind][names[0]][0];
    const figures = {};
    for (const name of names) {
      const runs = rounds[kind][name];
      figures[name] = {
        lib: (kind === 'deque' ? DEQUES : HEAPS)[name].lib,
        version: (kind === 'deque' ? DEQUES : HEAPS)[name].lib === null ? null : libVersion(name),
        ns: Object.fromEntries(Object.keys(first.ns).map((k) => [k, summarize(runs.map((r) => r.ns[k]))])),
        bytes: Object.fromEntries(
          Object.keys(first.bytes).map((k) => [k, summarize(runs.map((r) => r.bytes[k] ?? Number.NaN))]),
        ),
      };
    }
    results[kind] = { figures, skipped: kinds[kind].skipped };
    const label = kind === 'deque' ? 'Deque (fair-queue.ts lines)' : 'heap (ready-index.ts runAt heap)';
    const nsKeys = Object.keys(first.ns);
    printTable(
      `${label}: ns per operation (push, or peek+take), median (min–max) of ${options.runs} round(s)`,
      ['implementation', ...nsKeys],
      names.map((name) => [name, ...nsKeys.map((k) => formatSummary(figures[name].ns[k], 1))]),
    );
    const byteKeys = Object.keys(first.bytes);
    printTable(
      `${label}: heap bytes kept per entry, median (min–max)`,
      ['implementation', ...byteKeys],
      names.map((name) => [name, ...byteKeys.map((k) => formatSummary(figures[name].bytes[k], 1))]),
    );
  }

  const path = writeResult(NAME, {
    size: options.size,
    runs: options.runs,
    sizes: SIZES[options.size],
    libraries: libDir() === null ? null : 'BENCH_DS_LIBS',
    ...results,
  });
  console.log(`\nresult: ${path}`);
}

const childSpec = process.env[CHILD_ENV];
if (childSpec !== undefined) {
  const { kind, name, size } = JSON.parse(childSpec);
  const result = await child(kind, name, size);
  process.stdout.write(`${JSON.stringify(result)}\n`);
} else {
  await runBenchmark(NAME, main);
}
