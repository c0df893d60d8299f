/**
 * SIGKILL of a SQLite server under load, again and again on the same file: each round
 * starts the server, runs the mixed load (lib/mixed-load.mjs: single and batch
 * submissions of fault.mark jobs, 4 lanes) for a seeded random 0.5–2 s (0.2–0.5 s at the
 * tiny size), kills it with SIGKILL while requests and jobs are in flight, and starts it
 * again. After the last round the server runs until the queue is idle, and every job
 * answered 201 is read back.
 *
 * Figures: accepted jobs lost (404 after the restarts), jobs left unfinished, attempts
 * the store counted whose handler never started (no start mark), and the restart time:
 * spawn → /health answering, and spawn → /ready answering, p50 and max.
 *
 *   node bench/faults/kill-sqlite.mjs [--size tiny|full] [--kills N] [--seed S]
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { freePort } from '../lib/processes.mjs';
import { printTable } from '../lib/report.mjs';
import { finish, median, runDirectory } from './lib/fault-report.mjs';
import { auditJobs, waitIdle } from './lib/job-audit.mjs';
import { killHard, msUntilOk, startFaultServer } from './lib/kiln-fault-server.mjs';
import { seededRandom, startMixedLoad } from './lib/mixed-load.mjs';

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: 'full' },
    kills: { type: 'string' },
    seed: { type: 'string', default: '1' },
  },
  strict: true,
});
const tiny = values.size === 'tiny';
const kills = Number(values.kills ?? (tiny ? 3 : 20));
const seed = Number(values.seed);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

await finish('kill-sqlite', async () => {
  const dir = runDirectory();
  const marks = join(dir, 'marks');
  const port = await freePort();
  const random = seededRandom(seed);
  const restarts = [];
  const answers = {};
  const accepted = [];
  let server = null;
  try {
    for (let round = 0; round <= kills; round++) {
      const started = await startFaultServer({ marks, dir, port });
      server = started.server;
      const readyMs = await msUntilOk(server.url, '/ready', 30_000);
      if (round > 0)
        restarts.push({ healthMs: started.healthMs, readyMs: readyMs === null ? null : started.healthMs + readyMs });
      if (round === kills) break;
      const load = startMixedLoad({ urls: [server.url], seed: seed * 1000 + round });
      await sleep(tiny ? 200 + random() * 300 : 500 + random() * 1500);
      await killHard(server);
      await load.stop();
      accepted.push(...load.accepted);
      for (const [key, n] of Object.entries(load.answers)) answers[key] = (answers[key] ?? 0) + n;
    }
    const idle = await waitIdle(server.url, tiny ? 60_000 : 180_000);
    const audit = await auditJobs(server.url, accepted, marks);
    const health = restarts.map((r) => r.healthMs);
    const ready = restarts.map((r) => r.readyMs);
    printTable(
      `SIGKILL of a SQLite server under load, ${kills} times`,
      [
        'accepted',
        'lost',
        'unfinished',
        'completed',
        'failed',
        'attempts',
        'no start',
        'health p50/max ms',
        'ready p50/max ms',
      ],
      [
        [
          audit.accepted,
          audit.lost,
          audit.unfinished,
          audit.completed,
          audit.failed,
          audit.attempts,
          audit.attemptsWithoutStart,
          `${median(health).toFixed(0)} / ${Math.max(...health).toFixed(0)}`,
          `${median(ready).toFixed(0)} / ${Math.max(...ready).toFixed(0)}`,
        ],
      ],
    );
    console.log(`answers during the load: ${JSON.stringify(answers)}; idle at the end: ${idle}`);
    return {
      size: values.size,
      parameters: { kills, seed, threads: 2, store: 'sqlite (KILN_SQLITE_SYNC=full)' },
      ...audit,
      idleAtEnd: idle,
      restartHealthMsP50: median(health),
      restartHealthMsMax: Math.max(...health),
      restartReadyMsP50: median(ready),
      restartReadyMsMax: Math.max(...ready),
      answers,
    };
  } finally {
    if (server !== null) await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
