/**
 * graphile-worker baseline, the producing side (a child process of a benchmark): adds
 * `total` no-op jobs with WorkerUtils.addJobs in bulks of `batchSize`, `concurrency`
 * bulks in flight, the same shape as Kiln's batch submission.
 *
 * Input: one JSON argument { pgUrl, schema, total, batchSize, concurrency }.
 * Output: one JSON line { startedAt, submittedAt, added }.
 */
import { makeWorkerUtils } from 'graphile-worker';

const { pgUrl, schema, total, batchSize = 100, concurrency = 8 } = JSON.parse(process.argv[2] ?? '{}');
const utils = await makeWorkerUtils({ connectionString: pgUrl, schema, maxPoolSize: concurrency + 1 });
await utils.migrate();
const batches = Math.ceil(total / batchSize);
const specs = new Map();
const specsOf = (size) => {
  if (!specs.has(size))
    specs.set(
      size,
      Array.from({ length: size }, () => ({ identifier: 'noop', payload: {} })),
    );
  return specs.get(size);
};
let next = 0;
let added = 0;
const lane = async () => {
  while (next < batches) {
    const index = next++;
    const jobs = await utils.addJobs(specsOf(Math.min(batchSize, total - index * batchSize)));
    added += jobs.length;
  }
};
const startedAt = Date.now();
await Promise.all(Array.from({ length: Math.min(concurrency, batches) }, lane));
const submittedAt = Date.now();
await utils.release();
process.stdout.write(`${JSON.stringify({ startedAt, submittedAt, added })}\n`);
