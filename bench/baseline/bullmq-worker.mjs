/**
 * BullMQ baseline, the consuming side (a child process of a benchmark): one Worker with
 * `concurrency` and an in-process no-op processor on the local Redis. Prints
 * {"ready":true} once connected, then, when `total` jobs have completed, one JSON line
 * { doneAt, completed, failed } and exits.
 *
 * Input: one JSON argument { redisUrl, queueName, total, concurrency }.
 */
import { Worker } from 'bullmq';
import IORedis from 'ioredis';

const { redisUrl, queueName, total, concurrency = 50 } = JSON.parse(process.argv[2] ?? '{}');
const connection = new IORedis(redisUrl, { maxRetriesPerRequest: null });
let completed = 0;
let failed = 0;
let finish;
const finished = new Promise((resolve) => {
  finish = resolve;
});
const worker = new Worker(queueName, async () => ({ ok: true }), { connection, concurrency });
const settle = () => {
  if (completed + failed === total) finish(Date.now());
};
worker.on('completed', () => {
  completed += 1;
  settle();
});
worker.on('failed', () => {
  failed += 1;
  settle();
});
worker.on('error', (error) => process.stderr.write(`bullmq worker error: ${error.message}\n`));
await worker.waitUntilReady();
process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
const doneAt = await finished;
process.stdout.write(`${JSON.stringify({ doneAt, completed, failed })}\n`);
await worker.close();
await connection.quit();
