/**
 * The fixed workloads of bench/cpu-budget.mjs, and one measured run of a workload: a fresh
 * server (2 worker threads, this checkout's or another commit's), warmed, then every
 * thread's own accounting read from Linux before and after the workload (see
 * lib/thread-cpu.mjs) and divided by the jobs.
 */
import { join } from 'node:path';
import { pauseQueue, resumeQueue, scrapeMetrics, waitUntilIdle } from './kiln-client.mjs';
import { measureKilnRun, warmKiln } from './measure.mjs';
import { dropSchema, freshSchemaName, KILN_SCHEMA_PREFIX, PG_URL } from './postgres.mjs';
import { BENCH_DIR, KILN_MAIN, runNodeJson, startKiln } from './processes.mjs';
import { perJob, threadTimes } from './thread-cpu.mjs';

const COMMITS = 'kiln_store_commit_seconds_count';
export const THREADS = 2;
const WORKER_NICE = 10;

export const WAVE = 16;
/** How far a run's waves may be from the jobs per commit the workload fixes. */
export const COMMIT_TOLERANCE = 0.2;
/**
 * `waveJobsPerCommit`: the jobs per commit while the waves are submitted (dispatch paused),
 * fixed by the workload: a wave per commit on both stores (SQLite's store thread commits what
 * waits, PostgreSQL's store gathers single inserts into one statement).
 * `judged`: the figures compared with the budget (all three unless said): the 5 ms jobs'
 * main thread follows their jobs per commit (outcomes wait up to 10 ms to share a commit,
 * which depends on the load), so that workload is judged outside the handler only.
 */
export const WORKLOADS = [
  { name: 'sqlite.noop.batch', store: 'sqlite', job: { type: 'noop' }, total: 20_000, mode: 'batch' },
  {
    name: 'sqlite.noop.single',
    store: 'sqlite',
    job: { type: 'noop' },
    total: 2_000,
    mode: 'waves',
    waveJobsPerCommit: WAVE,
  },
  {
    name: 'sqlite.spin5.batch',
    store: 'sqlite',
    job: { type: 'cpu.spin', payload: { ms: 5 } },
    total: 1_200,
    mode: 'batch',
    handlerWorks: true,
    judged: ['outsideUs'],
  },
  { name: 'postgres.noop.batch', store: 'postgres', job: { type: 'noop' }, total: 10_000, mode: 'batch' },
  {
    name: 'postgres.noop.single',
    store: 'postgres',
    job: { type: 'noop' },
    total: 1_000,
    mode: 'waves',
    waveJobsPerCommit: WAVE,
  },
];

/**
 * Single POSTs in waves (see load/submit-jobs.mjs) with dispatch paused, then dispatch
 * resumed until every job has finished. Paused, each wave is one store message and one
 * commit; running, jobs would finish between the waves, and how many outcomes share a
 * commit with a wave would depend on how the machine's load times the two. The commits of
 * the waves are read from /metrics while dispatch is still paused; that scrape's own CPU
 * is left out of the measure (`excluded`).
 */
async function submitWavesThenRun(server, workload, completedBefore, commitsBefore) {
  await pauseQueue(server.url);
  const started = Date.now();
  const load = await runNodeJson(
    join(BENCH_DIR, 'load', 'submit-jobs.mjs'),
    { url: server.url, total: workload.total, job: workload.job, mode: 'waves', wave: WAVE, wait: false },
    { timeoutMs: 600_000 },
  );
  if (load.submitted !== workload.total) throw new Error(`submitted ${load.submitted} of ${workload.total} jobs`);
  const scrapeBefore = threadTimes(server.pid);
  const waveCommits = (await scrapeMetrics(server.url)).get(COMMITS) - commitsBefore;
  const scrapeAfter = threadTimes(server.pid);
  await resumeQueue(server.url);
  const done = await waitUntilIdle(server.url, { lastJobId: load.lastJobId, timeoutMs: 600_000 });
  if (done.completed !== completedBefore + workload.total || done.failed !== 0) {
    throw new Error(
      `expected ${completedBefore + workload.total} completed jobs, the queue says ${done.completed} completed, ${done.failed} failed`,
    );
  }
  return {
    jobsPerSecond: (workload.total / (done.done - started)) * 1000,
    waveJobsPerCommit: workload.total / waveCommits,
    excluded: [[scrapeBefore, scrapeAfter]],
  };
}

export async function measureOnce(workload, main = KILN_MAIN) {
  let schema = null;
  if (workload.store === 'postgres') schema = freshSchemaName(KILN_SCHEMA_PREFIX);
  const server = await startKiln({
    main,
    store: workload.store,
    threads: THREADS,
    env: { KILN_THREAD_NICE: String(WORKER_NICE) },
    ...(schema === null ? {} : { pg: { url: PG_URL, schema } }),
  });
  try {
    let warmed = await warmKiln(server, workload.job);
    if (workload.mode === 'waves') {
      // The single-job route too, so that its first compilation falls outside the measure.
      const singles = { url: server.url, total: 10 * WAVE, job: workload.job, mode: 'waves', wave: WAVE };
      await runNodeJson(join(BENCH_DIR, 'load', 'submit-jobs.mjs'), singles, { timeoutMs: 60_000 });
      warmed += singles.total;
    }
    const commitsBefore = (await scrapeMetrics(server.url)).get(COMMITS);
    const before = threadTimes(server.pid);
    const run =
      workload.mode === 'waves'
        ? await submitWavesThenRun(server, workload, warmed, commitsBefore)
        : await measureKilnRun(
            server,
            { total: workload.total, job: workload.job, mode: workload.mode, batchSize: 100, concurrency: 8 },
            { completedBefore: warmed },
          );
    const after = threadTimes(server.pid);
    const commits = (await scrapeMetrics(server.url)).get(COMMITS) - commitsBefore;
    const figures = perJob(server.pid, WORKER_NICE, before, after, workload.total, run.excluded);
    const outsideUs = figures.mainUs + figures.restUs + (workload.handlerWorks === true ? 0 : figures.workersUs);
    return {
      ...figures,
      outsideUs,
      jobsPerSecond: run.jobsPerSecond,
      jobsPerCommit: workload.total / commits,
      ...(run.waveJobsPerCommit === undefined ? {} : { waveJobsPerCommit: run.waveJobsPerCommit }),
    };
  } finally {
    await server.stop();
    if (schema !== null) await dropSchema(schema);
  }
}
