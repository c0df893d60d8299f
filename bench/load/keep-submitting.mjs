/**
 * Load generator for the priority-latency figure "while jobs are being submitted" (a
 * child process of a benchmark, on loopback): submits copies of one job as
 * POST /v1/jobs/batch requests of `batchSize`, `concurrency` requests in flight, each
 * sent as soon as the previous one of its lane is answered, until SIGTERM, `maxJobs`
 * jobs or `maxMs`, whichever comes first. Prints {"submitting":true} once its first
 * request has been answered, and at the end, after the requests in flight are answered,
 * one JSON line and exits 0.
 *
 * Input: one JSON argument { url, job, batchSize, concurrency, maxJobs, maxMs }.
 * Output: { submitting: true }, then { startedAt, stoppedAt, stoppedBy: 'signal'|'count'|'time',
 * submitted, requests, latencyP50Ms, latencyP99Ms } (request latencies of this client).
 */
import { requestJson } from '../lib/kiln-client.mjs';

const input = JSON.parse(process.argv[2] ?? '{}');
const { url, job, batchSize = 100, concurrency = 1, maxJobs, maxMs } = input;
if (!Number.isInteger(maxJobs) || !Number.isInteger(maxMs)) throw new Error('maxJobs and maxMs are required');

let stoppedBy = null;
process.on('SIGTERM', () => {
  stoppedBy ??= 'signal';
});
const startedAt = Date.now();
const deadline = startedAt + maxMs;
const body = { jobs: Array.from({ length: batchSize }, () => job) };
const latencies = [];
let claimed = 0;
let submitted = 0;
let announced = false;

const lane = async () => {
  while (stoppedBy === null) {
    if (claimed + batchSize > maxJobs) {
      stoppedBy = 'count';
      break;
    }
    if (Date.now() >= deadline) {
      stoppedBy = 'time';
      break;
    }
    claimed += batchSize;
    const sent = performance.now();
    const answer = await requestJson(`${url}/v1/jobs/batch`, { method: 'POST', body });
    latencies.push(performance.now() - sent);
    submitted += answer.jobs.length;
    if (!announced) {
      announced = true;
      process.stdout.write(`${JSON.stringify({ submitting: true })}\n`);
    }
  }
};
await Promise.all(Array.from({ length: concurrency }, lane));
const stoppedAt = Date.now();
latencies.sort((a, b) => a - b);
const at = (p) => latencies[Math.min(latencies.length - 1, Math.ceil((p / 100) * latencies.length) - 1)] ?? null;
process.stdout.write(
  `${JSON.stringify({
    startedAt,
    stoppedAt,
    stoppedBy,
    submitted,
    requests: latencies.length,
    latencyP50Ms: at(50),
    latencyP99Ms: at(99),
  })}\n`,
);
process.exit(0);
