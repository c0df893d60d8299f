import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import type pg from 'pg';
import { claimStatements, CLAIM_TRANSACTION } from '../../src/store/postgres/claim.js';
import { HeldGroupReader } from '../../src/store/postgres/held-groups.js';
import type { NewJob } from '../../src/contract/job.js';
import { connect, PgTestScope } from '../support/postgres.js';
import { newJob, OWNER } from '../support/store-fixtures.js';

/**
 * The candidates of a claim while groups are held (held-groups.ts) against the plain
 * reading of the line that skips held jobs one by one (`claimCandidatesByType`), on the
 * same rows in the same transaction: random backlogs of held and free groups, of jobs
 * without a group, of two types at three priorities, with claims between them moving
 * the groups' rounds on. Both must name the same jobs in the same order.
 */
const scope = new PgTestScope();
after(() => scope.close());

/** A small deterministic generator, so that a failure can be run again. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1_664_525 + 1_013_904_223) >>> 0;
    return state / 2 ** 32;
  };
}

const TYPES = ['test.a', 'test.b'];
const GROUPS = ['g0', 'g1', 'g2', 'g3', 'g4', null];
const PRIORITIES = [3, 5, 9];

async function inTransaction<T>(client: pg.Client, work: () => Promise<T>): Promise<T> {
  await client.query(CLAIM_TRANSACTION);
  try {
    return await work();
  } finally {
    await client.query('ROLLBACK');
  }
}

/** Queued jobs that share their round with another of their group and priority. */
async function countSharedRounds(client: pg.Client, schema: string): Promise<number> {
  const shared = await client.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM (SELECT 1 FROM "${schema}".jobs WHERE status = 'queued'
       GROUP BY priority, group_key, round HAVING count(*) > 1) s`,
  );
  return shared.rows[0]?.n ?? 0;
}

describe('postgres store: passing over held groups (KILN_TEST_PG)', () => {
  it('names the same candidates as reading the whole line, in the same order', { timeout: 120_000 }, async () => {
    const { store, schema } = await scope.openStore(10_000_000);
    const client = await connect();
    scope.onClose(() => client.end());
    const reader = new HeldGroupReader(schema);
    const plain = claimStatements(schema).claimCandidatesByType;
    const random = seeded(20261126);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
    let byGroupReads = 0;
    let sharedRounds = 0;

    for (let round = 0; round < 60; round++) {
      // A burst for one group (a tenant's backlog, often longer than the window), and a few strays.
      const jobs: NewJob[] = [];
      const burst = { group: pick(GROUPS), priority: pick(PRIORITIES), type: pick(TYPES) };
      const size = random() < 0.3 ? 150 + Math.floor(random() * 100) : Math.floor(random() * 10);
      for (let i = 0; i < size; i++) jobs.push(newJob(burst));
      for (let i = 0; i < 5; i++)
        jobs.push(newJob({ group: pick(GROUPS), priority: pick(PRIORITIES), type: pick(TYPES) }));
      const inserted = await store.insert(jobs);
      assert.equal(inserted.ok, true, JSON.stringify(inserted));
      // Some of the line runs, moving every group's turn on; some of it comes back with its old
      // place after others of its group were queued (two jobs of a group on one round).
      if (random() < 0.5) {
        const claimed = (
          await store.claim({ owner: OWNER, leaseMs: 60_000, batches: 1 + Math.floor(random() * 8), micro: null })
        ).flat();
        if (claimed.length > 0 && random() < 0.5) {
          const again = await store.insert(
            claimed.map((job) => newJob({ group: job.group, priority: job.priority, type: job.type })),
          );
          assert.equal(again.ok, true);
          await store.release(claimed.map((job) => ({ id: job.id, attempt: job.attempts, owner: OWNER })));
          sharedRounds += await countSharedRounds(client, schema);
        }
      }

      const held = GROUPS.filter((group): group is string => group !== null && random() < 0.5);
      const counts = TYPES.map(() => 1 + Math.floor(random() * 6));
      const total = 1 + Math.floor(random() * 10);
      const expected = await inTransaction(client, async () =>
        (await client.query<{ id: string }>(plain, [TYPES, counts, total, held])).rows.map((row) => row.id),
      );
      const got = await inTransaction(client, async () => {
        // The reader's statements, counted: a second one is a read by group.
        let reads = 0;
        const counting = {
          query: (...args: unknown[]) => {
            reads += 1;
            return (client.query as (...a: unknown[]) => unknown).apply(client, args);
          },
        } as unknown as pg.PoolClient;
        const candidates = await reader.candidates(counting, TYPES, counts, held, total);
        if (reads > 1) byGroupReads += 1;
        return candidates?.map((candidate) => candidate.id) ?? null;
      });
      assert.deepEqual(got, expected, `round ${round}: held ${JSON.stringify(held)}, counts ${counts}, total ${total}`);
    }
    assert.ok(byGroupReads > 0, 'some rounds had a held run longer than the window and were read by group');
    assert.ok(sharedRounds > 0, 'some groups had two queued jobs on one round');
  });

  it('passes over a job another statement holds for the next in line, so the claim is not short', async () => {
    const { store, schema } = await scope.openStore(100_000);
    const held = Array.from({ length: 200 }, () => newJob({ group: 'tenant-held', priority: 9 }));
    const free = Array.from({ length: 4 }, () => newJob({ group: 'tenant-free', priority: 9 }));
    assert.equal((await store.insert([...held, ...free])).ok, true);
    const reader = new HeldGroupReader(schema);
    const holder = await connect();
    scope.onClose(() => holder.end());
    const client = await connect();
    scope.onClose(() => client.end());
    // Another statement holds the best free job (as a submission locks a parent, or a cancel its job).
    await holder.query('BEGIN');
    await holder.query(`SELECT id FROM "${schema}".jobs WHERE id = $1 FOR UPDATE`, [free[0]!.id]);
    try {
      const got = await inTransaction(client, async () =>
        (await reader.candidates(client as unknown as pg.PoolClient, ['test.echo'], [2], ['tenant-held'], 2))?.map(
          (candidate) => candidate.id,
        ),
      );
      assert.deepEqual(got, [free[1]!.id, free[2]!.id]);
    } finally {
      await holder.query('ROLLBACK');
    }
  });
});
