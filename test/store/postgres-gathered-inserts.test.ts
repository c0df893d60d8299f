import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { PgTestScope } from '../support/postgres.js';
import { newJob } from '../support/store-fixtures.js';

/**
 * Requests that read nothing before their insert (no keys, dedupe keys, outside parents or
 * batch) share one statement with those that arrive meanwhile, and each is still admitted
 * whole, as it would be alone.
 */
const scope = new PgTestScope();
after(() => scope.close());

describe('postgres store: inserts gathered into one statement (KILN_TEST_PG)', () => {
  it('answers each of many requests made at once with its own jobs, in one commit', { timeout: 60_000 }, async () => {
    const { store } = await scope.openStore(1_000);
    let commits = 0;
    store.observeCommits(() => commits++);
    const requests = Array.from({ length: 24 }, (_, i) => [newJob({ priority: i % 10 }), newJob()]);
    const answers = await Promise.all(requests.map((jobs) => store.insert(jobs)));
    for (const [i, answer] of answers.entries()) {
      assert.ok(answer.ok, JSON.stringify(answer));
      assert.deepEqual(
        answer.outcomes.map((outcome) => [outcome.created, outcome.job.id, outcome.job.status, outcome.job.priority]),
        requests[i]?.map((job) => [true, job.id, 'queued', job.priority]),
      );
    }
    assert.ok(commits <= 2, `24 requests made at once took ${commits} commits`);
    for (const job of requests.flat()) assert.equal((await store.get(job.id))?.status, 'queued');
  });

  it('admits each request whole or not at all, in order, when they do not all fit', { timeout: 60_000 }, async () => {
    const { store } = await scope.openStore(10);
    const sizes = [4, 8, 3];
    const requests = sizes.map((n) => Array.from({ length: n }, () => newJob()));
    const answers = await Promise.all(requests.map((jobs) => store.insert(jobs)));
    assert.deepEqual(
      answers.map((answer) => (answer.ok ? answer.outcomes.length : answer.reason)),
      [4, 'queue_full', 3],
    );
    const stored = await Promise.all(requests.flat().map((job) => store.get(job.id)));
    assert.equal(stored.filter((job) => job !== null).length, 7);
    assert.deepEqual(
      requests[1]?.map((job) => stored.find((found) => found?.id === job.id) ?? null),
      requests[1]?.map(() => null),
    );
  });
});
