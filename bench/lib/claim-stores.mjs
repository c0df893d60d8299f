/**
 * The two stores the claim-cost benchmarks (limited-backlog, group-backlog) open in this
 * process from dist/: SQLite in memory, and PostgreSQL in a schema of its own per open,
 * dropped at close. `measureStores` runs `measure(open, close)` `runs` times on each and
 * summarizes every figure it answers, plus the ratio the benchmark names.
 */
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { dropSchema, freshSchemaName, openPostgresStore } from './postgres.mjs';
import { ROOT_DIR } from './processes.mjs';
import { summarize } from './report.mjs';

export async function claimStores(schemaPrefix) {
  const { SqliteStore } = await import(
    pathToFileURL(join(ROOT_DIR, 'dist', 'src', 'store', 'sqlite', 'store.js')).href
  );
  const sqlite = {
    name: 'sqlite (in memory)',
    open: () => SqliteStore.open(':memory:', { capacity: 10_000_000, synchronous: 'normal' }),
    close: (store) => store.close(),
  };
  const schemas = [];
  const postgres = {
    name: 'postgres',
    open() {
      const schema = freshSchemaName(schemaPrefix);
      schemas.push(schema);
      return openPostgresStore({ schema, poolSize: 4 });
    },
    async close(store) {
      await store.close();
      for (const schema of schemas.splice(0)) await dropSchema(schema);
    },
  };
  return [sqlite, postgres];
}

/** `ratio(figures of one run)` becomes the figure `ratioP50`. */
export async function measureStores(stores, runs, measure, ratio) {
  const figures = {};
  const all = [];
  for (const store of stores) {
    const perRun = [];
    for (let run = 0; run < runs; run++) perRun.push(await measure(store.open, store.close));
    all.push({ store: store.name, runs: perRun });
    const keys = Object.keys(perRun[0] ?? {});
    figures[store.name] = Object.fromEntries(keys.map((key) => [key, summarize(perRun.map((r) => r[key]))]));
    figures[store.name].ratioP50 = summarize(perRun.map(ratio));
  }
  return { figures, runs: all };
}

const { newJobId } = await import(pathToFileURL(join(ROOT_DIR, 'dist', 'src', 'jobs', 'ids.js')).href);

/** A queued job of the backlog benchmarks: a no-op of `type` at `priority`, of `group` (null: none). */
export function backlogJob(type, priority, group = null) {
  return {
    id: newJobId(),
    type,
    priority,
    payload: {},
    maxAttempts: 3,
    timeoutMs: 60_000,
    backoff: { initialMs: 1000, factor: 2, maxMs: 60_000, jitter: 'none' },
    idempotencyKey: null,
    dependsOn: [],
    metadata: {},
    group,
    runAt: null,
    createdAt: Date.now(),
  };
}

/** Inserts `n` jobs, `make(i)` each, 1,000 per call. */
export async function fillBacklog(store, n, make) {
  for (let done = 0; done < n; done += 1000) {
    const jobs = Array.from({ length: Math.min(1000, n - done) }, (_, i) => make(done + i));
    const result = await store.insert(jobs);
    if (!result.ok) throw new Error(`insert refused: ${JSON.stringify(result)}`);
  }
}

/**
 * Claims of 2 (`extra` added to each request) until `wanted` jobs are taken, each timed
 * alone; `check(jobs)` throws on a job the claim must not have taken. Answers the claims'
 * µs, sorted, and the jobs taken.
 */
export async function timedClaims(store, wanted, extra = {}, check = () => {}) {
  const times = [];
  let taken = 0;
  while (taken < wanted) {
    const started = performance.now();
    const batches = await store.claim({ owner: 'bench', leaseMs: 600_000, batches: 2, micro: null, ...extra });
    times.push((performance.now() - started) * 1000);
    const jobs = batches.flat();
    if (jobs.length === 0) throw new Error(`nothing to claim after ${taken} of ${wanted}`);
    check(jobs);
    taken += jobs.length;
  }
  return { times: times.sort((a, b) => a - b), taken };
}
