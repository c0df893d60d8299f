/**
 * Load generator for the priority-latency figure (a child process of a benchmark): with a
 * backlog already queued and every thread busy, submits `probes` priority-9 cpu.spin jobs
 * of `spinMs` one by one (each after the previous one has started, 5–15 ms apart) and
 * records, for each, the client's send time, the server's createdAt and the job's
 * startedAt.
 *
 * Input: one JSON argument { url, probes, spinMs }.
 * Output: one JSON line { startedAt, endedAt, samples: [{ sentAt, answeredAt, createdAt, startedAt }], queuedAfter }.
 */
import { getQueue, requestJson } from '../lib/kiln-client.mjs';

const { url, probes, spinMs = 2 } = JSON.parse(process.argv[2] ?? '{}');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const startedAt = Date.now();
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
const endedAt = Date.now();
const queuedAfter = (await getQueue(url)).byStatus.queued;
process.stdout.write(`${JSON.stringify({ startedAt, endedAt, samples, queuedAfter })}\n`);
