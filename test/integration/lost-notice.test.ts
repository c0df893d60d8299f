import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { followJobEvents } from '../support/http.js';
import { startServer, type TestServer } from '../support/kiln.js';
import { connect, dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';

/**
 * On a shared store, another server's change reaches this one as a notification, and
 * one can be lost (a dropped listener connection). Here a change is written straight
 * into the database, with no notification at all: the long polls and event streams
 * that watch the job must still see it, from the server's sweep of watched jobs.
 */
describe('watchers of a job changed without a notification (PostgreSQL)', { timeout: 30_000 }, () => {
  const schema = freshSchemaName();
  let server: TestServer;

  before(async () => {
    server = await startServer({ KILN_STORE: TEST_PG_URL, KILN_PG_SCHEMA: schema });
    assert.equal((await server.request('POST', '/v1/queue/pause')).status, 200);
  });

  after(async () => {
    await server.close();
    await dropSchema(schema);
  });

  /** Opens the job's event stream; resolves once its first frame came, with the statuses it shows after it. */
  function openStream(id: string): Promise<{ first: string; rest: Promise<string[]> }> {
    return new Promise((resolve, reject) => {
      let opened = false;
      // The callback runs once a frame came, after followJobEvents answered.
      const stream = followJobEvents(server.url, id, (job) => {
        if (opened) return;
        opened = true;
        resolve({ first: job.status, rest: stream.ended.then((shown) => shown.slice(1).map((j) => j.status)) });
      });
      stream.ended.catch(reject);
    });
  }

  async function queuedJob(): Promise<string> {
    const created = await server.request('POST', '/v1/jobs', { type: 'test.quick', payload: { n: 1 } });
    assert.equal(created.status, 201, created.text);
    return created.body.id as string;
  }

  it('shows a cancel that came without a notification to the event stream and the long poll', async () => {
    const id = await queuedJob();
    const stream = await openStream(id);
    assert.equal(stream.first, 'queued');
    const poll = server.request('GET', `/v1/jobs/${id}?wait=60`);
    const db = await connect();
    try {
      const updated = await db.query(
        `UPDATE "${schema}".jobs SET status = 'cancelled', finished_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint
         WHERE id = $1 AND status = 'queued'`,
        [id],
      );
      assert.equal(updated.rowCount, 1);
    } finally {
      await db.end();
    }
    assert.deepEqual(await stream.rest, ['cancelled']);
    const answer = await poll;
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.body.status, 'cancelled');
  });

  it('ends the event stream and the long poll of a job deleted without a notification', async () => {
    const id = await queuedJob();
    const stream = await openStream(id);
    assert.equal(stream.first, 'queued');
    const poll = server.request('GET', `/v1/jobs/${id}?wait=60`);
    const db = await connect();
    try {
      const deleted = await db.query(`DELETE FROM "${schema}".jobs WHERE id = $1`, [id]);
      assert.equal(deleted.rowCount, 1);
    } finally {
      await db.end();
    }
    assert.deepEqual(await stream.rest, []);
    const answer = await poll;
    assert.equal(answer.status, 404, answer.text);
  });
});
