import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { newJobId } from '../../src/jobs/ids.js';
import type { NewJob } from '../../src/contract/job.js';
import type pg from 'pg';
import { PostgresStore } from '../../src/store/postgres/store.js';
import { CLAIM_TRANSACTION, claimStatements } from '../../src/store/postgres/claim.js';
import { heldGroupStatements } from '../../src/store/postgres/held-groups.js';
import { ROUND_BASES, roundBase } from '../../src/store/postgres/sql.js';
import type { JobStore, StoreEvent } from '../../src/store/store.js';
import { pollUntil } from '../support/poll.js';
import { connect, dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';
import { explainPlan, planNodes, recordPlans } from '../support/pg-plans.js';
import { completed, newJob, OWNER, rescueOnce } from '../support/store-fixtures.js';

/**
 * Several PostgreSQL stores on one schema, as several servers use it: what one does,
 * the others hear of; races that only a shared database has (claims, rescue against
 * the owner, parents finishing while children are inserted) end one way only.
 */
const schemas: string[] = [];
const stores: JobStore[] = [];
after(async () => {
  for (const store of stores.splice(0)) await store.close();
  for (const schema of schemas) await dropSchema(schema);
});

async function cluster(n: number, capacity = 1_000_000): Promise<{ schema: string; nodes: PostgresStore[] }> {
  const schema = freshSchemaName();
  schemas.push(schema);
  const nodes: PostgresStore[] = [];
  for (let i = 0; i < n; i++) {
    const store = await PostgresStore.open({ url: TEST_PG_URL, schema, poolSize: 4, capacity, pollMs: 60_000 });
    stores.push(store);
    nodes.push(store);
  }
  return { schema, nodes };
}

/** A job as the scheduler makes them: a UUIDv7 and the store's clock. */
function job(overrides: Partial<NewJob> = {}): NewJob {
  return newJob({ id: newJobId(), createdAt: Date.now(), ...overrides });
}

async function insert(store: JobStore, jobs: NewJob[]): Promise<void> {
  const result = await store.insert(jobs);
  assert.equal(result.ok, true, JSON.stringify(result));
}

/** Resolves with the first event `store` publishes that `match` accepts. */
function nextEvent(
  store: JobStore,
  match: (event: StoreEvent) => boolean,
  watching: (id: string) => boolean = () => true,
): Promise<StoreEvent> {
  return new Promise((resolve) => {
    const stop = store.subscribe(
      (event) => {
        if (!match(event)) return;
        stop();
        resolve(event);
      },
      { watching },
    );
  });
}

describe('postgres store: several stores on one schema (KILN_TEST_PG)', () => {
  it(
    'tells the others of every change, reading the whole job for the ones they watch',
    { timeout: 120_000 },
    async () => {
      const [a, b] = (await cluster(2)).nodes as [PostgresStore, PostgresStore];
      const input = job();
      const seen: string[] = [];
      const stop = b.subscribe(
        (event) => {
          if (event.kind === 'changed' && event.id === input.id) seen.push(`${event.status}:${event.remote === true}`);
        },
        { watching: (id) => id === input.id },
      );
      const done = nextEvent(b, (e) => e.kind === 'changed' && e.id === input.id && e.status === 'completed');
      await insert(a, [input]);
      const [[claimed]] = (await a.claim({ owner: OWNER, leaseMs: 60_000, batches: 1, micro: null })) as [[never]];
      assert.ok(claimed);
      await a.started([{ id: input.id, attempt: 1, owner: OWNER, startedAt: a.now() }]);
      a.progress(input.id, 1, OWNER, { percent: 50, message: 'half' });
      const progress = await nextEvent(b, (e) => e.kind === 'progress' && e.id === input.id);
      assert.equal(progress.kind === 'progress' && progress.progress.percent, 50);
      await a.finish([{ id: input.id, attempt: 1, owner: OWNER, outcome: completed({ answer: 42 }) }]);
      const event = await done;
      assert.ok(event.kind === 'changed');
      assert.equal(event.remote, true);
      assert.deepEqual(event.job().result, { answer: 42 });
      assert.deepEqual(event.job().progress, { percent: 50, message: 'half' });
      stop();
      assert.deepEqual(seen, ['queued:true', 'running:true', 'completed:true']);
    },
  );

  it(
    'pauses every store at once: the claim itself refuses while paused, and the others hear of it',
    { timeout: 120_000 },
    async () => {
      const [a, b] = (await cluster(2)).nodes as [PostgresStore, PostgresStore];
      await insert(b, [job()]);
      const heard = nextEvent(b, (e) => e.kind === 'paused');
      await a.setPaused(true);
      // b has not heard yet, or has: either way its claim takes nothing.
      assert.deepEqual(await b.claim({ owner: 'b', leaseMs: 60_000, batches: 4, micro: null }), []);
      const event = await heard;
      assert.deepEqual(event, { kind: 'paused', paused: true });
      assert.equal(await b.paused(), true);
      await a.setPaused(false);
      assert.equal((await b.claim({ owner: 'b', leaseMs: 60_000, batches: 4, micro: null })).length, 1);
    },
  );

  it(
    'hands every job to exactly one of several stores claiming at once, and keeps the counts exact',
    { timeout: 120_000 },
    async () => {
      const { schema, nodes } = await cluster(4);
      const first = nodes[0] as PostgresStore;
      const all = Array.from({ length: 2000 }, (_, i) => job({ priority: i % 10 }));
      for (let i = 0; i < all.length; i += 500) await insert(first, all.slice(i, i + 500));
      const taken = new Map<string, string>();
      await Promise.all(
        nodes.map(async (store, n) => {
          for (;;) {
            const micro =
              n % 2 === 0
                ? null
                : { costs: new Map([['test.echo', 0.1]]), budgetMs: 1, maxJobs: 8, solo: new Set<string>() };
            const batches = await store.claim({ owner: `node-${n}`, leaseMs: 60_000, batches: 3, micro });
            if (batches.length === 0) return;
            for (const claimed of batches.flat()) {
              assert.equal(taken.has(claimed.id), false, `${claimed.id} handed out twice`);
              taken.set(claimed.id, `node-${n}`);
            }
          }
        }),
      );
      assert.equal(taken.size, all.length);
      const db = await connect();
      try {
        const real = await db.query<{ status: string; n: number }>(
          `SELECT status, count(*)::int AS n FROM "${schema}".jobs GROUP BY status`,
        );
        const counts = await first.counts();
        assert.deepEqual(
          real.rows.map((row) => [row.status, row.n]),
          [['running', all.length]],
        );
        // Claimed, none started: a reader counts them queued.
        assert.equal(counts.byStatus.queued, all.length);
        assert.equal(counts.byStatus.running, 0);
        assert.equal(counts.pending, all.length);
      } finally {
        await db.end();
      }
    },
  );

  it('lets exactly one of the owner’s finish and a rescue win, raced many times', { timeout: 120_000 }, async () => {
    const [owner, rescuer] = (await cluster(2)).nodes as [PostgresStore, PostgresStore];
    let ownerWon = 0;
    let rescueWon = 0;
    for (let round = 0; round < 100; round++) {
      const input = job();
      await insert(owner, [input]);
      await owner.claim({ owner: 'owner', leaseMs: 1, batches: 1, micro: null });
      // The lease (1 ms) has run out by the database's clock once the rescuer lists it.
      await pollUntil(
        () => rescuer.expiredLeases(10),
        (expired) => expired.some((e) => e.id === input.id),
        { what: `the lease of ${input.id} to be listed as expired`, deadlineMs: 10_000, everyMs: 0 },
      );
      const [mine, rescue] = await Promise.all([
        owner.finish([{ id: input.id, attempt: 1, owner: 'owner', outcome: completed(round) }]),
        rescuer.finish([
          {
            id: input.id,
            attempt: 1,
            owner: 'owner',
            expired: true,
            outcome: {
              kind: 'failed',
              error: { code: 'interrupted', message: 'lease expired', attempt: 1 },
              retryAt: rescuer.now() + 60_000,
            },
          },
        ]),
      ]);
      assert.equal((mine[0] === null) !== (rescue[0] === null), true, `round ${round}: exactly one wins`);
      if (mine[0] !== null) ownerWon++;
      else rescueWon++;
      const stored = await owner.get(input.id);
      assert.equal(stored?.status, mine[0] !== null ? 'completed' : 'retrying');
    }
    assert.equal(ownerWon + rescueWon, 100);
  });

  it(
    'never leaves a child waiting when its parent completes while the child is inserted elsewhere',
    { timeout: 120_000 },
    async () => {
      const [a, b] = (await cluster(2)).nodes as [PostgresStore, PostgresStore];
      for (let round = 0; round < 100; round++) {
        const parent = job();
        await insert(a, [parent]);
        await a.claim({ owner: 'a', leaseMs: 60_000, batches: 1, micro: null });
        const child = job({ dependsOn: [parent.id] });
        await Promise.all([
          a.finish([{ id: parent.id, attempt: 1, owner: 'a', outcome: completed(round) }]),
          insert(b, [child]),
        ]);
        assert.equal((await b.get(child.id))?.status, 'queued', `round ${round}`);
        const [[claimed]] = (await b.claim({ owner: 'b', leaseMs: 60_000, batches: 1, micro: null })) as [[never]];
        assert.ok(claimed);
        await b.finish([{ id: child.id, attempt: 1, owner: 'b', outcome: completed(null) }]);
      }
    },
  );

  it('releases a child once when its two parents complete at once on two stores', { timeout: 120_000 }, async () => {
    const [a, b] = (await cluster(2)).nodes as [PostgresStore, PostgresStore];
    for (let round = 0; round < 100; round++) {
      const p1 = job();
      const p2 = job();
      const child = job({ dependsOn: [p1.id, p2.id] });
      await insert(a, [p1, p2, child]);
      const claimedA = (await a.claim({ owner: 'a', leaseMs: 60_000, batches: 1, micro: null })).flat();
      const claimedB = (await b.claim({ owner: 'b', leaseMs: 60_000, batches: 1, micro: null })).flat();
      assert.equal(claimedA.length + claimedB.length, 2);
      await Promise.all([
        a.finish(claimedA.map((c) => ({ id: c.id, attempt: 1, owner: 'a', outcome: completed(1) }))),
        b.finish(claimedB.map((c) => ({ id: c.id, attempt: 1, owner: 'b', outcome: completed(2) }))),
      ]);
      assert.equal((await a.get(child.id))?.status, 'queued', `round ${round}`);
      const [[c]] = (await a.claim({ owner: 'a', leaseMs: 60_000, batches: 1, micro: null })) as [[never]];
      assert.ok(c);
      await a.finish([{ id: child.id, attempt: 1, owner: 'a', outcome: completed(null) }]);
    }
  });

  it(
    'rescues leases back-dated in the table once (an attempt that never started is given back), and the owner then hears it lost the jobs',
    { timeout: 120_000 },
    async () => {
      const { schema, nodes } = await cluster(2);
      const [owner, peer] = nodes as [PostgresStore, PostgresStore];
      // The rescued job's retry waits a minute: else, on a slow machine, it is due again
      // before the last claim and comes first.
      const input = job({
        maxAttempts: 3,
        priority: 9,
        backoff: { initialMs: 60_000, factor: 2, maxMs: 60_000, jitter: 'none' },
      });
      const lookAhead = job({ maxAttempts: 1 });
      await insert(owner, [input, lookAhead]);
      const claimed = await owner.claim({ owner: 'owner', leaseMs: 60_000, batches: 2, micro: null });
      assert.deepEqual(
        claimed.map((batch) => batch.map((c) => c.id)),
        [[input.id], [lookAhead.id]],
      );
      await owner.started([{ id: input.id, attempt: 1, owner: 'owner', startedAt: owner.now() }]);
      assert.deepEqual(await peer.expiredLeases(10), []);
      const db = await connect();
      try {
        await db.query(
          `UPDATE "${schema}".jobs SET lease_expires_at = "${schema}".now_ms() - 1000 WHERE id = ANY($1::uuid[])`,
          [[input.id, lookAhead.id]],
        );
      } finally {
        await db.end();
      }
      assert.equal(await rescueOnce(peer), 2);
      assert.equal(await rescueOnce(peer), 0);
      const rescued = await peer.get(input.id);
      assert.equal(rescued?.status, 'retrying');
      assert.equal(rescued?.error?.code, 'interrupted');
      assert.equal(rescued?.attempts, 1);
      const back = await peer.get(lookAhead.id);
      assert.equal(back?.status, 'queued');
      assert.equal(back?.attempts, 0);
      assert.equal(back?.error, null);
      assert.deepEqual(
        (await owner.heartbeat('owner', [input.id, lookAhead.id], 60_000)).sort(),
        [input.id, lookAhead.id].sort(),
      );
      assert.deepEqual(await owner.finish([{ id: input.id, attempt: 1, owner: 'owner', outcome: completed('late') }]), [
        null,
      ]);
      const [again] = (await peer.claim({ owner: 'peer', leaseMs: 60_000, batches: 1, micro: null })).flat();
      assert.equal(again?.id, lookAhead.id);
      assert.equal(again?.attempts, 1);
    },
  );

  it(
    'keeps the statistics of a busy jobs table fresh even where autovacuum does not come',
    { timeout: 120_000 },
    async () => {
      const { schema, nodes } = await cluster(2);
      const [a] = nodes as [PostgresStore];
      for (let i = 0; i < 3; i++)
        await insert(
          a,
          Array.from({ length: 1000 }, () => job()),
        );
      const db = await connect();
      try {
        const autovacuum = (
          await db.query<{ setting: string }>(`SELECT setting FROM pg_settings WHERE name = 'autovacuum'`)
        ).rows[0]?.setting;
        // One of the two stores (whichever takes the upkeep lock) analyzes within seconds.
        await pollUntil(
          async () =>
            (
              await db.query<{ manual: Date | null; auto: Date | null }>(
                `SELECT last_analyze AS manual, last_autoanalyze AS auto FROM pg_stat_user_tables
                 WHERE schemaname = $1 AND relname = 'jobs'`,
                [schema],
              )
            ).rows[0],
          (row) => row?.manual != null || (autovacuum === 'on' && row?.auto != null),
          { what: 'the jobs table to be analyzed', deadlineMs: 60_000, everyMs: 100 },
        );
      } finally {
        await db.end();
      }
    },
  );

  it(
    'claims through the claim index in order, with no sort and no scan of the table, over a large backlog',
    { timeout: 120_000 },
    async () => {
      const { schema } = await cluster(1);
      const db = await connect();
      try {
        await db.query(
          `INSERT INTO "${schema}".jobs (id, type, status, priority, payload, max_attempts, timeout_ms, backoff_initial_ms,
             backoff_factor, backoff_max_ms, backoff_jitter, created_at, ready_at, ready_seq)
           SELECT gen_random_uuid(), 'noop', 'queued', (g % 10), '{}', 3, 1000, 100, 2, 1000, 'none', g, g, g
           FROM generate_series(1, 50000) AS g`,
        );
        await db.query(`ANALYZE "${schema}".jobs`);
        const chosen = (await db.query<{ id: string }>(`SELECT id::text AS id FROM "${schema}".jobs LIMIT 10`)).rows;
        const ids = chosen.map((row) => row.id);
        const claims = claimStatements(schema);
        const held = heldGroupStatements(schema);
        // The statements are prepared: after five runs PostgreSQL may keep a generic plan,
        // planned without the values, so that plan is checked as well as the one for them,
        // each under the settings the statement runs with.
        for (const [name, statement, params, begin, index] of [
          ['claim', claims.claim, ['n', 10, 1000], 'BEGIN', 'jobs_claim'],
          ['micro-batch candidates', claims.claimCandidates, [64], CLAIM_TRANSACTION, 'jobs_claim'],
          ['chosen ids', claims.claimIds, ['n', ids, 1000], CLAIM_TRANSACTION, 'jobs_pkey'],
          [
            'chosen ids under a rate limit',
            claims.claimIdsRated,
            ['n', ids, 1000, ['type'], ['noop'], [60_000], ['noop'], []],
            CLAIM_TRANSACTION,
            'jobs_pkey',
          ],
          [
            'the first jobs in line while a group is held',
            held.window,
            [['noop'], [5], 66],
            CLAIM_TRANSACTION,
            'jobs_claim*',
          ],
          [
            'a level read group by group',
            held.byGroup,
            [['noop'], [5], [2], ['tenant-held'], 1000],
            CLAIM_TRANSACTION,
            'jobs_type_group',
          ],
          ['the chosen jobs of a held-group claim, locked', held.lock, [ids], CLAIM_TRANSACTION, 'jobs_pkey'],
        ] as const) {
          for (const generic of [false, true]) {
            const plan = await explainPlan(db, statement.text, params, begin, generic);
            const which = `${name} (${generic ? 'generic' : 'custom'} plan): ${JSON.stringify(plan)}`;
            const nodes = planNodes(plan);
            if (statement === held.byGroup) {
              assert.ok(
                !nodes.some((node) => node['Index Name'] === 'jobs_claim_type'),
                `${which} reads a group's jobs in the type's index, past the held ones`,
              );
            }
            assert.ok(
              // `name*`: any index whose name starts so (the planner picks by the table's types).
              nodes.some((node) =>
                index.endsWith('*')
                  ? String(node['Index Name']).startsWith(index.slice(0, -1))
                  : node['Index Name'] === index,
              ),
              `${which} reads ${index}`,
            );
            assert.ok(!nodes.some((node) => node['Node Type'] === 'Sort'), `${which} sorts`);
            assert.ok(
              !nodes.some((node) => node['Node Type'] === 'Seq Scan' && node['Relation Name'] === 'jobs'),
              `${which} scans the whole table`,
            );
          }
        }
      } finally {
        await db.end();
      }
    },
  );

  for (const [when, prepare] of [
    [
      // A new schema's first minute: never analyzed, but vacuumed (the planner knows
      // the table's size, nothing of how many jobs have no group).
      'on a table never analyzed',
      async (db: pg.Client, schema: string, fill: () => Promise<unknown>) => {
        await fill();
        await db.query(`VACUUM "${schema}".jobs`);
      },
    ],
    [
      // Statistics taken when the table held a few jobs, the connection's first calls
      // then, and a burst.
      'on a table analyzed when it was small',
      async (db: pg.Client, schema: string, fill: () => Promise<unknown>) => {
        await db.query(`ANALYZE "${schema}".jobs`);
        for (let call = 0; call < 8; call++) {
          for (const group of [null, 'tenant-5']) {
            await db.query(`SELECT "${schema}".round_base(5::smallint, $1)`, [group]);
          }
        }
        await fill();
      },
    ],
  ] as const) {
    it(
      `finds a queued job's round with ordered index probes, no sort, over a large backlog ${when}`,
      { timeout: 120_000 },
      async () => {
        const { schema, nodes } = await cluster(1);
        const db = await connect();
        try {
          const few = Array.from({ length: 8 }, () => job());
          await insert(nodes[0] as PostgresStore, few);
          // 30,000 queued jobs at one priority, 300 of them in 50 groups.
          const fill = () =>
            db.query(
              `INSERT INTO "${schema}".jobs (id, type, status, priority, payload, max_attempts, timeout_ms,
                 backoff_initial_ms, backoff_factor, backoff_max_ms, backoff_jitter, created_at, ready_at, ready_seq,
                 group_key, round)
               SELECT gen_random_uuid(), 'noop', 'queued', 5, '{}', 3, 1000, 100, 2, 1000, 'none', g, g, g,
                 CASE WHEN g % 100 = 0 THEN 'tenant-' || (g / 100 % 50) END, g
               FROM generate_series(1, 30000) AS g`,
            );
          await prepare(db, schema, fill);
          // Every statement the function runs comes back as a notice with its plan, as executed.
          const recorded = await recordPlans(db, { analyze: true });
          // Calls beyond the fifth may run a plan the connection kept: both kinds are looked at.
          for (let call = 0; call < 8; call++) {
            for (const group of [null, 'tenant-5', 'tenant-unknown']) {
              await db.query(`SELECT "${schema}".round_base(5::smallint, $1)`, [group]);
            }
          }
          recorded.stop();
          const plans = recorded.notices.filter((text) => /round/.test(text) && !/round_base/.test(text));
          assert.ok(plans.length >= 24, `the function's probes were seen (${plans.length})`);
          for (const plan of plans) {
            assert.doesNotMatch(plan, /"Node Type": "(Sort|Seq Scan)"/, `a probe sorts or scans the table: ${plan}`);
            const blocks = [...plan.matchAll(/"Shared (?:Hit|Read) Blocks": (\d+)/g)].map((m) => Number(m[1]));
            assert.ok(Math.max(...blocks) <= 20, `a probe reads ${Math.max(...blocks)} blocks: ${plan}`);
          }
          // The insert and the promotion of due jobs run the same probes inline (ROUND_BASES), in
          // statements a connection prepares once: custom and generic plans alike read the round
          // indexes in order.
          const s = `"${schema}"`;
          const bases = `WITH i AS (SELECT * FROM unnest($1::smallint[], $2::text[]) AS i(priority, group_key)),
${ROUND_BASES(s, 'i')} SELECT * FROM bases`;
          for (const generic of [false, true]) {
            const plan = await explainPlan(db, bases, [[5, 5, 5], '{NULL,tenant-5,tenant-unknown}'], 'BEGIN', generic);
            const reads = planNodes(plan).filter((node) => node['Relation Name'] === 'jobs');
            assert.equal(reads.length, 3, `the three probes (${generic ? 'generic' : 'custom'} plan)`);
            for (const node of [...reads, ...planNodes(plan)]) {
              assert.doesNotMatch(String(node['Node Type']), /^(Sort|Seq Scan)$/, JSON.stringify(plan));
            }
          }
          const answers = await db.query<{ group_key: string | null; base: string; fn: string }>(
            `${bases.replace('SELECT * FROM bases', '')} SELECT group_key, base, ${s}.round_base(priority, group_key) AS fn FROM bases`,
            [[5, 5, 5], '{NULL,tenant-5,tenant-unknown}'],
          );
          assert.equal(answers.rows.length, 3);
          for (const row of answers.rows) assert.equal(row.base, row.fn, `the same round for group ${row.group_key}`);
          // One rule: the function (migration 004) is the text the statements inline.
          const source = await db.query<{ prosrc: string }>(
            `SELECT prosrc FROM pg_proc WHERE proname = 'round_base' AND pronamespace = $1::regnamespace`,
            [s],
          );
          const words = (text: string) => text.replace(/\s+/g, ' ').trim();
          assert.equal(words(source.rows[0]?.prosrc ?? ''), words(`SELECT ${roundBase(s, 'p', 'g')}`));
        } finally {
          await db.end();
        }
      },
    );
  }

  it(
    "applies task limits across the stores: running attempts and the rate window are the cluster's",
    { timeout: 60_000 },
    async () => {
      const [a, b] = (await cluster(2)).nodes as [PostgresStore, PostgresStore];
      await insert(a, [
        ...Array.from({ length: 4 }, () => job({ type: 'test.held', priority: 9 })),
        ...Array.from({ length: 4 }, () => job({ type: 'test.rated', priority: 9 })),
        job({ type: 'test.echo', priority: 1 }),
      ]);
      const limits = new Map([
        ['test.held', { concurrency: 1, rateLimit: null }],
        ['test.rated', { concurrency: null, rateLimit: { max: 2, perMs: 3_600_000 } }],
      ]);
      // Each server's own view allows everything: only the database knows what the other holds.
      const request = (owner: string) => ({
        owner,
        leaseMs: 30_000,
        batches: 10,
        micro: null,
        allowance: new Map([
          ['test.held', 1],
          ['test.rated', 2],
        ]),
        limits,
        types: ['test.held', 'test.rated', 'test.echo'],
      });
      const first = (await a.claim(request('node-a')))
        .flat()
        .map((j) => j.type)
        .sort();
      assert.deepEqual(first, ['test.echo', 'test.held', 'test.rated', 'test.rated']);
      const passed: string[] = [];
      const second = await b.claim({ ...request('node-b'), passedOver: (type: string) => passed.push(type) });
      assert.deepEqual(second, [], 'the other server holds the one place and took both tokens');
      assert.deepEqual(passed.sort(), ['test.held', 'test.rated']);
    },
  );

  it(
    "applies group limits across the stores, with task limits: running attempts and the rate window are the cluster's",
    { timeout: 60_000 },
    async () => {
      const { schema, nodes } = await cluster(2);
      const [a, b] = nodes as [PostgresStore, PostgresStore];
      await insert(a, [
        ...Array.from({ length: 4 }, () => job({ group: 'tenant-held', priority: 9 })),
        ...Array.from({ length: 4 }, () => job({ group: 'tenant-rated', priority: 9 })),
        ...Array.from({ length: 2 }, () => job({ type: 'test.held', group: 'tenant-free' })),
        job({ priority: 1 }),
      ]);
      const groupLimits = new Map([
        ['tenant-held', { concurrency: 1, rateLimit: null }],
        ['tenant-rated', { concurrency: null, rateLimit: { max: 2, perMs: 3_600_000 } }],
      ]);
      // Each server's own view allows everything: only the database knows what the other holds.
      const request = (owner: string) => ({
        owner,
        leaseMs: 30_000,
        batches: 10,
        micro: null,
        allowance: new Map([['test.held', 1]]),
        limits: new Map([['test.held', { concurrency: 1, rateLimit: null }]]),
        groupAllowance: new Map([
          ['tenant-held', 1],
          ['tenant-rated', 2],
        ]),
        groupLimits,
        types: ['test.held', 'test.echo'],
      });
      const first = (await a.claim(request('node-a')))
        .flat()
        .map((j) => `${j.type}/${j.group}`)
        .sort();
      assert.deepEqual(first, [
        'test.echo/null',
        'test.echo/tenant-held',
        'test.echo/tenant-rated',
        'test.echo/tenant-rated',
        'test.held/tenant-free',
      ]);
      const passed: string[] = [];
      const second = await b.claim({ ...request('node-b'), groupPassedOver: (group: string) => passed.push(group) });
      assert.deepEqual(second, [], 'the other server holds the one place and took both tokens; the type is held');
      assert.deepEqual(passed.sort(), ['tenant-held', 'tenant-rated']);
      const db = await connect();
      try {
        const starts = await db.query<{ kind: string; type: string; n: number }>(
          `SELECT kind, type, count(*)::int AS n FROM "${schema}".rate_starts GROUP BY kind, type ORDER BY kind, type`,
        );
        assert.deepEqual(starts.rows, [{ kind: 'group', type: 'tenant-rated', n: 2 }]);
      } finally {
        await db.end();
      }
    },
  );

  it(
    'records the starts of a rate-limited type with its claim, and forgets those that left the window',
    { timeout: 60_000 },
    async () => {
      const { schema, nodes } = await cluster(2);
      const [a, b] = nodes as [PostgresStore, PostgresStore];
      await insert(a, [job({ type: 'test.rated' }), job({ type: 'test.rated' }), job({ type: 'test.echo' })]);
      const limits = new Map([['test.rated', { concurrency: null, rateLimit: { max: 1, perMs: 3_600_000 } }]]);
      const request = (owner: string) => ({
        owner,
        leaseMs: 30_000,
        batches: 5,
        micro: null,
        allowance: new Map([['test.rated', 1]]),
        limits,
        types: ['test.rated', 'test.echo'],
      });
      const types = async (store: PostgresStore, owner: string) =>
        (await store.claim(request(owner)))
          .flat()
          .map((j) => j.type)
          .sort();
      const db = await connect();
      try {
        const starts = async () =>
          (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".rate_starts`)).rows[0]?.n;
        assert.deepEqual(await types(a, 'node-a'), ['test.echo', 'test.rated']);
        assert.equal(await starts(), 1, 'the claim recorded its start');
        assert.deepEqual(await types(b, 'node-b'), [], 'the window holds one start');
        // The start leaves the window: the next claim takes the type again, and forgets it.
        await db.query(`UPDATE "${schema}".rate_starts SET at = at - 3600001`);
        assert.deepEqual(await types(b, 'node-b'), ['test.rated']);
        assert.equal(await starts(), 1, 'the old start forgotten, the new one recorded');
        const newest = await db.query<{ fresh: boolean }>(
          `SELECT at > "${schema}".now_ms() - 3600000 AS fresh FROM "${schema}".rate_starts`,
        );
        assert.equal(newest.rows[0]?.fresh, true);
      } finally {
        await db.end();
      }
    },
  );

  it('makes one job of one dedupe key inserted on two stores at once', { timeout: 60_000 }, async () => {
    const [a, b] = (await cluster(2)).nodes as [PostgresStore, PostgresStore];
    for (let round = 0; round < 20; round++) {
      const key = `work-${round}`;
      const answers = await Promise.all([a, b, a, b].map((store) => store.insert([job({ dedupeKey: key })])));
      const ids = new Set<string>();
      let created = 0;
      for (const answer of answers) {
        assert.ok(answer.ok, JSON.stringify(answer));
        const outcome = answer.outcomes[0];
        assert.ok(outcome);
        ids.add(outcome.job.id);
        if (outcome.created) created++;
        else assert.equal(outcome.dedupe, 'inflight');
      }
      assert.equal(ids.size, 1, `round ${round}: one job for the key`);
      assert.equal(created, 1);
    }
  });
});
