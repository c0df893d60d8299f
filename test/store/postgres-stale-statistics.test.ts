import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { CLAIM_TRANSACTION, claimStatements } from '../../src/store/postgres/claim.js';
import { finishStatements } from '../../src/store/postgres/finish.js';
import { heldGroupStatements } from '../../src/store/postgres/held-groups.js';
import { jobActionStatements } from '../../src/store/postgres/job-actions.js';
import { leaseStatements } from '../../src/store/postgres/lease.js';
import { progressStatements } from '../../src/store/postgres/progress.js';
import { explainPlan, planNodes, type PlanParam } from '../support/pg-plans.js';
import { connect, PgTestScope } from '../support/postgres.js';
import { claimRequest, completed, newJob, OWNER } from '../support/store-fixtures.js';

/**
 * Statements that find jobs by their ids and fence them on a status, on a table analyzed
 * while it held a few finished jobs only (a new schema's first ANALYZE), then thousands of
 * jobs claimed and most of them finished: the statistics say no job is queued or running,
 * and the partial indexes on those statuses hold the dead entries of every job that passed
 * through. Each statement must still find its rows by id (jobs_pkey), as a custom plan and
 * as the generic plan a prepared statement keeps: reading a status's index in their place
 * reads every entry it holds, which made finishing a hundred jobs take seconds.
 */
const scope = new PgTestScope();
after(() => scope.close());

/** How a plan reads the jobs table where it does not go by id (jobs_pkey); empty when it always does. */
function readsNotById(plan: unknown): string[] {
  const reads = planNodes(plan).filter(
    (node) => node['Relation Name'] === 'jobs' && String(node['Node Type']).endsWith('Scan'),
  );
  if (reads.length === 0) return ['no read of the jobs table'];
  return reads
    .filter((node) => node['Index Name'] !== 'jobs_pkey')
    .map((node) => String(node['Index Name'] ?? node['Node Type']));
}

describe('postgres store: statistics taken while the table was young (KILN_TEST_PG)', () => {
  it('finds fenced jobs by id, as custom and as generic plans', { timeout: 120_000 }, async () => {
    const { store, schema } = await scope.openStore(1_000_000);
    const db = await connect();
    scope.onClose(() => db.end());

    // A young table, analyzed: a few jobs, all finished.
    assert.equal((await store.insert(Array.from({ length: 8 }, () => newJob()))).ok, true);
    const first = (await store.claim(claimRequest(8))).flat();
    await store.finish(
      first.map((job) => ({ id: job.id, attempt: job.attempts, owner: OWNER, outcome: completed(1), expired: false })),
    );
    await db.query(`ANALYZE "${schema}".jobs`);
    // Then a burst: claimed, and most of it finished.
    assert.equal((await store.insert(Array.from({ length: 3000 }, () => newJob()))).ok, true);
    const running = (await store.claim(claimRequest(3000))).flat();
    assert.equal(running.length, 3000);
    const done = running.slice(0, 2900);
    await store.finish(
      done.map((job) => ({ id: job.id, attempt: job.attempts, owner: OWNER, outcome: completed(1), expired: false })),
    );

    const ids = running.slice(2900, 2910).map((job) => job.id);
    const each = <T extends string | number>(value: T) => ids.map(() => value);
    const statements: [string, string, readonly PlanParam[], string][] = [
      ['claimed ids', claimStatements(schema).claimIds.text, [OWNER, ids, 1000], CLAIM_TRANSACTION],
      ['a held-group claim locking its jobs', heldGroupStatements(schema).lock.text, [ids], CLAIM_TRANSACTION],
      ['heartbeat', leaseStatements(schema).heartbeat, [OWNER, ids, 1000, 'host', 1, 'v', 2, 0, 1000], 'BEGIN'],
      ['starts', leaseStatements(schema).started, [ids, each(1), each(OWNER), each(1)], 'BEGIN'],
      [
        'unstarted attempts returned',
        finishStatements(schema).returnUnstarted,
        [ids, each(1), each(OWNER), each('false')],
        'BEGIN',
      ],
      [
        'snoozes',
        finishStatements(schema).snooze,
        [ids, each(1), each(OWNER), each('false'), each(1000), each(1)],
        'BEGIN',
      ],
      ['releases', jobActionStatements(schema).release, [ids, each(1), each(OWNER), each(1)], 'BEGIN'],
      ['progress', progressStatements(schema).progress, [ids, each(1), each(OWNER), each('p')], 'BEGIN'],
    ];
    const notById: string[] = [];
    for (const [name, text, params, begin] of statements) {
      for (const generic of [false, true]) {
        const plan = await explainPlan(db, text, params, begin, generic);
        for (const read of readsNotById(plan)) notById.push(`${name} (${generic ? 'generic' : 'custom'}): ${read}`);
      }
    }

    // The finish function's statements, as it runs them: auto_explain hands each plan back
    // as a notice. Its owner is no claimer, so its fence holds nothing back and it changes nothing.
    await db.query(`LOAD 'auto_explain'`);
    for (const setting of ['log_min_duration = 0', 'log_nested_statements = on', 'log_format = json']) {
      await db.query(`SET auto_explain.${setting}`);
    }
    await db.query('SET auto_explain.log_level = notice');
    const updates: string[] = [];
    const onNotice = (notice: { message?: string }) => {
      const text = notice.message ?? '';
      if (/"Node Type": "ModifyTable"/.test(text) && /"Relation Name": "jobs"/.test(text)) updates.push(text);
    };
    db.on('notice', onNotice);
    // Calls beyond the fifth may run a plan the function kept: both kinds are looked at.
    for (let call = 0; call < 8; call++) {
      await db.query(
        `SELECT * FROM "${schema}".finish($1::uuid[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[],
           $7::text[], $8::bigint[], $9::boolean[], $10::bigint[])`,
        [
          ids,
          each(1),
          each('nobody'),
          each('completed'),
          each('1'),
          each(''),
          each(''),
          each(0),
          ids.map(() => false),
          each(1),
        ],
      );
    }
    db.off('notice', onNotice);
    assert.equal(updates.length, 8, 'each finish call showed its UPDATE');
    for (const [call, text] of updates.entries()) {
      const plan = (JSON.parse(text.slice(text.indexOf('{'))) as { Plan: unknown }).Plan;
      for (const read of readsNotById([{ Plan: plan }]))
        notById.push(`the finish function (call ${call + 1}): ${read}`);
    }
    assert.deepEqual(notById, [], 'every statement finds its jobs by id');
  });
});
