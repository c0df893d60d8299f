/**
 * Load generator (a child process of a benchmark): submits `total` copies of one job to a
 * Kiln server, either as POST /v1/jobs/batch requests of `batchSize` jobs with
 * `concurrency` requests in flight, or as single POST /v1/jobs requests over
 * `connections` connections (autocannon), then waits until every job has finished.
 *
 * Input: one JSON argument { url, total, job, mode: 'batch'|'single', batchSize,
 * concurrency, connections, wait, timeoutMs, urls }. `urls` (batch mode): several servers
 * sharing one store (PostgreSQL), batch i going to urls[i % urls.length]; the wait is on
 * the server that answered the last batch (its queue counts are the cluster's).
 * Output: one JSON line { startedAt, submittedAt, doneAt, submitted, completed, failed }
 * (epoch ms of this machine's clock), and startedAtUs, doneAtUs: the same moments on the
 * monotonic clock in µs, the clock of a `node --cpu-prof` profile's timestamps.
 */
import autocannon from 'autocannon';
import { requestJson, waitUntilIdle } from '../lib/kiln-client.mjs';

const input = JSON.parse(process.argv[2] ?? '{}');
const { url, total, job, mode = 'batch', batchSize = 100, concurrency = 8, connections = 100 } = input;
const urls = input.urls ?? [url];
const wait = input.wait ?? true;
const timeoutMs = input.timeoutMs ?? 600_000;

async function submitBatches() {
  const batches = Math.ceil(total / batchSize);
  const bodies = new Map();
  const bodyFor = (size) => {
    if (!bodies.has(size)) bodies.set(size, { jobs: Array.from({ length: size }, () => job) });
    return bodies.get(size);
  };
  let next = 0;
  let lastIndex = -1;
  let lastJobId = null;
  let lastJobUrl = url;
  let submitted = 0;
  const lane = async () => {
    while (next < batches) {
      const index = next++;
      const size = Math.min(batchSize, total - index * batchSize);
      const to = urls[index % urls.length];
      const answer = await requestJson(`${to}/v1/jobs/batch`, { method: 'POST', body: bodyFor(size) });
      submitted += answer.jobs.length;
      if (index > lastIndex) {
        lastIndex = index;
        lastJobId = answer.jobs.at(-1).id;
        lastJobUrl = to;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, batches) }, lane));
  return { submitted, lastJobId, lastJobUrl };
}

async function submitSingles() {
  const result = await autocannon({
    url: `${url}/v1/jobs`,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(job),
    connections,
    amount: total,
    timeout: 30,
  });
  const ok = result['2xx'];
  if (ok !== total || result.errors > 0 || result.timeouts > 0) {
    throw new Error(
      `single submissions: ${ok} of ${total} answered 2xx (non-2xx ${result.non2xx}, errors ${result.errors}, timeouts ${result.timeouts})`,
    );
  }
  return { submitted: ok, lastJobId: null, lastJobUrl: url, latencyP99Ms: result.latency.p99 };
}

const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);
const startedAtUs = monotonicUs();
const startedAt = Date.now();
const submission = mode === 'single' ? await submitSingles() : await submitBatches();
const submittedAt = Date.now();
let done = { done: null, completed: null, failed: null };
if (wait) done = await waitUntilIdle(submission.lastJobUrl, { lastJobId: submission.lastJobId, timeoutMs });
const doneAtUs = monotonicUs();
process.stdout.write(
  `${JSON.stringify({
    startedAt,
    submittedAt,
    doneAt: done.done,
    startedAtUs,
    doneAtUs,
    submitted: submission.submitted,
    completed: done.completed,
    failed: done.failed,
    ...(submission.latencyP99Ms === undefined ? {} : { latencyP99Ms: submission.latencyP99Ms }),
  })}\n`,
);
