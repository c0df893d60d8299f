import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { killAllKilns, type KilnProcess, spawnKiln } from '../support/kiln-process.js';
import { pollUntil } from '../support/poll.js';
import { connect, createAttemptsTable, dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';

/**
 * Three real server processes on one PostgreSQL schema run a few thousand jobs of mixed
 * kinds; one is SIGKILLed while it runs attempts. Each attempt records its start and end
 * (by the database's clock) in a table of the test's own, so what really ran is known
 * independently of Kiln's own bookkeeping.
 */
const LEASE_MS = 5000;
const JOBS = 3000;
/**
 * An attempt's outcome is written after its handler returns (with the server's next group
 * of finishes), so a handler of the victim that ended just before the kill may have died
 * with its outcome unwritten, and runs again like one cut off (at-least-once). Outcomes are
 * written within milliseconds; this bound is far beyond that even on a loaded machine.
 */
const UNWRITTEN_OUTCOME_MS = 2000;

describe('cluster: three servers on one PostgreSQL database, one SIGKILLed mid-run', () => {
  const schema = freshSchemaName();
  const table = `public.${schema}_attempts`;
  after(async () => {
    await killAllKilns();
    await dropSchema(schema);
    const client = await connect();
    await client.query(`DROP TABLE IF EXISTS ${table}`).finally(() => client.end());
  });

  it(
    'ends every accepted job completed, re-runs only the dead server’s attempts, never overlaps two live attempts',
    { timeout: 300_000 },
    async (t) => {
      const db = await connect();
      try {
        await createAttemptsTable(db, table);
        const env = {
          KILN_STORE: TEST_PG_URL,
          KILN_PG_SCHEMA: schema,
          KILN_PG_POOL_SIZE: '4',
          KILN_LEASE_MS: String(LEASE_MS),
          KILN_THREADS: '2',
        };
        const servers: KilnProcess[] = [];
        // One at a time: the first applies the migrations, the others find them done.
        for (let i = 0; i < 3; i++) servers.push(await spawnKiln(env));
        const [a, victim, c] = servers as [KilnProcess, KilnProcess, KilnProcess];
        const victimPid = victim.child.pid as number;

        // Mixed work in batches of 100, spread over the three servers: quick jobs, CPU-bound
        // ones, some that fail their first attempt, and chains (each tenth job depends on
        // the one before it in its batch).
        const accepted: string[] = [];
        const submitBatch = async (server: KilnProcess, batch: number) => {
          const jobs = Array.from({ length: 100 }, (_, i) => {
            const n = batch * 100 + i;
            return {
              type: 'test.record',
              ref: `j${i}`,
              priority: n % 10,
              payload: {
                url: TEST_PG_URL,
                table,
                // Mostly short; one in 97 spins 300 ms, so the kill can find an attempt in the middle of its work.
                spinMs: n % 97 === 0 ? 300 : n % 3 === 0 ? 2 + (n % 7) : 0,
                failOnce: n % 17 === 0,
              },
              ...(i % 10 === 9 ? { dependsOn: [`ref:j${i - 1}`] } : {}),
            };
          });
          const response = await server.request('POST', '/v1/jobs/batch', { jobs });
          assert.equal(response.status, 201, JSON.stringify(response.body));
          for (const job of response.body.jobs) accepted.push(job.id);
        };
        const batches = JOBS / 100;
        for (let batch = 0; batch < batches / 2; batch++) await submitBatch(servers[batch % 3] as KilnProcess, batch);

        // The victim dies while it runs attempts: wait until the table shows one of its long
        // ones (a 300 ms spin) open for 30 ms, so the kill lands well before it could end.
        await pollUntil(
          async () =>
            (
              await db.query(
                `SELECT count(*)::int AS n FROM ${table}
                 WHERE pid = $1 AND spin_ms >= 300 AND ended_at IS NULL
                   AND started_at < clock_timestamp() - interval '30 ms'
                   AND started_at > clock_timestamp() - interval '200 ms'`,
                [victimPid],
              )
            ).rows[0]?.n ?? 0,
          (n) => n > 0,
          { what: 'a long attempt of the victim open for 30 ms', deadlineMs: 60_000, everyMs: 5 },
        );
        victim.child.kill('SIGKILL');
        await victim.exited;
        const killedAt = (await db.query<{ at: Date }>('SELECT clock_timestamp() AS at')).rows[0]?.at as Date;
        const live = [a, c];
        for (let batch = batches / 2; batch < batches; batch++)
          await submitBatch(live[batch % 2] as KilnProcess, batch);
        assert.equal(accepted.length, JOBS);

        // Until every accepted job has ended (the live servers rescue the dead one's attempts).
        await pollUntil(
          async () => (await a.request('GET', '/v1/queue')).body,
          (queue) => queue.pending === 0 && (queue.byStatus as Record<string, number>).running === 0,
          { what: 'every accepted job to end', deadlineMs: 120_000 },
        );

        // Every accepted job completed; none lost.
        const statuses = await db.query<{ status: string; n: number }>(
          `SELECT status, count(*)::int AS n FROM (
             SELECT status FROM "${schema}".jobs WHERE id = ANY($1::uuid[])
             UNION ALL SELECT status FROM "${schema}".jobs_done WHERE id = ANY($1::uuid[])) j GROUP BY status`,
          [accepted],
        );
        assert.deepEqual(
          statuses.rows.map((row) => [row.status, row.n]),
          [['completed', JOBS]],
        );

        const attempts = (
          await db.query<{ job_id: string; attempt: number; pid: number; started_at: Date; ended_at: Date | null }>(
            `SELECT job_id::text AS job_id, attempt, pid, started_at, ended_at FROM ${table} ORDER BY job_id, started_at`,
          )
        ).rows;
        const byJob = new Map<string, typeof attempts>();
        for (const row of attempts) {
          const list = byJob.get(row.job_id) ?? [];
          list.push(row);
          byJob.set(row.job_id, list);
        }
        assert.equal(byJob.size, JOBS, 'every job ran at least once');

        let reRun = 0;
        let overlaps = 0;
        let interrupted = 0;
        for (const [, runs] of byJob) {
          // Attempts that never recorded an end were cut off by the kill: only the victim's.
          for (const run of runs) {
            if (run.ended_at !== null) continue;
            interrupted++;
            assert.equal(run.pid, victimPid, `an attempt on a live server (${run.pid}) never ended`);
          }
          // A job's attempts beyond the ones it was built for (one, or two for failOnce):
          // each extra run must follow one the victim was running when it died.
          const planned = runs.some(
            (run) => run.attempt === 2 && runs.some((r) => r.attempt === 1 && r.ended_at !== null),
          )
            ? runs.length
            : 1;
          const cut = runs.filter((run) => run.ended_at === null).length;
          // Runs of the victim that ended just before the kill and were followed by another.
          const unwritten = runs.filter(
            (run, i) =>
              i < runs.length - 1 &&
              run.pid === victimPid &&
              run.ended_at !== null &&
              run.ended_at.getTime() > killedAt.getTime() - UNWRITTEN_OUTCOME_MS,
          ).length;
          if (runs.length > 1 && cut > 0) reRun++;
          assert.ok(
            runs.length <= planned + cut + unwritten,
            `job ran more often than its failures and the kill explain: ${JSON.stringify(runs)}`,
          );
          // No two attempts of one job overlap: each starts after the one before it ended
          // (or, for the victim's cut-off ones, after the victim was dead).
          for (let i = 1; i < runs.length; i++) {
            const before = runs[i - 1] as (typeof runs)[number];
            const end = before.ended_at ?? killedAt;
            if ((runs[i] as (typeof runs)[number]).started_at.getTime() < end.getTime()) overlaps++;
          }
        }
        assert.equal(overlaps, 0);
        assert.ok(interrupted > 0, 'the victim was killed while it ran attempts');
        assert.equal(reRun, interrupted, 'each attempt cut off by the kill ran again elsewhere, and only those');
        t.diagnostic(
          `accepted ${accepted.length}, completed ${JOBS}, attempts ${attempts.length}, cut off by the kill ${interrupted}, re-run ${reRun}, overlaps ${overlaps}`,
        );
      } finally {
        await db.end();
      }
    },
  );
});
