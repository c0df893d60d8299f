/**
 * PostgreSQL store, finishing jobs whose children wait for them, on a table analyzed young:
 * the store opened in this process from dist/ on a fresh schema, 8 jobs run through it and
 * the jobs table analyzed (a new schema's first ANALYZE: it sees no waiting job), then
 * 10,000 parents queued at priority 9, each with one child that waits for it, and the
 * parents claimed 100 at a time and finished, each call of 100 timed alone. Every child
 * must end queued. Figures: the finish call's p50 and p99 in ms, and the parents finished
 * per second (claims included). Before migration 015, each finish locked its children,
 * and released them, by reading every waiting job.
 *
 *   node bench/pg-dependents.mjs [--size tiny|full] [--runs N]
 */
import { performance } from 'node:perf_hooks';
import { backlogJob, fillBacklog } from './lib/claim-stores.mjs';
import { dropSchema, freshSchemaName, openPostgresStore, requirePostgres, withPg } from './lib/postgres.mjs';
import {
  benchOptions,
  formatSummary,
  percentile,
  printTable,
  runBenchmark,
  summarize,
  writeResult,
} from './lib/report.mjs';

const NAME = 'pg-dependents';
const options = benchOptions({ full: 3, tiny: 1 });
const PARENTS = options.size === 'tiny' ? 500 : 10_000;
const OWNER = 'bench';

const claim = async (store, n) =>
  (await store.claim({ owner: OWNER, leaseMs: 600_000, batches: n, micro: null })).flat();

const finish = (store, jobs) =>
  store.finish(
    jobs.map((job) => ({
      id: job.id,
      attempt: job.attempts,
      owner: OWNER,
      outcome: { kind: 'completed', resultText: '1' },
      expired: false,
    })),
  );

async function measure() {
  const schema = freshSchemaName('kiln_bench_deps');
  const store = await openPostgresStore({ schema, poolSize: 4 });
  try {
    await fillBacklog(store, 8, () => backlogJob('noop', 5));
    await finish(store, await claim(store, 8));
    await withPg((client) => client.query(`ANALYZE "${schema}".jobs`));
    const parents = [];
    await fillBacklog(store, PARENTS, () => {
      const parent = backlogJob('noop', 9);
      parents.push(parent);
      return parent;
    });
    await fillBacklog(store, PARENTS, (i) => ({ ...backlogJob('noop', 5), dependsOn: [parents[i].id] }));
    const times = [];
    const started = performance.now();
    for (let done = 0; done < PARENTS;) {
      const claimed = await claim(store, 100);
      if (claimed.length === 0 || claimed.some((job) => job.priority !== 9)) {
        throw new Error(`claimed ${claimed.length} jobs, not only parents, after ${done} of ${PARENTS}`);
      }
      const callStarted = performance.now();
      await finish(store, claimed);
      times.push(performance.now() - callStarted);
      done += claimed.length;
    }
    const elapsedMs = performance.now() - started;
    const released = await withPg((client) =>
      client.query(`SELECT count(*)::int AS n FROM "${schema}".jobs WHERE status = 'queued' AND priority = 5`),
    );
    if (released.rows[0].n !== PARENTS) throw new Error(`${released.rows[0].n} of ${PARENTS} children released`);
    times.sort((a, b) => a - b);
    return {
      finishP50Ms: percentile(times, 50),
      finishP99Ms: percentile(times, 99),
      parentsPerSecond: (PARENTS / elapsedMs) * 1000,
    };
  } finally {
    await store.close();
    await dropSchema(schema);
  }
}

await runBenchmark(NAME, async () => {
  await requirePostgres();
  const runs = [];
  for (let run = 0; run < options.runs; run++) runs.push(await measure());
  const figures = Object.fromEntries(Object.keys(runs[0]).map((key) => [key, summarize(runs.map((r) => r[key]))]));
  printTable(
    `finishing ${PARENTS.toLocaleString('en-US')} parents, 100 a call, each with a waiting child, on a table analyzed young (median (min–max) of ${options.runs} run(s))`,
    ['finish of 100, p50 ms', 'p99 ms', 'parents/s'],
    [
      [
        formatSummary(figures.finishP50Ms, 1),
        formatSummary(figures.finishP99Ms, 1),
        formatSummary(figures.parentsPerSecond),
      ],
    ],
  );
  const path = writeResult(NAME, { size: options.size, parameters: { parents: PARENTS }, figures, runs });
  console.log(`wrote ${path}`);
});
