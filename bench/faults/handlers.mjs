/**
 * Misbehaving handlers beside ordinary jobs: each phase starts a server (2 threads,
 * KILN_THREAD_MAX_MEMORY_MB=64) whose KILN_TASKS_DIR holds bad tasks (tasks/<phase>/),
 * submits ordinary jobs (cpu.spin 5 ms) with the bad ones among them, every job with
 * maxAttempts 1 (so a crash shows on the job it was charged to) and timeoutMs 3000, and
 * waits until every job is terminal or the phase's bound passes.
 *
 * - misbehaving: process.exit, an endless loop, Atomics.wait, a heap blow-up, throw 42,
 *   throw null, BigInt, function and circular results, a 50 MB result, an unhandled
 *   rejection, a throw from a timer after returning;
 * - import-worker: a module that throws when a worker thread imports it;
 * - abort: process.abort() in a handler;
 * - import-main: a module that throws at import on the main thread (the server should
 *   refuse to start, saying why).
 *
 * Figures per phase: the server alive at the end, ordinary jobs completed of submitted
 * and the codes of those that failed (a crash charged to the wrong job), each bad job's
 * status and error code; for import-main the exit and its message.
 *
 *   node bench/faults/handlers.mjs [--size tiny|full] [--phase P]
 */
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startKiln } from '../lib/processes.mjs';
import { printTable } from '../lib/report.mjs';
import { finish } from './lib/fault-report.mjs';
import { FAULT_TASKS_DIR } from './lib/kiln-fault-server.mjs';

const { values } = parseArgs({
  options: { size: { type: 'string', default: 'full' }, phase: { type: 'string' } },
  strict: true,
});
const tiny = values.size === 'tiny';
const ORDINARY = tiny ? 20 : 200;
const BAD = {
  misbehaving: [
    'bad.exit',
    'bad.loop',
    'bad.atomics-wait',
    'bad.heap',
    'bad.throw-42',
    'bad.throw-null',
    'bad.result-bigint',
    'bad.result-function',
    'bad.result-circular',
    'bad.result-50mb',
    'bad.unhandled-rejection',
    'bad.timer-throw',
  ],
  'import-worker': ['bad.import-worker'],
  abort: ['bad.abort'],
  'import-main': [],
};
const phases = values.phase === undefined ? Object.keys(BAD) : [values.phase];
if (phases.some((p) => !(p in BAD))) throw new Error(`--phase must be one of ${Object.keys(BAD).join(', ')}`);
const { AbortSignal } = globalThis;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

const oneLine = (text) => (typeof text === 'string' ? text.replace(/\s+/g, ' ').slice(0, 100) : null);

async function readJob(url, id) {
  const response = await fetch(`${url}/v1/jobs/${id}`, { signal: AbortSignal.timeout(5000) }).catch(() => null);
  return response?.ok ? response.json() : null;
}

async function runPhase(phase) {
  const dir = join(FAULT_TASKS_DIR, phase);
  if (phase === 'import-main') {
    try {
      const server = await startKiln({ env: { KILN_TASKS_DIR: dir } });
      await server.stop();
      return { phase, started: true, message: 'the server started with a module that throws at import' };
    } catch (error) {
      const line = error.message.split('\n').find((l) => l.startsWith('kiln:')) ?? error.message.split('\n')[0];
      return { phase, started: false, message: line };
    }
  }
  const server = await startKiln({ threads: 2, env: { KILN_TASKS_DIR: dir, KILN_THREAD_MAX_MEMORY_MB: '64' } });
  try {
    const jobs = [];
    const bad = BAD[phase];
    const every = Math.max(1, Math.floor(ORDINARY / (bad.length + 1)));
    for (let i = 0, b = 0; i < ORDINARY || b < bad.length; i++) {
      if (i % every === every - 1 && b < bad.length) jobs.push({ type: bad[b++], ordinary: false });
      if (i < ORDINARY) jobs.push({ type: 'cpu.spin', payload: { ms: 5 }, ordinary: true });
    }
    const response = await fetch(`${server.url}/v1/jobs/batch`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        jobs: jobs.map(({ type, payload }) => ({ type, payload, maxAttempts: 1, timeoutMs: 3000 })),
      }),
      signal: AbortSignal.timeout(10_000),
    });
    if (response.status !== 201) throw new Error(`the batch was answered ${response.status}: ${await response.text()}`);
    const ids = (await response.json()).jobs.map((j) => j.id);
    const until = Date.now() + (tiny ? 30_000 : 90_000);
    let read = [];
    while (Date.now() < until) {
      read = await Promise.all(ids.map((id) => readJob(server.url, id)));
      if (read.every((job) => job !== null && TERMINAL.has(job.status))) break;
      if (server.child.exitCode !== null || server.child.signalCode !== null) break;
      await sleep(500);
    }
    const alive = server.child.exitCode === null && server.child.signalCode === null;
    const ordinary = { submitted: ORDINARY, completed: 0, failed: {}, unfinished: 0, examples: [] };
    const outcomes = [];
    jobs.forEach((job, i) => {
      const got = read[i] ?? null;
      if (job.ordinary) {
        if (got?.status === 'completed') ordinary.completed++;
        else if (got !== null && TERMINAL.has(got.status)) {
          const key = got.error?.code ?? got.status;
          ordinary.failed[key] = (ordinary.failed[key] ?? 0) + 1;
          if (ordinary.examples.length < 3) ordinary.examples.push(oneLine(got.error?.message));
        } else ordinary.unfinished++;
      } else {
        outcomes.push({
          type: job.type,
          status: got?.status ?? (alive ? 'unread' : 'server dead'),
          code: got?.error?.code ?? null,
          message:
            oneLine(got?.error?.message) ??
            (got?.status === 'completed' ? JSON.stringify(got.result)?.slice(0, 60) : null),
        });
      }
    });
    return {
      phase,
      alive,
      ordinary,
      outcomes,
      exit: alive ? null : (server.child.exitCode ?? server.child.signalCode),
    };
  } finally {
    await server.stop();
  }
}

await finish('handlers', async () => {
  const results = [];
  for (const phase of phases) results.push(await runPhase(phase));
  printTable(
    'Misbehaving handlers beside ordinary jobs',
    ['phase', 'server alive', 'ordinary completed', 'ordinary failed', 'ordinary unfinished'],
    results.map((r) =>
      r.phase === 'import-main'
        ? [r.phase, r.started ? 'started' : 'refused to start', '—', '—', '—']
        : [
            r.phase,
            r.alive ? 'yes' : `no (${r.exit})`,
            `${r.ordinary.completed} / ${r.ordinary.submitted}`,
            JSON.stringify(r.ordinary.failed),
            r.ordinary.unfinished,
          ],
    ),
  );
  printTable(
    'What each bad job was charged',
    ['job', 'status', 'error code', 'message or result'],
    results.flatMap((r) =>
      r.phase === 'import-main'
        ? [['(module throws at import)', r.started ? 'started' : 'refused', '—', r.message.slice(0, 100)]]
        : r.outcomes.map((o) => [o.type, o.status, o.code ?? '—', o.message ?? '—']),
    ),
  );
  for (const r of results) {
    for (const example of r.ordinary?.examples ?? []) console.log(`an ordinary job of ${r.phase} failed: ${example}`);
  }
  return { size: values.size, parameters: { ordinary: ORDINARY, threads: 2, threadMaxMemoryMb: 64 }, phases: results };
});
