/**
 * SIGKILL of one of two servers sharing a PostgreSQL schema, under load, again and again:
 * each round runs the mixed load (lib/mixed-load.mjs) on both servers for a seeded random
 * 0.5–2 s (0.2–0.5 s at the tiny size), kills one of them (they take turns) with SIGKILL,
 * keeps the load on the survivor while it waits for the killed node to leave the
 * survivor's GET /v1/nodes, and starts the killed one again. KILN_LEASE_MS is 5 s (2 s at
 * the tiny size) so that a round lasts seconds, not the default 30 s. After the last
 * round the servers run until the queue is idle and every job answered 201 is read back.
 *
 * Figures: accepted jobs lost, unfinished, attempts counted without a handler start (as
 * kill-sqlite.mjs); takeover time: for each job whose handler was running on the killed
 * server when it was killed (a start mark of its pid without an end), kill → the start
 * of its next attempt on the other server, p50 and max, and how many were never taken
 * over; rescue time: kill → the store no longer holding that attempt as running (the
 * survivor's rescuer retried it), polled every 100 ms, which leaves out the wait in the
 * queue that the takeover includes; node-leave time: kill → the killed node gone from the survivor's /v1/nodes;
 * restart time (spawn → /health) p50. Needs PostgreSQL (BENCH_PG_URL, else the local
 * server); the schema is `kiln_fault_<pid>_<hex>`, dropped at the end.
 *
 *   node bench/faults/kill-postgres.mjs [--size tiny|full] [--kills N] [--seed S] [--default-leases]
 *
 * --default-leases leaves the lease settings as shipped (KILN_LEASE_MS 30 s,
 * KILN_NODE_LEASE_MS 6 s): the takeover a default cluster gets.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { dropSchema, dropStaleSchemas, freshSchemaName, PG_URL, requirePostgres } from '../lib/postgres.mjs';
import { freePort } from '../lib/processes.mjs';
import { printTable } from '../lib/report.mjs';
import { finish, median, runDirectory } from './lib/fault-report.mjs';
import { auditJobs, readMarks, waitIdle } from './lib/job-audit.mjs';
import { killHard, startFaultServer } from './lib/kiln-fault-server.mjs';
import { seededRandom, startMixedLoad } from './lib/mixed-load.mjs';

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: 'full' },
    kills: { type: 'string' },
    seed: { type: 'string', default: '1' },
    'default-leases': { type: 'boolean', default: false },
  },
  strict: true,
});
const tiny = values.size === 'tiny';
const kills = Number(values.kills ?? (tiny ? 1 : 10));
const seed = Number(values.seed);
// --default-leases: the servers keep KILN_LEASE_MS and KILN_NODE_LEASE_MS as shipped (30 s, 6 s).
const defaultLeases = values['default-leases'];
const leaseMs = defaultLeases ? 30_000 : tiny ? 2000 : 5000;
const SCHEMA_PREFIX = 'kiln_fault';
const { AbortSignal } = globalThis;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls the survivor's /v1/nodes until no node has `pid`; answers ms since `since`, or null past the bound. */
async function nodeLeaveMs(url, pid, since, boundMs) {
  while (Date.now() - since < boundMs) {
    const response = await fetch(`${url}/v1/nodes`, { signal: AbortSignal.timeout(2000) }).catch(() => null);
    if (response?.ok) {
      const { nodes } = await response.json();
      if (!nodes.some((node) => node.pid === pid)) return Date.now() - since;
    }
    await sleep(100);
  }
  return null;
}

/** The jobs whose handler was running on `pid` at `at` (a start mark without an end): [{ job, attempt }]. */
function runningOn(marksPath, pid, at) {
  const { starts, ends } = readMarks(marksPath);
  const running = [];
  for (const [job, list] of starts) {
    for (const s of list) {
      const ended = (ends.get(job) ?? []).some((e) => e.attempt === s.attempt);
      if (s.pid === pid && s.at <= at && !ended) running.push({ job, attempt: s.attempt });
    }
  }
  return running;
}

/**
 * Polls each job every 100 ms until the store no longer has it running its killed
 * attempt (rescued: retrying, queued, or running a later attempt); answers ms since `at`
 * for each, null for those still held after the bound.
 */
async function rescueMs(url, running, at, boundMs) {
  return Promise.all(
    running.map(async ({ job, attempt }) => {
      while (Date.now() - at < boundMs) {
        const response = await fetch(`${url}/v1/jobs/${job}`, { signal: AbortSignal.timeout(2000) }).catch(() => null);
        if (response?.ok) {
          const read = await response.json();
          if (read.status !== 'running' || read.attempts > attempt) return Date.now() - at;
        }
        await sleep(100);
      }
      return null;
    }),
  );
}

/** Takeover of the jobs running on each killed server: kill → next attempt's start, from the marks. */
function takeovers(marksPath, killed) {
  const { starts, ends } = readMarks(marksPath);
  const times = [];
  let never = 0;
  for (const { pid, at } of killed) {
    for (const [job, list] of starts) {
      const running = list.find(
        (s) => s.pid === pid && s.at <= at && !(ends.get(job) ?? []).some((e) => e.attempt === s.attempt && e.at <= at),
      );
      if (running === undefined) continue;
      // The next start of the job, whatever its attempt number: an attempt given back
      // uncounted (its start not yet recorded when the server died) runs again as the same attempt.
      const next = list.find((s) => s.at > running.at && s !== running);
      if (next === undefined) never++;
      else times.push(next.at - at);
    }
  }
  return { times, never };
}

await finish('kill-postgres', async () => {
  await requirePostgres();
  await dropStaleSchemas([SCHEMA_PREFIX]);
  const schema = freshSchemaName(SCHEMA_PREFIX);
  const dir = runDirectory();
  const marks = join(dir, 'marks');
  const random = seededRandom(seed);
  const slots = [
    { dir: mkdtempSync(join(dir, 'a-')), port: await freePort(), server: null },
    { dir: mkdtempSync(join(dir, 'b-')), port: await freePort(), server: null },
  ];
  const start = async (slot) => {
    const started = await startFaultServer({
      marks,
      store: 'postgres',
      pg: { url: PG_URL, schema },
      dir: slot.dir,
      port: slot.port,
      env: defaultLeases ? {} : { KILN_LEASE_MS: String(leaseMs) },
    });
    slot.server = started.server;
    return started.healthMs;
  };
  const accepted = [];
  const answers = {};
  const collect = (load) => {
    accepted.push(...load.accepted);
    for (const [key, n] of Object.entries(load.answers)) answers[key] = (answers[key] ?? 0) + n;
  };
  const killed = [];
  const leaves = [];
  const rescues = [];
  const restarts = [];
  try {
    // One at a time: the first applies the migrations.
    await start(slots[0]);
    await start(slots[1]);
    for (let round = 0; round < kills; round++) {
      const load = startMixedLoad({ urls: slots.map((s) => s.server.url), seed: seed * 1000 + round });
      await sleep(tiny ? 200 + random() * 300 : 500 + random() * 1500);
      const victim = slots[round % 2];
      const survivor = slots[(round + 1) % 2];
      const pid = victim.server.pid;
      const at = Date.now();
      await killHard(victim.server);
      killed.push({ pid, at });
      const running = runningOn(marks, pid, at);
      await load.stop();
      collect(load);
      const survivorLoad = startMixedLoad({ urls: [survivor.server.url], seed: seed * 1000 + round + 500 });
      const [left, rescued] = await Promise.all([
        nodeLeaveMs(survivor.server.url, pid, at, 3 * leaseMs + 30_000),
        rescueMs(survivor.server.url, running, at, 3 * leaseMs + 30_000),
      ]);
      leaves.push(left);
      rescues.push(...rescued);
      await survivorLoad.stop();
      collect(survivorLoad);
      await victim.server.stop();
      restarts.push(await start(victim));
    }
    const idle = await waitIdle(slots[0].server.url, tiny ? 60_000 : 180_000);
    const audit = await auditJobs(slots[0].server.url, accepted, marks);
    const takeover = takeovers(marks, killed);
    const left = leaves.filter((ms) => ms !== null);
    const rescued = rescues.filter((ms) => ms !== null);
    const fmt = (list) => (list.length === 0 ? 'n/a' : `${median(list).toFixed(0)} / ${Math.max(...list).toFixed(0)}`);
    printTable(
      `SIGKILL of one of two servers on one PostgreSQL schema, ${kills} times (${defaultLeases ? 'default leases' : `KILN_LEASE_MS=${leaseMs}`})`,
      [
        'accepted',
        'lost',
        'unfinished',
        'attempts',
        'no start',
        'rescue p50/max ms',
        'takeover p50/max ms',
        'never taken',
        'node leaves p50/max ms',
        'restart p50 ms',
      ],
      [
        [
          audit.accepted,
          audit.lost,
          audit.unfinished,
          audit.attempts,
          audit.attemptsWithoutStart,
          `${fmt(rescued)} (${rescued.length} jobs${rescued.length < rescues.length ? `, ${rescues.length - rescued.length} never` : ''})`,
          `${fmt(takeover.times)} (${takeover.times.length} jobs)`,
          takeover.never,
          `${fmt(left)}${left.length < leaves.length ? ` (${leaves.length - left.length} never)` : ''}`,
          median(restarts).toFixed(0),
        ],
      ],
    );
    console.log(`answers during the load: ${JSON.stringify(answers)}; idle at the end: ${idle}`);
    return {
      size: values.size,
      parameters: { kills, seed, leaseMs, threadsPerServer: 2, servers: 2 },
      ...audit,
      idleAtEnd: idle,
      rescueMsP50: median(rescued),
      rescueMsMax: rescued.length === 0 ? null : Math.max(...rescued),
      rescueJobs: rescues.length,
      notRescued: rescues.length - rescued.length,
      takeoverMsP50: median(takeover.times),
      takeoverMsMax: takeover.times.length === 0 ? null : Math.max(...takeover.times),
      takeoverJobs: takeover.times.length,
      neverTakenOver: takeover.never,
      nodeLeaveMs: leaves,
      restartHealthMsP50: median(restarts),
      answers,
    };
  } finally {
    for (const slot of slots) await slot.server?.stop();
    rmSync(dir, { recursive: true, force: true });
    await dropSchema(schema);
  }
});
