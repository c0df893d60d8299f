/**
 * The few Kiln HTTP calls the benchmarks make besides the load itself: JSON requests,
 * the queue, /metrics, and waiting until every submitted job has finished.
 */

// A Node global that not every linter configuration knows.
const { AbortSignal } = globalThis;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function requestJson(url, { method = 'GET', body, timeoutMs = 30_000 } = {}) {
  const response = await fetch(url, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${url} answered ${response.status}: ${text.slice(0, 500)}`);
  return text === '' ? null : JSON.parse(text);
}

export const getQueue = (base) => requestJson(`${base}/v1/queue`);
export const pauseQueue = (base) => requestJson(`${base}/v1/queue/pause`, { method: 'POST' });
export const resumeQueue = (base) => requestJson(`${base}/v1/queue/resume`, { method: 'POST' });

/** Unlabelled samples of the Prometheus exposition, by metric name. */
export async function scrapeMetrics(base) {
  const response = await fetch(`${base}/metrics`, { signal: AbortSignal.timeout(30_000) });
  const text = await response.text();
  if (!response.ok) throw new Error(`GET /metrics answered ${response.status}`);
  const samples = new Map();
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*) ([^ ]+)/.exec(line);
    if (match !== null) samples.set(match[1], Number(match[2]));
  }
  return samples;
}

/**
 * The interval of the timer behind prom-client's event-loop gauges (its default, which
 * Kiln keeps).
 */
export const LAG_RESOLUTION_MS = 10;

/**
 * The server's event-loop lag: prom-client's histogram (perf_hooks.monitorEventLoopDelay),
 * which is reset at every scrape, so a scrape just before a run and one just after it give
 * the lag of exactly that run. The histogram records the whole interval between two ticks
 * of a 10 ms timer (an idle loop reads 10.1 ms), so the lag is that interval less the
 * 10 ms; `interval*` keep the gauges as read.
 */
export async function eventLoopLag(base) {
  const m = await scrapeMetrics(base);
  const ms = (name) => (m.get(name) ?? Number.NaN) * 1000;
  const interval = {
    p50Ms: ms('nodejs_eventloop_lag_p50_seconds'),
    p99Ms: ms('nodejs_eventloop_lag_p99_seconds'),
    maxMs: ms('nodejs_eventloop_lag_max_seconds'),
  };
  const lag = (value) => Math.max(0, value - LAG_RESOLUTION_MS);
  return {
    p50Ms: lag(interval.p50Ms),
    p99Ms: lag(interval.p99Ms),
    maxMs: lag(interval.maxMs),
    intervalP50Ms: interval.p50Ms,
    intervalP99Ms: interval.p99Ms,
    intervalMaxMs: interval.maxMs,
  };
}

/**
 * Waits until no job is pending or running. Long-polls `lastJobId` first (free for the
 * server), then polls GET /v1/queue every 5 ms. Answers Date.now() at the moment the
 * queue was seen idle. Bounded by `timeoutMs`.
 */
export async function waitUntilIdle(base, { lastJobId = null, timeoutMs = 600_000 } = {}) {
  const deadline = Date.now() + timeoutMs;
  if (lastJobId !== null) {
    let terminal = false;
    while (!terminal && Date.now() < deadline) {
      const job = await requestJson(`${base}/v1/jobs/${lastJobId}?wait=30`, { timeoutMs: 40_000 });
      terminal = ['completed', 'failed', 'cancelled'].includes(job.status);
    }
  }
  while (Date.now() < deadline) {
    const queue = await getQueue(base);
    if (queue.pending === 0 && queue.byStatus.running === 0) {
      const done = Date.now();
      const failed = queue.byStatus.failed + queue.byStatus.cancelled;
      return { done, completed: queue.byStatus.completed, failed };
    }
    await sleep(5);
  }
  throw new Error(`jobs did not finish within ${timeoutMs} ms`);
}
