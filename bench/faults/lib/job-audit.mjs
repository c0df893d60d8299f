/**
 * What happened to every accepted job after a fault run: read back by id from a live
 * server and matched with the marks fault.mark wrote (`S|E job attempt pid ms`).
 */
import { readFileSync } from 'node:fs';

const { AbortSignal } = globalThis;
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

/** The marks file as `{ starts: Map<job, [{attempt, pid, at}]>, ends: Map<job, [...]> }`. */
export function readMarks(path) {
  const starts = new Map();
  const ends = new Map();
  let text = '';
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    // no job has started
  }
  for (const line of text.split('\n')) {
    const [kind, job, attempt, pid, at] = line.split(' ');
    if (at === undefined) continue;
    const map = kind === 'S' ? starts : ends;
    const list = map.get(job) ?? [];
    list.push({ attempt: Number(attempt), pid: Number(pid), at: Number(at) });
    map.set(job, list);
  }
  return { starts, ends };
}

/** Waits until the server has no pending or running job, at most `timeoutMs`; answers whether it got there. */
export async function waitIdle(url, timeoutMs) {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    const response = await fetch(`${url}/v1/queue`, { signal: AbortSignal.timeout(5000) }).catch(() => null);
    if (response?.ok) {
      const queue = await response.json();
      if (queue.pending === 0 && queue.byStatus.running === 0) return true;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return false;
}

/**
 * Reads every accepted job: `lost` (404), `unfinished` (not terminal), `completed`,
 * `failed`, `attempts` (the store's count, summed), `handlerStarts` (distinct attempts
 * with a start mark), `attemptsWithoutStart` (attempts counted that no handler start
 * matches) and `runTwiceOnLiveServer` (jobs whose handler one server process started more
 * than once), with a few example ids of each defect.
 */
export async function auditJobs(url, ids, marksPath) {
  const { starts } = readMarks(marksPath);
  const audit = {
    accepted: ids.length,
    lost: 0,
    unfinished: 0,
    completed: 0,
    failed: 0,
    attempts: 0,
    handlerStarts: 0,
    attemptsWithoutStart: 0,
    runTwiceOnLiveServer: 0,
    examples: { lost: [], unfinished: [], attemptsWithoutStart: [], runTwiceOnLiveServer: [] },
  };
  const example = (kind, id) => {
    if (audit.examples[kind].length < 3) audit.examples[kind].push(id);
  };
  let next = 0;
  const lane = async () => {
    while (next < ids.length) {
      const id = ids[next++];
      const response = await fetch(`${url}/v1/jobs/${id}`, { signal: AbortSignal.timeout(10_000) });
      const job = await response.json();
      if (response.status === 404) {
        audit.lost++;
        example('lost', id);
        continue;
      }
      if (!response.ok) throw new Error(`GET /v1/jobs/${id} answered ${response.status}`);
      if (!TERMINAL.has(job.status)) {
        audit.unfinished++;
        example('unfinished', `${id} (${job.status})`);
      } else if (job.status === 'completed') audit.completed++;
      else audit.failed++;
      const marks = starts.get(id) ?? [];
      const started = new Set(marks.map((s) => s.attempt)).size;
      // A server process that started the job's handler twice: a server that lived on
      // ran it again (a restarted server is a process of its own).
      const pids = marks.map((s) => s.pid);
      if (new Set(pids).size < pids.length) {
        audit.runTwiceOnLiveServer++;
        example('runTwiceOnLiveServer', `${id} (attempts ${marks.map((s) => `${s.attempt}@${s.pid}`).join(', ')})`);
      }
      audit.attempts += job.attempts;
      audit.handlerStarts += started;
      if (job.attempts > started) {
        audit.attemptsWithoutStart += job.attempts - started;
        example('attemptsWithoutStart', `${id} (${job.attempts} counted, ${started} started)`);
      }
    }
  };
  await Promise.all(Array.from({ length: 8 }, lane));
  return audit;
}
