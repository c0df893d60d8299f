import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Reply, Request } from '../../src/store/sqlite/protocol.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import type { JobStore } from '../../src/store/store.js';
import { followJobEvents } from '../support/http.js';
import { startServer, type TestServer } from '../support/kiln.js';
import { connect, dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';

/**
 * A change whose news never reaches the server: on a shared store, another server's
 * notification can be lost (a dropped listener connection); on SQLite, a write can
 * commit just as the store thread dies, before it answers. Here the change is written
 * straight into the database: the long polls and event streams that watch the job must
 * still see it, from the server's sweep of watched jobs (every second on PostgreSQL,
 * when a new store thread is up on SQLite).
 */

/** Resolves once the store has answered its next read of `id` (the long poll's first read). */
function nextRead(store: JobStore, id: string): Promise<void> {
  const read = store.get;
  return new Promise((resolve) => {
    store.get = async function (this: JobStore, asked: string) {
      const job = await read.call(this, asked);
      if (asked === id) {
        store.get = read;
        resolve();
      }
      return job;
    };
  });
}

/** Opens the job's event stream; resolves once its first frame came, with the statuses it shows after it. */
function openStream(server: TestServer, id: string): Promise<{ first: string; rest: Promise<string[]> }> {
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

/**
 * A queued job watched by an event stream (its first frame shown) and by a long poll
 * (its first read answered): both have read the job before `change` runs.
 */
async function watchedJob(
  server: TestServer,
): Promise<{ id: string; stream: Promise<string[]>; poll: ReturnType<TestServer['request']> }> {
  const created = await server.request('POST', '/v1/jobs', { type: 'test.quick', payload: { n: 1 } });
  assert.equal(created.status, 201, created.text);
  const id = created.body.id as string;
  const stream = await openStream(server, id);
  assert.equal(stream.first, 'queued');
  const polled = nextRead(server.kiln.store, id);
  const poll = server.request('GET', `/v1/jobs/${id}?wait=60`);
  await polled;
  return { id, stream: stream.rest, poll };
}

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

  async function sql(text: string, id: string): Promise<number | null> {
    const db = await connect();
    try {
      return (await db.query(text, [id])).rowCount;
    } finally {
      await db.end();
    }
  }

  it('shows a cancel that came without a notification to the event stream and the long poll', async () => {
    const { id, stream, poll } = await watchedJob(server);
    const updated = await sql(
      `UPDATE "${schema}".jobs SET status = 'cancelled', finished_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint
       WHERE id = $1 AND status = 'queued'`,
      id,
    );
    assert.equal(updated, 1);
    assert.deepEqual(await stream, ['cancelled']);
    const answer = await poll;
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.body.status, 'cancelled');
  });

  it('ends the event stream and the long poll of a job deleted without a notification', async () => {
    const { id, stream, poll } = await watchedJob(server);
    assert.equal(await sql(`DELETE FROM "${schema}".jobs WHERE id = $1`, id), 1);
    assert.deepEqual(await stream, []);
    const answer = await poll;
    assert.equal(answer.status, 404, answer.text);
  });
});

describe('watchers of a job changed as the SQLite store thread died', { timeout: 30_000 }, () => {
  let server: TestServer;
  let store: SqliteStore;

  before(async () => {
    server = await startServer({}, async (dir) => {
      store = await SqliteStore.open(join(dir, 'kiln.db'), { capacity: 1000, restartDelayMs: 20 });
      return store;
    });
    assert.equal((await server.request('POST', '/v1/queue/pause')).status, 200);
  });

  after(() => server.close());

  it('shows the change to the event stream and the long poll once a new store thread is up', async () => {
    const { id, stream, poll } = await watchedJob(server);
    // A cancel the store thread commits and answers under a number the store never sent,
    // so the store hears nothing of it: a write that committed as the thread died.
    const thread = store.thread;
    assert.ok(thread);
    const seq = 1e9;
    const committed = new Promise<Extract<Reply, { kind: 'done' }>>((resolve) => {
      const look = (reply: Reply) => {
        if (reply.kind !== 'done' || !reply.replies.some((r) => r.seq === seq)) return;
        thread.off('message', look);
        resolve(reply);
      };
      thread.on('message', look);
    });
    const request: Request = { seq, ops: [{ op: 'cancel', id, now: Date.now() }] };
    thread.postMessage(request);
    const reply = await committed;
    assert.equal(reply.rolledBack, false);
    await thread.terminate();
    assert.deepEqual(await stream, ['cancelled']);
    const answer = await poll;
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.body.status, 'cancelled');
  });
});
