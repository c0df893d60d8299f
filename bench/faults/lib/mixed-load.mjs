/**
 * The load of the kill and outage runs, in the run's own process: `lanes` loops, each
 * sending a single POST /v1/jobs or a POST /v1/jobs/batch of 10 (one in four) of
 * `fault.mark` jobs to the next of `urls`, and keeping the id of every job whose 201 came
 * back (accepted: a server that answered 201 must not lose it), at most `rate` jobs a
 * second in all, so that the queue stays short and a job's wait is not its backlog's. A refused connection or
 * a 5xx is counted and the lane waits 50 ms; every request is bounded by 5 s. The choice of
 * single or batch and each job's spin come from a seeded generator, so a seed repeats a run.
 */
const { AbortSignal } = globalThis;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** mulberry32: a small seeded generator of numbers in [0, 1). */
export function seededRandom(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Starts the load; answers `{ accepted, answers, stop() }`: `accepted` the ids of jobs
 * answered 201, `answers` counts by status or error code, `stop()` ends every lane and
 * resolves when they have ended (at most one request's bound later). `maxMs` bounds it.
 */
export function startMixedLoad({ urls, seed = 1, lanes = 4, rate = 100, maxSpinMs = 20, maxMs = 600_000 }) {
  const random = seededRandom(seed);
  const accepted = [];
  const answers = {};
  const count = (key) => {
    answers[key] = (answers[key] ?? 0) + 1;
  };
  let stopped = false;
  const until = Date.now() + maxMs;
  let next = 0;
  const job = () => ({ type: 'fault.mark', payload: { ms: Math.floor(random() * maxSpinMs) } });
  const started = Date.now();
  let sent = 0;
  const lane = async () => {
    while (!stopped && Date.now() < until) {
      const ahead = (sent / rate) * 1000 - (Date.now() - started);
      if (ahead > 0) {
        await sleep(Math.min(ahead, 100));
        continue;
      }
      const url = urls[next++ % urls.length];
      const batch = random() < 0.25;
      sent += batch ? 10 : 1;
      try {
        const response = await fetch(batch ? `${url}/v1/jobs/batch` : `${url}/v1/jobs`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(batch ? { jobs: Array.from({ length: 10 }, job) } : job()),
          signal: AbortSignal.timeout(5000),
        });
        const answer = await response.json().catch(() => null);
        count(String(response.status) + (answer?.code === undefined ? '' : ` ${answer.code}`));
        if (response.status === 201) {
          if (batch) accepted.push(...answer.jobs.map((j) => j.id));
          else accepted.push(answer.id);
        } else if (response.status >= 500) {
          await sleep(50);
        }
      } catch (error) {
        count(error.name === 'TimeoutError' ? 'timeout' : (error.cause?.code ?? error.name));
        await sleep(50);
      }
    }
  };
  const running = Promise.all(Array.from({ length: lanes }, lane));
  return {
    accepted,
    answers,
    stop() {
      stopped = true;
      return running;
    },
  };
}
