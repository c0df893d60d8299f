/**
 * Kiln servers for the fault runs: started from dist/ with the fault tasks
 * (bench/faults/tasks), marks going to a file of the run's, and killed with SIGKILL.
 */
import { join } from 'node:path';
import { BENCH_DIR, startKiln } from '../../lib/processes.mjs';

export const FAULT_TASKS_DIR = join(BENCH_DIR, 'faults', 'tasks');
const { AbortSignal } = globalThis;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** startKiln with the fault tasks and KILN_FAULT_MARKS = `marks`; answers the server and ms from spawn to /health. */
export async function startFaultServer({ marks, env = {}, ...options }) {
  const t0 = performance.now();
  const server = await startKiln({
    threads: 2,
    ...options,
    env: { KILN_TASKS_DIR: FAULT_TASKS_DIR, KILN_FAULT_MARKS: marks, ...env },
  });
  return { server, healthMs: performance.now() - t0 };
}

/** SIGKILLs the server's process and resolves once it has exited. */
export function killHard(server) {
  const { child } = server;
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

/** Polls `path` until it answers 200 or `timeoutMs` passes; answers the ms it took, or null. */
export async function msUntilOk(url, path, timeoutMs) {
  const t0 = performance.now();
  while (performance.now() - t0 < timeoutMs) {
    const response = await fetch(`${url}${path}`, { signal: AbortSignal.timeout(2000) }).catch(() => null);
    if (response !== null) await response.arrayBuffer();
    if (response?.ok) return performance.now() - t0;
    await sleep(20);
  }
  return null;
}
