import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PostgresStore } from '../../src/store/postgres/store.js';
import { startServer } from '../support/kiln.js';
import { captureLog, LEVELS } from '../support/log-lines.js';
import { connect, dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';
import { watchFailures, type WatchedStore } from '../support/watch-failures.js';

describe('dispatch while every claim fails', () => {
  it('logs the fault when it starts and when it ends (with its count), not per retry, and retries by itself', async () => {
    const schema = freshSchemaName();
    const log = captureLog();
    let watch: WatchedStore | null = null;
    const server = await startServer(
      { KILN_THREADS: '1' },
      async () => {
        watch = watchFailures(
          await PostgresStore.open({ url: TEST_PG_URL, schema, poolSize: 4, capacity: 1000 }),
          'claim',
        );
        return watch.store;
      },
      { logger: log.logger },
    );
    const db = await connect();
    try {
      const claims = watch as WatchedStore | null;
      assert.ok(claims);
      // No job may become running: every claim fails in the database; submissions and reads still work.
      await db.query(`ALTER TABLE "${schema}".jobs ADD CONSTRAINT no_claims CHECK (status <> 'running') NOT VALID`);
      const ids: string[] = [];
      while (claims.failures() < 5) {
        const failed = claims.nextFailure();
        // Each submission is a change that asks dispatch to claim.
        const submitted = await server.request('POST', '/v1/jobs', { type: 'test.quick', payload: { n: ids.length } });
        assert.equal(submitted.status, 201, submitted.text);
        ids.push(submitted.body.id as string);
        await failed;
      }
      const dispatchLines = () => log.lines.filter((line) => /dispatch/.test(line.msg));
      assert.deepEqual(
        dispatchLines().map((line) => [line.level, line.msg]),
        [[LEVELS.error, 'dispatch failed; retrying']],
        `one line for ${claims.failures()} failed claims`,
      );
      assert.match(String((dispatchLines()[0]?.err as { message?: unknown } | undefined)?.message), /no_claims/);

      await db.query(`ALTER TABLE "${schema}".jobs DROP CONSTRAINT no_claims`);
      // Nothing changes any more: the retry comes from dispatch's own back-off.
      const end = await log.waitFor((line) => line.fault === 'dispatch' && line.level === LEVELS.info, 'dispatch ends');
      assert.equal(end.msg, 'dispatch works again');
      assert.equal(end.failures, claims.failures());
      assert.equal(typeof end.durationMs, 'number');
      for (const id of ids) {
        const job = await server.waitForJob(id);
        assert.equal(job.status, 'completed', JSON.stringify(job));
      }
      assert.equal(dispatchLines().length, 2);
    } finally {
      await db.end();
      await server.close();
      await dropSchema(schema);
    }
  });
});
