/**
 * Load generator of the soak (a child process): submits `rate` jobs a second as single
 * POST /v1/jobs requests for `durationMs`, each a copy of `job`; every `pollEvery`-th job
 * is watched by a long poll (GET /v1/jobs/{id}?wait=30, again until it is terminal) and
 * every `streamEvery`-th by its event stream (GET /v1/jobs/{id}/events, read to its end).
 * At most `maxInFlight` submissions wait for an answer; a tick that would exceed it skips
 * those jobs and counts them as `skipped` (the server did not keep up). Every wait is
 * bounded: after `durationMs` the watches still open get `drainMs` to end.
 *
 * Input: one JSON argument { url, rate, durationMs, job, pollEvery, streamEvery, maxInFlight, drainMs }.
 * Output: one JSON line { submitted, skipped, accepted, errors: { "<status or error>": n },
 * longPolls, longPollsTerminal, streams, streamsEnded, streamEvents, elapsedMs }.
 */
const input = JSON.parse(process.argv[2] ?? '{}');
const { url, rate, durationMs, job, pollEvery = 5, streamEvery = 50, maxInFlight = 256, drainMs = 40_000 } = input;
const { AbortSignal } = globalThis;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const counts = {
  submitted: 0,
  skipped: 0,
  accepted: 0,
  errors: {},
  longPolls: 0,
  longPollsTerminal: 0,
  streams: 0,
  streamsEnded: 0,
  streamEvents: 0,
};
const watches = new Set();
let inFlight = 0;
const body = JSON.stringify(job);
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
const fail = (what) => {
  counts.errors[what] = (counts.errors[what] ?? 0) + 1;
};

async function longPoll(id, deadline) {
  counts.longPolls++;
  while (Date.now() < deadline) {
    const response = await fetch(`${url}/v1/jobs/${id}?wait=30`, { signal: AbortSignal.timeout(35_000) });
    const answer = await response.json();
    if (!response.ok) return fail(`long poll ${response.status}`);
    if (TERMINAL.has(answer.status)) {
      counts.longPollsTerminal++;
      return;
    }
  }
}

async function stream(id, deadline) {
  counts.streams++;
  const response = await fetch(`${url}/v1/jobs/${id}/events`, {
    signal: AbortSignal.timeout(Math.max(1000, deadline - Date.now())),
  });
  if (!response.ok) return fail(`stream ${response.status}`);
  const decoder = new TextDecoder();
  let text = '';
  for await (const chunk of response.body) {
    text += decoder.decode(chunk, { stream: true });
    let end = text.indexOf('\n\n');
    while (end >= 0) {
      if (text.slice(0, end).includes('event: job')) counts.streamEvents++;
      text = text.slice(end + 2);
      end = text.indexOf('\n\n');
    }
  }
  counts.streamsEnded++;
}

function watch(promise) {
  const p = promise.catch((error) => fail(error.name === 'TimeoutError' ? 'watch timeout' : `watch ${error.message}`));
  watches.add(p);
  p.finally(() => watches.delete(p));
}

async function submit(deadline) {
  inFlight++;
  try {
    const response = await fetch(`${url}/v1/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
      signal: AbortSignal.timeout(30_000),
    });
    const answer = await response.json();
    if (response.status !== 201) return fail(`submit ${response.status} ${answer.code ?? ''}`.trim());
    counts.accepted++;
    if (counts.accepted % streamEvery === 0) watch(stream(answer.id, deadline));
    else if (counts.accepted % pollEvery === 0) watch(longPoll(answer.id, deadline));
  } catch (error) {
    fail(`submit ${error.name === 'TimeoutError' ? 'timeout' : error.message}`);
  } finally {
    inFlight--;
  }
}

const started = Date.now();
const end = started + durationMs;
const pending = new Set();
while (Date.now() < end) {
  const due = Math.floor(((Date.now() - started) / 1000) * rate);
  while (counts.submitted + counts.skipped < due) {
    if (inFlight >= maxInFlight) {
      counts.skipped++;
      continue;
    }
    counts.submitted++;
    const p = submit(end + drainMs);
    pending.add(p);
    p.finally(() => pending.delete(p));
  }
  await sleep(20);
}
const drainUntil = Date.now() + drainMs;
while ((pending.size > 0 || watches.size > 0) && Date.now() < drainUntil) await sleep(100);
counts.openAtEnd = pending.size + watches.size;
console.log(JSON.stringify({ ...counts, elapsedMs: Date.now() - started }));
process.exit(0);
