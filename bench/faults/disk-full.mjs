/**
 * The SQLite disk full: a Kiln server whose file lives on a small tmpfs of its own
 * (mounted by this script, so it needs root; the server's log is elsewhere), filled by a filler file that leaves
 * `--headroom-kib` free and by the jobs themselves (fault.mark jobs with a 2 KB pad,
 * submitted until writes are refused). While the disk is full it counts, for
 * `--full-s` seconds (5; 2 at the tiny size): reads (GET /v1/jobs/{id} of accepted jobs
 * and GET /v1/queue) answering 200 against failing, writes answered 503 against anything
 * else, and /ready. Then it removes the filler and measures the time until a write is
 * accepted again, waits until the queue is idle and reads back every job answered 201.
 *
 *   node bench/faults/disk-full.mjs [--size tiny|full] [--full-s S]
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { printTable } from '../lib/report.mjs';
import { finish } from './lib/fault-report.mjs';
import { auditJobs, waitIdle } from './lib/job-audit.mjs';
import { startFaultServer } from './lib/kiln-fault-server.mjs';

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: 'full' },
    'full-s': { type: 'string' },
    'headroom-kib': { type: 'string', default: '512' },
  },
  strict: true,
});
const tiny = values.size === 'tiny';
const fullMs = Number(values['full-s'] ?? (tiny ? 2 : 5)) * 1000;
const TMPFS_MIB = 32;
const { AbortSignal } = globalThis;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pad = 'x'.repeat(2000);

async function call(url, path, body) {
  try {
    const response = await fetch(`${url}${path}`, {
      method: body === undefined ? 'GET' : 'POST',
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(5000),
    });
    const answer = await response.json().catch(() => null);
    return { status: response.status, code: answer?.code ?? null, answer };
  } catch (error) {
    return { status: 0, code: error.name === 'TimeoutError' ? 'timeout' : (error.cause?.code ?? error.name) };
  }
}

await finish('disk-full', async () => {
  if (process.getuid?.() !== 0) throw new Error('mounting a tmpfs needs root');
  const mount = mkdtempSync(join(tmpdir(), 'kiln-fault-tmpfs-'));
  const marks = join(tmpdir(), `kiln-fault-marks-${process.pid}`);
  const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${TMPFS_MIB}m`, 'tmpfs', mount], { encoding: 'utf8' });
  if (mounted.status !== 0) {
    rmSync(mount, { recursive: true, force: true });
    throw new Error(`mount -t tmpfs failed: ${mounted.stderr.trim()}`);
  }
  const unmount = () => {
    // Lazy: on an interrupted run the server may not have exited yet.
    spawnSync('umount', ['-l', mount]);
    rmSync(mount, { recursive: true, force: true });
    rmSync(marks, { force: true });
  };
  // Also when the run is interrupted (SIGINT and SIGTERM end it through process.exit).
  process.once('exit', unmount);
  let server = null;
  try {
    // The log stays off the full disk: only the SQLite file lives on the tmpfs.
    ({ server } = await startFaultServer({ marks, env: { KILN_STORE: `sqlite:${join(mount, 'kiln.db')}` } }));
    const accepted = [];
    const filler = join(mount, 'filler');
    const { bavail, bsize } = statfsSync(mount);
    writeFileSync(filler, Buffer.alloc(Math.max(0, bavail * bsize - Number(values['headroom-kib']) * 1024)));
    // Fill what is left with jobs until writes are refused.
    const job = () => ({ type: 'fault.mark', payload: { ms: 0, pad } });
    let refusedAt = null;
    for (let i = 0; i < 5000 && refusedAt === null; i++) {
      const r = await call(server.url, '/v1/jobs/batch', { jobs: Array.from({ length: 20 }, job) });
      if (r.status === 201) accepted.push(...r.answer.jobs.map((j) => j.id));
      else refusedAt = r;
    }
    if (refusedAt === null) throw new Error('the disk never filled');
    const full = {
      firstRefusal: `${refusedAt.status} ${refusedAt.code}`,
      reads: { ok: 0, failed: 0, failures: {} },
      writes: { 503: 0, other: 0, others: {} },
      ready: {},
    };
    const until = Date.now() + fullMs;
    let n = 0;
    while (Date.now() < until) {
      const id = accepted[n++ % accepted.length];
      for (const path of [`/v1/jobs/${id}`, '/v1/queue']) {
        const r = await call(server.url, path);
        if (r.status === 200) full.reads.ok++;
        else {
          full.reads.failed++;
          const key = `${path === '/v1/queue' ? 'queue' : 'job'} ${r.status} ${r.code}`;
          full.reads.failures[key] = (full.reads.failures[key] ?? 0) + 1;
        }
      }
      const w = await call(server.url, '/v1/jobs', job());
      if (w.status === 503) full.writes[503]++;
      else {
        full.writes.other++;
        const key = `${w.status} ${w.code}`;
        full.writes.others[key] = (full.writes.others[key] ?? 0) + 1;
        if (w.status === 201) accepted.push(w.answer.id);
      }
      const ready = await call(server.url, '/ready');
      full.ready[ready.status] = (full.ready[ready.status] ?? 0) + 1;
      await sleep(20);
    }
    rmSync(filler);
    const t0 = performance.now();
    let recoveredMs = null;
    while (performance.now() - t0 < 30_000 && recoveredMs === null) {
      const w = await call(server.url, '/v1/jobs', job());
      if (w.status === 201) {
        recoveredMs = performance.now() - t0;
        accepted.push(w.answer.id);
      } else await sleep(50);
    }
    const idle = await waitIdle(server.url, tiny ? 5000 : 60_000);
    const alive = (await call(server.url, '/health')).status === 200;
    if (!alive) throw new Error(`the server died; its log ends:\n${server.logTail()}`);
    const audit = await auditJobs(server.url, accepted, marks);
    printTable(
      `SQLite disk full (${TMPFS_MIB} MiB tmpfs), ${fullMs / 1000} s full`,
      [
        'first refusal',
        'reads ok',
        'reads failed',
        'writes 503',
        'writes other',
        '/ready',
        'space back → 201 ms',
        'accepted',
        'lost',
        'unfinished',
      ],
      [
        [
          full.firstRefusal,
          full.reads.ok,
          `${full.reads.failed}${full.reads.failed > 0 ? ` ${JSON.stringify(full.reads.failures)}` : ''}`,
          full.writes[503],
          `${full.writes.other}${full.writes.other > 0 ? ` ${JSON.stringify(full.writes.others)}` : ''}`,
          JSON.stringify(full.ready),
          recoveredMs === null ? 'never' : recoveredMs.toFixed(0),
          audit.accepted,
          audit.lost,
          audit.unfinished,
        ],
      ],
    );
    console.log(`server alive at the end: ${alive}; idle: ${idle}`);
    return {
      size: values.size,
      parameters: { tmpfsMiB: TMPFS_MIB, fullMs },
      full,
      recoveredMs,
      serverAlive: alive,
      idleAtEnd: idle,
      ...audit,
    };
  } finally {
    await server?.stop();
    unmount();
  }
});
