/**
 * PostgreSQL lost under load, without restarting Kiln: one Kiln server on a private
 * PostgreSQL cluster (lib/private-postgres.mjs: initdb in a temp directory, another port;
 * the shared server is never touched) under the mixed load (lib/mixed-load.mjs) and two
 * long jobs running across each outage, through two outages of `--outage-s` seconds each
 * (10; 3 at the tiny size), three times the server's node lease (KILN_NODE_LEASE_MS is
 * set to a third of the outage): first PostgreSQL stopped (pg_ctl stop -m immediate),
 * then its postmaster killed with SIGKILL (the backends then exit on their own); after
 * each, PostgreSQL is started again.
 *
 * Figures, for each outage: the answers from the fault until the server healed, as
 * `503 store_unavailable`, `201` and anything else (other statuses, refused or reset
 * connections, timeouts); the heal time: PostgreSQL accepting connections again → /ready
 * answering 200 and → the first 201 of a probe submission; after both, every job answered
 * 201 read back (lost, unfinished) as in the kill runs, and the handlers run twice on a
 * live server (the server is never restarted, so a job whose handler it started twice
 * was run again though nobody died: an outage must undo nothing). The run fails on any
 * such job. Needs root and the PostgreSQL server binaries; without them it says so and
 * exits 1.
 *
 *   node bench/faults/pg-outage.mjs [--size tiny|full] [--outage-s S] [--seed S]
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { printTable } from '../lib/report.mjs';
import { finish, runDirectory } from './lib/fault-report.mjs';
import { auditJobs, waitIdle } from './lib/job-audit.mjs';
import { msUntilOk, startFaultServer } from './lib/kiln-fault-server.mjs';
import { startMixedLoad } from './lib/mixed-load.mjs';
import { createPrivatePostgres, privatePostgresUnavailable } from './lib/private-postgres.mjs';

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: 'full' },
    'outage-s': { type: 'string' },
    seed: { type: 'string', default: '1' },
  },
  strict: true,
});
const tiny = values.size === 'tiny';
const outageMs = Number(values['outage-s'] ?? (tiny ? 3 : 10)) * 1000;
const { AbortSignal } = globalThis;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Submits one job (spinning `ms`) every 50 ms until one is answered 201; answers [ms, id] or [null, null]. */
async function msUntilAccepted(url, timeoutMs, ms = 0) {
  const t0 = performance.now();
  while (performance.now() - t0 < timeoutMs) {
    const response = await fetch(`${url}/v1/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'fault.mark', payload: { ms }, priority: ms > 0 ? 9 : 5 }),
      signal: AbortSignal.timeout(2000),
    }).catch(() => null);
    const answer = await response?.json().catch(() => null);
    if (response?.status === 201) return [performance.now() - t0, answer.id];
    await sleep(50);
  }
  return [null, null];
}

/** The answers counted between two copies of the load's counts, in three kinds. */
function answersBetween(before, after) {
  const kinds = { 'store_unavailable 503': 0, 201: 0, other: 0, otherByKind: {} };
  for (const [key, n] of Object.entries(after)) {
    const d = n - (before[key] ?? 0);
    if (d === 0) continue;
    if (key === '503 store_unavailable') kinds['store_unavailable 503'] += d;
    else if (key === '201') kinds[201] += d;
    else {
      kinds.other += d;
      kinds.otherByKind[key] = d;
    }
  }
  return kinds;
}

await finish('pg-outage', async () => {
  const unavailable = privatePostgresUnavailable();
  if (unavailable !== null) throw new Error(`cannot make a private PostgreSQL here: ${unavailable}`);
  const cluster = await createPrivatePostgres();
  const dir = runDirectory();
  const marks = join(dir, 'marks');
  let server = null;
  let load = null;
  try {
    ({ server } = await startFaultServer({
      marks,
      store: 'postgres',
      pg: { url: cluster.url, schema: 'kiln' },
      dir,
      env: { KILN_NODE_LEASE_MS: String(Math.max(50, Math.floor(outageMs / 3))) },
    }));
    load = startMixedLoad({ urls: [server.url], seed: Number(values.seed) });
    const outages = [];
    const probes = [];
    const long = [];
    for (const kind of ['stop', 'kill']) {
      // Long jobs that run across the outage: one and a half outages of CPU each.
      for (let i = 0; i < 2; i++) {
        const [, id] = await msUntilAccepted(server.url, 10_000, Math.floor(outageMs * 1.5));
        if (id !== null) long.push(id);
      }
      await sleep(tiny ? 1000 : 3000);
      const before = { ...load.answers };
      if (kind === 'stop') {
        const stopped = cluster.stop();
        if (!stopped.ok) throw new Error(`pg_ctl stop failed: ${stopped.output}`);
      } else {
        cluster.killPostmaster();
      }
      await sleep(outageMs);
      // A killed postmaster's backends hold its shared memory until they exit.
      for (let i = 0; i < 100 && cluster.orphansAlive() > 0; i++) await sleep(100);
      let back = cluster.start();
      for (let i = 0; i < 5 && !back.ok; i++) {
        await sleep(1000);
        back = cluster.start();
      }
      if (!back.ok) throw new Error(`PostgreSQL did not start again: ${back.output.slice(-1000)}`);
      const [readyMs, acceptedMs] = await Promise.all([
        msUntilOk(server.url, '/ready', 60_000),
        msUntilAccepted(server.url, 60_000).then(([ms, id]) => {
          if (id !== null) probes.push(id);
          return ms;
        }),
      ]);
      outages.push({
        kind,
        outageMs,
        healReadyMs: readyMs,
        healAcceptedMs: acceptedMs,
        ...answersBetween(before, load.answers),
      });
    }
    await load.stop();
    const alive = (await fetch(`${server.url}/health`).catch(() => null))?.ok === true;
    const idle = await waitIdle(server.url, tiny ? 60_000 : 180_000);
    const audit = await auditJobs(server.url, [...load.accepted, ...probes, ...long], marks);
    const ms = (v) => (v === null ? 'never' : v.toFixed(0));
    printTable(
      `PostgreSQL lost under load, ${outageMs / 1000} s each time, Kiln not restarted`,
      ['outage', '503 store_unavailable', '201', 'other', 'heal → /ready ms', 'heal → 201 ms'],
      outages.map((o) => [
        o.kind === 'stop' ? 'pg_ctl stop -m immediate' : 'postmaster SIGKILL',
        o['store_unavailable 503'],
        o[201],
        `${o.other}${o.other > 0 ? ` ${JSON.stringify(o.otherByKind)}` : ''}`,
        ms(o.healReadyMs),
        ms(o.healAcceptedMs),
      ]),
    );
    console.log(
      `server alive at the end: ${alive}; idle: ${idle}; accepted ${audit.accepted}, lost ${audit.lost}, unfinished ${audit.unfinished}, attempts without a start ${audit.attemptsWithoutStart}, handlers run twice on a live server ${audit.runTwiceOnLiveServer}`,
    );
    if (audit.runTwiceOnLiveServer > 0) {
      throw new Error(
        `${audit.runTwiceOnLiveServer} handlers run twice on a live server: ${audit.examples.runTwiceOnLiveServer.join('; ')}`,
      );
    }
    return {
      size: values.size,
      parameters: { outageMs, seed: Number(values.seed) },
      outages,
      serverAlive: alive,
      idleAtEnd: idle,
      ...audit,
    };
  } finally {
    await load?.stop();
    await server?.stop();
    cluster.remove();
    rmSync(dir, { recursive: true, force: true });
  }
});
