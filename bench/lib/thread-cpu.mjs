/**
 * A process's threads as Linux accounts for them (/proc/<pid>/task): each one's ns on a
 * core, its nice value and how often it went to sleep, and what that comes to per job.
 */
import { readdirSync, readFileSync } from 'node:fs';

/**
 * The main thread's scheduler accounting (Linux, /proc/<pid>/task/<pid>/schedstat): ns on
 * a core, ns runnable waiting for one, and the times it was put on a core (each wake of a
 * sleeping thread is one, as is each return after it was preempted). Null where it cannot
 * be read.
 */
export function mainThreadSchedstat(pid) {
  try {
    const [onCpuNs, waitingNs, runs] = readFileSync(`/proc/${pid}/task/${pid}/schedstat`, 'utf8')
      .trim()
      .split(/\s+/)
      .map(Number);
    return [onCpuNs, waitingNs, runs].every(Number.isFinite) ? { onCpuNs, waitingNs, runs } : null;
  } catch {
    return null;
  }
}

/** Every thread of process `pid`: its ns on a core, its nice value and how often it went to sleep. */
export function threadTimes(pid) {
  const threads = new Map();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const onCpuNs = Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
      // Field 19 of stat is the nice value; the name in field 2 may hold spaces, so count from its ')'.
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const nice = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
      // A voluntary context switch is the thread going to sleep: one per wake-up.
      const status = readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
      const sleeps = Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(status)?.[1] ?? 0);
      threads.set(Number(tid), { onCpuNs, nice, sleeps });
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return threads;
}

/**
 * CPU µs per job by kind of thread between two readings (the worker threads are those at
 * `workerNice` or above) (threads that ended meanwhile are
 * lost to both), less the time between the readings of each pair in `excluded`.
 */
export function perJob(pid, workerNice, before, after, jobs, excluded = []) {
  const sums = { main: 0, workers: 0, rest: 0 };
  const wakes = { main: 0, workers: 0 };
  const add = (from, to, sign) => {
    for (const [tid, now] of to) {
      const was = from.get(tid);
      const kind = tid === pid ? 'main' : now.nice >= workerNice ? 'workers' : 'rest';
      sums[kind] += sign * (now.onCpuNs - (was?.onCpuNs ?? 0));
      if (kind !== 'rest') wakes[kind] += sign * (now.sleeps - (was?.sleeps ?? 0));
    }
  };
  add(before, after, 1);
  for (const [from, to] of excluded) add(from, to, -1);
  const us = (ns) => ns / 1000 / jobs;
  return {
    mainUs: us(sums.main),
    workersUs: us(sums.workers),
    restUs: us(sums.rest),
    mainWakesPer100: (wakes.main * 100) / jobs,
    workerWakesPer100: (wakes.workers * 100) / jobs,
  };
}
