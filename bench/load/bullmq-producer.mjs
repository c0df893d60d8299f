/**
 * BullMQ baseline, the producing side (a child process of a benchmark): adds `total` no-op
 * jobs with Queue.addBulk in bulks of `batchSize`, `concurrency` bulks in flight, the
 * same shape as Kiln's batch submission.
 *
 * Input: one JSON argument { redisUrl, queueName, total, batchSize, concurrency }.
 * Output: one JSON line { startedAt, submittedAt, added }.
 */
import { Queue } from 'bullmq';
import IORedis from 'ioredis';

const { redisUrl, queueName, total, batchSize = 100, concurrency = 8 } = JSON.parse(process.argv[2] ?? '{}');
const connection = new IORedis(redisUrl, { maxRetriesPerRequest: null });
const queue = new Queue(queueName, { connection });
await queue.waitUntilReady();
const batches = Math.ceil(total / batchSize);
let next = 0;
let added = 0;
const lane = async () => {
  while (next < batches) {
    const index = next++;
    const size = Math.min(batchSize, total - index * batchSize);
    const jobs = await queue.addBulk(Array.from({ length: size }, () => ({ name: 'noop', data: {} })));
    added += jobs.length;
  }
};
const startedAt = Date.now();
await Promise.all(Array.from({ length: Math.min(concurrency, batches) }, lane));
const submittedAt = Date.now();
await queue.close();
await connection.quit();
process.stdout.write(`${JSON.stringify({ startedAt, submittedAt, added })}\n`);
