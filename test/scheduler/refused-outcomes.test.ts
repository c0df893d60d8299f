import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { startServer } from '../support/kiln.js';
import { captureLog } from '../support/log-lines.js';
import { connect, dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';

/**
 * An outcome the store's fence refuses is news for an operator: one warning naming the
 * job, the attempt and why, and kiln_outcomes_refused_total{reason}. The attempt is made
 * not this server's while it runs (a later attempt is recorded in the row, as if it had
 * been rescued and run again elsewhere); the heartbeat renews by owner and status, so it
 * does not stop the attempt first.
 */
const schema = freshSchemaName();
const dir = mkdtempSync(join(tmpdir(), 'kiln-refused-'));
after(async () => {
  await dropSchema(schema);
  rmSync(dir, { recursive: true, force: true });
});

describe('refused outcomes (KILN_TEST_PG)', () => {
  it('logs and counts an outcome the fence refused, with its reason', { timeout: 60_000 }, async () => {
    const log = captureLog();
    const server = await startServer({ KILN_STORE: TEST_PG_URL, KILN_PG_SCHEMA: schema }, undefined, {
      logger: log.logger,
    });
    const db = await connect();
    try {
      const release = join(dir, 'release');
      const created = await server.request('POST', '/v1/jobs', { type: 'test.hold', payload: { release } });
      assert.equal(created.status, 201, created.text);
      const id = created.body.id as string;
      await server.whenStatus(id, 'running');
      await db.query(`UPDATE "${schema}".jobs SET attempts = attempts + 1 WHERE id = $1`, [id]);
      writeFileSync(release, '');

      const line = await log.waitFor((l) => l.job === id && typeof l.reason === 'string', 'the refused outcome');
      assert.equal(line.reason, 'rerun');
      assert.equal(line.attempt, 1);
      assert.equal(line.outcome, 'completed');
      assert.equal(line.level, 40, 'a warning');
      const metrics = await server.request('GET', '/metrics');
      assert.match(metrics.text, /kiln_outcomes_refused_total\{reason="rerun"\} 1\b/);
      assert.match(metrics.text, /kiln_outcomes_refused_total\{reason="lease_lost"\} 0\b/);
      const job = await server.request('GET', `/v1/jobs/${id}`);
      assert.equal(job.body.status, 'running', 'the refused outcome changed nothing');
    } finally {
      await db.end();
      await server.close();
    }
  });
});
