/**
 * Load generator for the priority-latency figure (a child process of a benchmark).
 * With dispatch paused, fills the queue with `backlog` priority-0 cpu.spin jobs of
 * `spinMs` (POST /v1/jobs/batch, 1000 a request, 4 in flight); resumes dispatch and
 * waits until every thread is busy; then submits `probes` priority-9 jobs one by one
 * (each after the previous one has finished, 5–15 ms apart) and records, for each,
 * the client's send time, the server's createdAt and the job's startedAt.
 *
 * Input: one JSON argument { url, backlog, probes, spinMs }.
 * Output: one JSON line { fillMs, samples: [{ sentAt, answeredAt, createdAt, startedAt }], queuedAfter }.
 */
import { getQueue, pauseQueue, requestJson, resumeQueue } from '../lib/kiln-client.mjs';

const { url, backlog, probes, spinMs = 2 } = JSON.parse(process.argv[2] ?? '{}');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

await pauseQueue(url);
const fillStarted = Date.now();
const batchSize = 1000;
const batches = Math.ceil(backlog / batchSize);
let next = 0;
const lane = async () => {
  while (next < batches) {
    const index = next++;
    const size = Math.min(batchSize, backlog - index * batchSize);
    const job = { type: 'cpu.spin', payload: { ms: spinMs }, priority: 0 };
    await requestJson(`${url}/v1/jobs/batch`, {
      method: 'POST',
      body: { jobs: Array.from({ length: size }, () => job) },
    });
  }
};
await Promise.all(Array.from({ length: Math.min(4, batches) }, lane));
const fillMs = Date.now() - fillStarted;

await resumeQueue(url);
for (let i = 0; i < 1000; i++) {
  const queue = await getQueue(url);
  if (queue.threads.busy === queue.threads.size) break;
  await sleep(10);
}
await sleep(200);

const samples = [];
for (let i = 0; i < probes; i++) {
  const sentAt = Date.now();
  const job = await requestJson(`${url}/v1/jobs`, {
    method: 'POST',
    body: { type: 'cpu.spin', payload: { ms: spinMs }, priority: 9 },
  });
  const answeredAt = Date.now();
  let current = job;
  for (let poll = 0; poll < 20 && current.startedAt === null; poll++) {
    current = await requestJson(`${url}/v1/jobs/${job.id}?wait=5`, { timeoutMs: 10_000 });
  }
  if (current.startedAt === null) throw new Error(`priority-9 job ${job.id} did not start within 100 s`);
  samples.push({ sentAt, answeredAt, createdAt: Date.parse(job.createdAt), startedAt: Date.parse(current.startedAt) });
  await sleep(5 + Math.random() * 10);
}
const queuedAfter = (await getQueue(url)).byStatus.queued;
process.stdout.write(`${JSON.stringify({ fillMs, samples, queuedAfter })}\n`);
