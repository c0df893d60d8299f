/**
 * graphile-worker baseline, the consuming side (a child process of a benchmark): one
 * worker pool (`run`) with `concurrency` jobs at once and an in-process no-op task, on
 * its own schema, configured as graphile-worker's own performance test is: a local queue
 * of 500 jobs fetched per query (refetch delay 10 ms), completions batched
 * (completeJobBatchDelay 0), a pool of concurrency + 1 connections. Prints
 * {"ready":true} once migrated and listening; then, when `total` jobs have succeeded and
 * their rows are gone from the jobs table (graphile-worker deletes a job as it completes
 * it, in batches), one JSON line { doneAt, completed, failed } and exits.
 *
 * Input: one JSON argument { pgUrl, schema, total, concurrency, localQueueSize }.
 */
import { EventEmitter } from 'node:events';
import { Logger, run } from 'graphile-worker';
import pg from 'pg';

const { pgUrl, schema, total, concurrency = 24, localQueueSize = 500 } = JSON.parse(process.argv[2] ?? '{}');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Errors and warnings only: the benchmark's output is the JSON lines.
const logger = new Logger(() => (level, message) => {
  if (level === 'error' || level === 'warning') process.stderr.write(`graphile-worker ${level}: ${message}\n`);
});
const events = new EventEmitter();
let completed = 0;
let failed = 0;
let finish;
const finished = new Promise((resolve) => {
  finish = resolve;
});
const settle = () => {
  if (completed + failed === total) finish();
};
events.on('job:success', () => {
  completed += 1;
  settle();
});
events.on('job:error', () => {
  failed += 1;
  settle();
});

const runner = await run({
  connectionString: pgUrl,
  schema,
  concurrency,
  maxPoolSize: concurrency + 1,
  noHandleSignals: true,
  pollInterval: 1000,
  logger,
  events,
  taskList: { noop: async () => {} },
  preset: {
    worker: {
      localQueue: { size: localQueueSize, refetchDelay: { durationMs: 10 } },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
    },
  },
});
process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
await finished;
// A success is counted before its batched completion commits: done once the rows are gone.
const client = new pg.Client({ connectionString: pgUrl });
await client.connect();
for (;;) {
  const { rows } = await client.query(`SELECT count(*)::int AS n FROM "${schema}"._private_jobs`);
  if (rows[0].n === 0) break;
  await sleep(5);
}
const doneAt = Date.now();
await client.end();
process.stdout.write(`${JSON.stringify({ doneAt, completed, failed })}\n`);
await runner.stop();
process.exit(0);
