/**
 * Load generator (a child process of a benchmark): submits `total` copies of one job to a
 * Kiln server, either as POST /v1/jobs/batch requests of `batchSize` jobs with
 * `concurrency` requests in flight, or as single POST /v1/jobs requests over
 * `connections` connections (autocannon), or as single POST /v1/jobs requests in waves of
 * `wave` (all of a wave sent together, the next wave only once every answer of this one
 * is in, so the server meets the same number of requests at a time however loaded the
 * machine is), then waits until every job has finished.
 *
 * Input: one JSON argument { url, total, job, mode: 'batch'|'single'|'waves', batchSize,
 * concurrency, connections, wave, wait, timeoutMs, urls }. `urls` (batch mode): several servers
 * sharing one store (PostgreSQL), batch i going to urls[i % urls.length]; the wait is on
 * the server that answered the last batch (its queue counts are the cluster's).
 * Output: one JSON line { startedAt, submittedAt, doneAt, submitted, lastJobId, completed, failed }
 * (epoch ms of this machine's clock), and startedAtUs, doneAtUs: the same moments on the
 * monotonic clock in µs, the clock of a `node --cpu-prof` profile's timestamps.
 */
import { once } from 'node:events';
import { connect } from 'node:net';
import autocannon from 'autocannon';
import { requestJson, waitUntilIdle } from '../lib/kiln-client.mjs';

const input = JSON.parse(process.argv[2] ?? '{}');
const { url, total, job, mode = 'batch', batchSize = 100, concurrency = 8, connections = 100, wave = 16 } = input;
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

/**
 * Waves of single POSTs pipelined on one connection and written with one write, so that
 * each wave reaches the server in one read, is parsed in one event-loop turn and is
 * stored by one message to the store, however loaded the machine is (separate
 * connections written one after the other arrive spread over as many turns as the
 * sender takes to write them, which depends on the load). The next wave is sent once
 * every answer of this one is in.
 */
async function submitWaves() {
  const target = new URL(url);
  const body = JSON.stringify(job);
  const request = `POST /v1/jobs HTTP/1.1\r\nhost: ${target.host}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  const socket = connect({ host: target.hostname, port: Number(target.port) });
  await once(socket, 'connect');
  socket.setNoDelay(true);
  const answers = [];
  let waiting = null;
  let buffer = '';
  socket.setEncoding('utf8').on('data', (chunk) => {
    buffer += chunk;
    for (;;) {
      const headEnd = buffer.indexOf('\r\n\r\n');
      if (headEnd < 0) break;
      const head = buffer.slice(0, headEnd);
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? Number.NaN);
      if (!Number.isInteger(length)) throw new Error(`an answer without a content-length: ${head}`);
      if (buffer.length < headEnd + 4 + length) break;
      answers.push({ status: Number(head.split(' ')[1]), text: buffer.slice(headEnd + 4, headEnd + 4 + length) });
      buffer = buffer.slice(headEnd + 4 + length);
    }
    if (waiting !== null && answers.length >= waiting.count) waiting.resolve();
  });
  const closed = once(socket, 'close').then(() => {
    throw new Error('the server closed the connection during a wave');
  });
  let submitted = 0;
  let lastJobId = null;
  while (submitted < total) {
    const count = Math.min(wave, total - submitted);
    const all = new Promise((resolve) => {
      waiting = { count, resolve };
    });
    socket.write(request.repeat(count));
    await Promise.race([all, closed]);
    for (const answer of answers.splice(0, count)) {
      if (answer.status !== 201)
        throw new Error(`POST /v1/jobs answered ${answer.status}: ${answer.text.slice(0, 500)}`);
      lastJobId = JSON.parse(answer.text).id;
    }
    submitted += count;
  }
  closed.catch(() => {});
  socket.destroy();
  return { submitted, lastJobId, lastJobUrl: url };
}

const submitters = { batch: submitBatches, single: submitSingles, waves: submitWaves };
if (!Object.hasOwn(submitters, mode)) throw new Error(`mode must be batch, single or waves, got ${mode}`);

const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);
const startedAtUs = monotonicUs();
const startedAt = Date.now();
const submission = await submitters[mode]();
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
    lastJobId: submission.lastJobId,
    completed: done.completed,
    failed: done.failed,
    ...(submission.latencyP99Ms === undefined ? {} : { latencyP99Ms: submission.latencyP99Ms }),
  })}\n`,
);
