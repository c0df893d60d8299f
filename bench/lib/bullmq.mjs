/**
 * The BullMQ baseline as a benchmark runs it: a worker child and a producer child on the
 * local Redis, under a queue name of their own whose keys are deleted before and after.
 */
import { join } from 'node:path';
import IORedis from 'ioredis';
import { BENCH_DIR, jsonLines, runNodeJson, spawnNode } from './processes.mjs';

export const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

function connect() {
  return new IORedis(REDIS_URL, {
    connectTimeout: 1000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    lazyConnect: true,
    enableOfflineQueue: false,
  });
}

/** Null when Redis answers PING, else the reason. */
export async function redisUnavailable() {
  const redis = connect();
  redis.on('error', () => {});
  try {
    await redis.connect();
    await redis.ping();
    return null;
  } catch (error) {
    return error?.message ?? String(error);
  } finally {
    redis.disconnect();
  }
}

/** Deletes every key of the queue (`bull:<name>:*`); answers how many. */
export async function deleteQueueKeys(queueName) {
  const redis = connect();
  redis.on('error', () => {});
  let deleted = 0;
  try {
    await redis.connect();
    let cursor = '0';
    for (let round = 0; round < 100_000; round++) {
      const [nextCursor, keys] = await redis.scan(cursor, 'MATCH', `bull:${queueName}:*`, 'COUNT', 1000);
      if (keys.length > 0) deleted += await redis.del(...keys);
      cursor = nextCursor;
      if (cursor === '0') break;
    }
  } finally {
    redis.disconnect();
  }
  return deleted;
}

/**
 * One BullMQ run: Worker (concurrency 50, no-op processor) started and ready, then the
 * producer adds `total` jobs with addBulk; first add → last completion.
 */
export async function measureBullmqRun({ total, batchSize = 100, concurrency = 8, workerConcurrency = 50, cpus = {} }) {
  const queueName = `kiln-bench-${process.pid}-${Date.now()}`;
  await deleteQueueKeys(queueName);
  const worker = spawnNode(
    join(BENCH_DIR, 'baseline', 'bullmq-worker.mjs'),
    [JSON.stringify({ redisUrl: REDIS_URL, queueName, total, concurrency: workerConcurrency })],
    { cpus: cpus.server ?? null },
  );
  let stderr = '';
  worker.stderr.setEncoding('utf8').on('data', (chunk) => {
    stderr = (stderr + chunk).slice(-4000);
  });
  const nextLine = jsonLines(worker, 'the bullmq worker');
  try {
    await nextLine(20_000);
    const produced = await runNodeJson(
      join(BENCH_DIR, 'load', 'bullmq-producer.mjs'),
      { redisUrl: REDIS_URL, queueName, total, batchSize, concurrency },
      { cpus: cpus.load ?? null, timeoutMs: 600_000 },
    );
    const done = await nextLine(600_000);
    if (done.completed !== total) throw new Error(`bullmq: ${done.completed} of ${total} jobs completed`);
    const elapsedMs = done.doneAt - produced.startedAt;
    return {
      elapsedMs,
      submitMs: produced.submittedAt - produced.startedAt,
      jobsPerSecond: (total / elapsedMs) * 1000,
    };
  } catch (error) {
    throw new Error(`${error.message}${stderr === '' ? '' : `\n${stderr.trim()}`}`, { cause: error });
  } finally {
    if (worker.exitCode === null) worker.kill('SIGKILL');
    await deleteQueueKeys(queueName);
  }
}
