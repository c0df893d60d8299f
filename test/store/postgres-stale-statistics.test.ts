import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { CLAIM_TRANSACTION, claimStatements } from '../../src/store/postgres/claim.js';
import { finishStatements } from '../../src/store/postgres/finish.js';
import { heldGroupStatements } from '../../src/store/postgres/held-groups.js';
import { jobActionStatements } from '../../src/store/postgres/job-actions.js';
import { leaseStatements } from '../../src/store/postgres/lease.js';
import { progressStatements } from '../../src/store/postgres/progress.js';
import { HASH_JOINS } from '../../src/store/postgres/sql.js';
import { upkeepLockKey } from '../../src/store/postgres/upkeep.js';
import { explainPlan, planNodes, type PlanParam, recordPlans } from '../support/pg-plans.js';
import { connect, PgTestScope } from '../support/postgres.js';
import { claimRequest, completed, newJob, OWNER } from '../support/store-fixtures.js';

/**
 * Statements that find jobs by their ids and fence them on a status, on a table analyzed
 * while it was empty (its few jobs finished and moved to jobs_done), then thousands of
 * jobs claimed and most of them finished: the statistics say the table holds no row, and
 * the partial indexes on the statuses hold the dead entries of every job that passed
 * through. Each statement must still find its rows by id, on a condition of jobs_pkey, as
 * a custom plan and as the generic plan a prepared statement keeps, under the settings it
 * runs with: reading a status's index, or the whole primary key, reads every entry it
 * holds, which made finishing a hundred jobs take seconds. Nor may a join take the jobs
 * found for its outer side and walk rows it was given for each of them (a finish of 3,000
 * jobs took 5 s). So must every statement of the finish function and of
 * release_dependents, as they run.
 */
const scope = new PgTestScope();
after(() => scope.close());

/** How a plan reads the jobs table where it does not go by id (jobs_pkey); empty when it always does. */
function readsNotById(plan: unknown): string[] {
  const reads = planNodes(plan).filter(
    (node) => node['Relation Name'] === 'jobs' && String(node['Node Type']).endsWith('Scan'),
  );
  if (reads.length === 0) return ['no read of the jobs table'];
  // A bitmap heap scan goes by id when every bitmap it reads is of jobs_pkey, on a condition.
  const byId = (node: Record<string, unknown>): boolean => {
    if (node['Node Type'] !== 'Bitmap Heap Scan') {
      return node['Index Name'] === 'jobs_pkey' && node['Index Cond'] !== undefined;
    }
    const bitmaps = planNodes([{ Plan: node }]).filter((child) => child['Node Type'] === 'Bitmap Index Scan');
    return (
      bitmaps.length > 0 &&
      bitmaps.every((bitmap) => bitmap['Index Name'] === 'jobs_pkey' && bitmap['Index Cond'] !== undefined)
    );
  };
  return reads.filter((node) => !byId(node)).map((node) => String(node['Index Name'] ?? node['Node Type']));
}

/**
 * Nested loops of a plan that read the jobs table on their outer side and, for each row
 * found, scan their inner side without a condition of an index: a walk of every row given
 * for each job, whose cost is the product of the two.
 */
function loopsOverJobs(plan: unknown): string[] {
  const side = (node: Record<string, unknown>, relationship: string) =>
    ((node.Plans as Record<string, unknown>[] | undefined) ?? []).find(
      (child) => child['Parent Relationship'] === relationship,
    );
  const found: string[] = [];
  for (const node of planNodes(plan)) {
    if (node['Node Type'] !== 'Nested Loop') continue;
    const outer = side(node, 'Outer');
    const inner = side(node, 'Inner');
    if (outer === undefined || inner === undefined) continue;
    const readsJobs = planNodes([{ Plan: outer }]).some(
      (child) => child['Relation Name'] === 'jobs' && String(child['Node Type']).endsWith('Scan'),
    );
    const looksUp = planNodes([{ Plan: inner }]).some((child) => child['Index Cond'] !== undefined);
    if (readsJobs && !looksUp) found.push(`a nested loop over jobs, ${String(inner['Node Type'])} for each row`);
  }
  return found;
}

describe('postgres store: statistics taken while the table was young (KILN_TEST_PG)', () => {
  it('finds fenced jobs by id, as custom and as generic plans', { timeout: 120_000 }, async () => {
    const { store, schema } = await scope.openStore(1_000_000);
    const db = await connect();
    scope.onClose(() => db.end());
    // No ANALYZE but the test's: autovacuum off for the table, and the store's upkeep kept
    // out by holding its lock (upkeep.ts) on this connection.
    await db.query(`ALTER TABLE "${schema}".jobs SET (autovacuum_enabled = off)`);
    await db.query(`SELECT pg_advisory_lock(${upkeepLockKey(schema)})`);
    /** Whether the statistics still say the table is empty while it has pages (the planner then counts one row). */
    const statisticsSayEmpty = async () => {
      const { rows } = await db.query<{ reltuples: number; relpages: number }>(
        `SELECT reltuples, relpages FROM pg_class WHERE oid = '"${schema}".jobs'::regclass`,
      );
      return Number(rows[0]?.reltuples) === 0 && Number(rows[0]?.relpages) > 0;
    };

    // A young table, analyzed: a few jobs, all finished.
    assert.equal((await store.insert(Array.from({ length: 8 }, () => newJob()))).ok, true);
    const first = (await store.claim(claimRequest(8))).flat();
    await store.finish(
      first.map((job) => ({ id: job.id, attempt: job.attempts, owner: OWNER, outcome: completed(1), expired: false })),
    );
    await db.query(`ANALYZE "${schema}".jobs`);
    assert.ok(await statisticsSayEmpty(), 'the statistics say the jobs table is empty');
    // Then parents running, each with a waiting child, which their finishes below release.
    assert.equal((await store.insert(Array.from({ length: 8 }, () => newJob({ priority: 9 })))).ok, true);
    const parents = (await store.claim(claimRequest(8))).flat();
    assert.equal(parents.length, 8);
    const children = parents.map((parent) => newJob({ dependsOn: [parent.id] }));
    assert.equal((await store.insert(children)).ok, true);
    // And a burst: claimed, and most of it finished.
    assert.equal((await store.insert(Array.from({ length: 3000 }, () => newJob()))).ok, true);
    const running = (await store.claim(claimRequest(3000))).flat();
    assert.equal(running.length, 3000);
    const done = running.slice(0, 2900);
    await store.finish(
      done.map((job) => ({ id: job.id, attempt: job.attempts, owner: OWNER, outcome: completed(1), expired: false })),
    );

    const ids = running.slice(2900, 2910).map((job) => job.id);
    const each = <T extends string | number>(value: T) => ids.map(() => value);
    const JOINS = `BEGIN; ${HASH_JOINS}`;
    const statements: [string, string, readonly PlanParam[], string][] = [
      ['claimed ids', claimStatements(schema).claimIds.text, [OWNER, ids, 1000], CLAIM_TRANSACTION],
      ['a held-group claim locking its jobs', heldGroupStatements(schema).lock.text, [ids], CLAIM_TRANSACTION],
      [
        'heartbeat',
        leaseStatements(schema).heartbeat,
        [OWNER, ids, 1000, 'host', 1, 'v', 2, 0, 1000, 'false'],
        'BEGIN',
      ],
      // The statements PgConnection.joinById runs, with its settings.
      ['starts', leaseStatements(schema).started, [ids, each(1), each(OWNER), each(1)], JOINS],
      [
        'unstarted attempts returned',
        finishStatements(schema).returnUnstarted,
        [ids, each(1), each(OWNER), each('false')],
        JOINS,
      ],
      [
        'snoozes',
        finishStatements(schema).snooze,
        [ids, each(1), each(OWNER), each('false'), each(1000), each(1)],
        JOINS,
      ],
      ['releases', jobActionStatements(schema).release, [ids, each(1), each(OWNER), each(1)], JOINS],
      ['progress', progressStatements(schema).progress, [ids, each(1), each(OWNER), each('p')], JOINS],
    ];
    assert.ok(await statisticsSayEmpty(), 'the statistics still say the jobs table is empty');
    const notById: string[] = [];
    for (const [name, text, params, begin] of statements) {
      for (const generic of [false, true]) {
        const plan = await explainPlan(db, text, params, begin, generic);
        for (const read of [...readsNotById(plan), ...loopsOverJobs(plan)]) {
          notById.push(`${name} (${generic ? 'generic' : 'custom'}): ${read}`);
        }
      }
    }

    // The finish function's statements, as it runs them (release_dependents' too): auto_explain
    // hands each plan back as a notice. Eight calls name no claimer, so their fence holds
    // everything back; eight finish a parent each and release its child.
    const recorded = await recordPlans(db);
    const finish = (items: { id: string; attempt: number; owner: string }[], kind = 'completed') =>
      db.query(finishStatements(schema).finish.text, [
        items.map((item) => item.id),
        items.map((item) => item.attempt),
        items.map((item) => item.owner),
        items.map(() => kind),
        items.map(() => '1'),
        items.map(() => ''),
        items.map(() => ''),
        items.map(() => 0),
        items.map(() => false),
        items.map(() => 1),
      ]);
    // Calls beyond the fifth may run a plan the function kept: both kinds are looked at.
    for (let call = 0; call < 8; call++) await finish(ids.map((id) => ({ id, attempt: 1, owner: 'nobody' })));
    // The last parent fails, and fails its child (fail_dependents).
    for (const [i, parent] of parents.entries()) {
      await finish([{ id: parent.id, attempt: parent.attempts, owner: OWNER }], i === 7 ? 'failed' : 'completed');
    }
    recorded.stop();
    assert.ok(await statisticsSayEmpty(), 'the statistics said the jobs table was empty throughout');
    const plans = recorded.notices
      .filter((text) => /"Relation Name": "jobs"/.test(text))
      .map((text) => JSON.parse(text.slice(text.indexOf('{'))) as { 'Query Text': string; Plan: unknown });
    const released = await db.query<{ status: string }>(
      `SELECT status FROM "${schema}".jobs WHERE id = ANY($1::uuid[])`,
      [children.map((child) => child.id)],
    );
    assert.deepEqual(
      released.rows.map((row) => row.status).sort(),
      ['failed', ...children.slice(1).map(() => 'queued')],
      "the finishes released every child but the failed parent's, which failed",
    );
    // round_base's probes read the round indexes by design (postgres-cluster.test.ts checks them).
    const named = plans.filter((plan) => !plan['Query Text'].includes('CASE WHEN g IS NULL'));
    const seen = (pattern: RegExp) => named.filter((plan) => pattern.test(plan['Query Text'])).length;
    assert.ok(seen(/UPDATE \S+\.jobs j SET/) >= 16, 'each finish call showed its UPDATE');
    assert.ok(
      seen(/job_deps d WHERE d\.parent = ANY\(p_ids\)/) >= 16,
      'each finish call showed its lock of waiting children',
    );
    assert.ok(seen(/WITH ready AS/) >= 7, 'each release showed its lookups');
    assert.ok(seen(/WITH released AS/) >= 7, 'each release showed its UPDATE');
    assert.ok(seen(/WITH children AS/) >= 1, 'the failure of a child showed its UPDATE');
    for (const plan of named) {
      for (const read of [...readsNotById([{ Plan: plan.Plan }]), ...loopsOverJobs([{ Plan: plan.Plan }])]) {
        notById.push(`${plan['Query Text'].replace(/\s+/g, ' ').trim().slice(0, 110)}: ${read}`);
      }
    }
    assert.deepEqual(notById, [], 'every statement finds its jobs by id');
  });
});
