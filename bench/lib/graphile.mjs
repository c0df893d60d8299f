/**
 * The graphile-worker baseline as a benchmark runs it: a worker child and a producer
 * child on the same PostgreSQL as Kiln, in a schema of their own that is dropped after.
 */
import { join } from 'node:path';
import { BENCH_DIR, jsonLines, runNodeJson, spawnNode } from './processes.mjs';
import { dropSchema, freshSchemaName, PG_URL } from './postgres.mjs';
import { pgCostMark, pgCostSince } from './pg-cost.mjs';

export const GRAPHILE_SCHEMA_PREFIX = 'gw_bench';

/**
 * One graphile-worker run: the worker pool (`workerConcurrency` jobs at once) started and
 * listening, then the producer adds `total` no-op jobs with addJobs in bulks of
 * `batchSize`, `concurrency` in flight; first add → last completion committed. With
 * `meter: true`, what the database spent on those jobs too (lib/pg-cost.mjs), as `database`.
 */
export async function measureGraphileRun({
  total,
  batchSize = 100,
  concurrency = 8,
  workerConcurrency = 24,
  meter = null,
}) {
  const schema = freshSchemaName(GRAPHILE_SCHEMA_PREFIX);
  const worker = spawnNode(join(BENCH_DIR, 'baseline', 'graphile-worker.mjs'), [
    JSON.stringify({ pgUrl: PG_URL, schema, total, concurrency: workerConcurrency }),
  ]);
  let stderr = '';
  worker.stderr.setEncoding('utf8').on('data', (chunk) => {
    stderr = (stderr + chunk).slice(-4000);
  });
  const nextLine = jsonLines(worker, 'the graphile-worker worker');
  try {
    await nextLine(30_000);
    const mark = meter === null ? null : await pgCostMark();
    const produced = await runNodeJson(
      join(BENCH_DIR, 'load', 'graphile-producer.mjs'),
      { pgUrl: PG_URL, schema, total, batchSize, concurrency },
      { timeoutMs: 600_000 },
    );
    const done = await nextLine(600_000);
    if (done.completed !== total || done.failed !== 0) {
      throw new Error(`graphile-worker: ${done.completed} of ${total} jobs completed, ${done.failed} failed`);
    }
    const elapsedMs = done.doneAt - produced.startedAt;
    return {
      ...(mark === null ? {} : { database: await pgCostSince(mark, total) }),
      elapsedMs,
      submitMs: produced.submittedAt - produced.startedAt,
      jobsPerSecond: (total / elapsedMs) * 1000,
    };
  } catch (error) {
    throw new Error(`${error.message}${stderr === '' ? '' : `\n${stderr.trim()}`}`, { cause: error });
  } finally {
    if (worker.exitCode === null) worker.kill('SIGKILL');
    await dropSchema(schema);
  }
}
