import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { FINISHED_ANSWER_MAX, FinishedAnswers } from '../../src/scheduler/finished-answers.js';
import { Retention } from '../../src/scheduler/retention.js';
import { silentLog } from '../../src/fault-log.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { freshSchemaName, dropSchema, TEST_PG_URL } from '../support/postgres.js';
import { startServer, type TestServer } from '../support/kiln.js';
import { newJob, OWNER } from '../support/store-fixtures.js';

describe('finished answers: what is kept', () => {
  it('keeps answers within its budget, the least recently used going first', () => {
    const answers = new FinishedAnswers(true, 30);
    const epoch = answers.epoch();
    answers.keep('a', 'x'.repeat(10), epoch);
    answers.keep('b', 'y'.repeat(10), epoch);
    answers.keep('c', 'z'.repeat(10), epoch);
    assert.equal(answers.get('a'), 'x'.repeat(10)); // a is now the most recently used
    answers.keep('d', 'w'.repeat(10), epoch);
    assert.equal(answers.get('b'), undefined, 'the least recently used went');
    assert.deepEqual(
      ['a', 'c', 'd'].map((id) => answers.get(id)?.length),
      [10, 10, 10],
    );
    answers.keep('a', 'v'.repeat(20), epoch); // replaced, not added twice
    assert.equal(answers.get('a'), 'v'.repeat(20));
    assert.equal(answers.size, 2, 'c went to make room for the longer a');
  });

  it('refuses an answer read across a change, a long one, and everything when off', () => {
    const answers = new FinishedAnswers(true);
    const before = answers.epoch();
    answers.forget('other');
    answers.keep('a', '{}', before);
    assert.equal(answers.get('a'), undefined, 'read before a change: not kept');
    answers.keep('a', '{}', answers.epoch());
    assert.equal(answers.get('a'), '{}');
    answers.keep('long', 'x'.repeat(FINISHED_ANSWER_MAX + 1), answers.epoch());
    assert.equal(answers.get('long'), undefined);
    answers.forget('a');
    assert.equal(answers.get('a'), undefined);
    answers.keep('b', '{}', answers.epoch());
    answers.forgetAll();
    assert.equal(answers.size, 0);

    const off = new FinishedAnswers(false);
    off.keep('a', '{}', off.epoch());
    assert.equal(off.get('a'), undefined);
  });
});

describe('finished answers: the retention purge forgets them', () => {
  it('after a purge that deleted jobs, and not after one that deleted none', async () => {
    let now = 1_700_000_000_000;
    const store = await SqliteStore.open(':memory:', { capacity: 100, clock: () => now, synchronous: 'normal' });
    try {
      const answers = new FinishedAnswers(true);
      const retention = new Retention({
        store,
        retainCompletedMs: 60_000,
        retainFailedMs: 60_000,
        log: silentLog,
        answers,
      });
      const job = newJob({ createdAt: now });
      assert.ok((await store.insert([job])).ok);
      const claimed = (await store.claim({ owner: OWNER, leaseMs: 60_000, batches: 1, micro: null })).flat()[0];
      assert.equal(claimed?.id, job.id);
      await store.finish([{ id: job.id, attempt: 1, owner: OWNER, outcome: { kind: 'completed', resultText: '1' } }]);
      answers.keep(job.id, '{"kept":true}', answers.epoch());

      assert.equal(await retention.purgeExpired(), 0, 'within its retention');
      assert.equal(answers.get(job.id), '{"kept":true}', 'nothing deleted: nothing forgotten');
      now += 120_000;
      assert.equal(await retention.purgeExpired(), 1);
      assert.equal(answers.get(job.id), undefined);
      assert.equal(await store.get(job.id), null);
    } finally {
      await store.close();
    }
  });
});

describe('finished answers: GET /v1/jobs/{id} on a store of one process', () => {
  let server: TestServer;
  after(() => server?.close());

  it('answers a finished job from what it kept, byte for byte, until it is removed', async () => {
    server = await startServer({ KILN_STORE: 'sqlite' });
    const created = await server.request('POST', '/v1/jobs', { type: 'hash.sha256', payload: { data: 'é ✓' } });
    assert.equal(created.status, 201);
    await server.waitForJob(created.body.id);
    const answers = server.kiln.scheduler.finishedAnswers;
    assert.equal(answers.enabled, true);
    const first = await server.request('GET', `/v1/jobs/${created.body.id}`);
    assert.equal(answers.get(created.body.id), first.text, 'kept as it was sent');
    const second = await server.request('GET', `/v1/jobs/${created.body.id}?wait=5`);
    assert.equal(second.status, 200);
    assert.equal(second.text, first.text);
    assert.equal(second.headers.get('content-type'), first.headers.get('content-type'));
    assert.equal(first.headers.get('content-type'), 'application/json; charset=utf-8');
    assert.equal(second.body.status, 'completed');

    assert.equal((await server.request('DELETE', `/v1/jobs/${created.body.id}`)).status, 204);
    assert.equal((await server.request('GET', `/v1/jobs/${created.body.id}`)).status, 404);
    assert.equal(answers.get(created.body.id), undefined);
  });

  it('never answers a retried job as it was before the retry, with polls in flight across it', async () => {
    // Dispatch paused: a cancelled job that is retried stays queued, so a poll that
    // follows the retry has one right answer.
    assert.equal((await server.request('POST', '/v1/queue/pause')).status, 200);
    const created = await server.request('POST', '/v1/jobs', { type: 'noop' });
    const id = created.body.id as string;
    const answers = server.kiln.scheduler.finishedAnswers;
    for (let round = 0; round < 30; round++) {
      const cancelled = await server.request('POST', `/v1/jobs/${id}/cancel`);
      assert.equal(cancelled.status, 200, cancelled.text);
      const polled = await server.request('GET', `/v1/jobs/${id}`);
      assert.equal(polled.body.status, 'cancelled');
      assert.equal(polled.body.finishedAt, cancelled.body.finishedAt, 'not an earlier round kept');
      const inFlight = Array.from({ length: 10 }, () => server.request('GET', `/v1/jobs/${id}`));
      const retried = await server.request('POST', `/v1/jobs/${id}/retry`);
      assert.equal(retried.status, 200, retried.text);
      for (const answer of await Promise.all(inFlight)) assert.ok(['cancelled', 'queued'].includes(answer.body.status));
      const after = await server.request('GET', `/v1/jobs/${id}`);
      assert.equal(after.body.status, 'queued', `round ${round}: a poll after the retry`);
      assert.equal(answers.get(id), undefined);
    }
    assert.equal((await server.request('POST', '/v1/queue/resume')).status, 200);
  });
});

describe('finished answers: while the store thread is down', () => {
  it('answers 503 as every read does, and forgets what it kept once a new thread holds the file', async () => {
    let store: SqliteStore | null = null;
    const server = await startServer({ KILN_STORE: 'sqlite' }, async (dir) => {
      store = await SqliteStore.open(join(dir, 'kiln.db'), { capacity: 100, restartDelayMs: 1000 });
      return store;
    });
    try {
      const created = await server.request('POST', '/v1/jobs', { type: 'noop' });
      await server.waitForJob(created.body.id);
      const first = await server.request('GET', `/v1/jobs/${created.body.id}`);
      const answers = server.kiln.scheduler.finishedAnswers;
      assert.equal(answers.size, 1);

      const opened = store as SqliteStore | null;
      assert.ok(opened?.thread);
      let back = false;
      const restarted = new Promise<void>((resolve) => {
        const unsubscribe = opened.subscribe((event) => {
          if (event.kind !== 'ready') return;
          back = true;
          unsubscribe();
          resolve();
        });
      });
      await opened.thread.terminate();
      const down = await server.request('GET', `/v1/jobs/${created.body.id}`);
      // A machine slow enough to take the restart delay over one request reads the new thread.
      if (back) assert.equal(down.status, 200, down.text);
      else assert.equal(down.status, 503, down.text);
      await restarted;
      assert.equal(answers.size, 0, 'forgotten when the new thread took the file');
      const again = await server.request('GET', `/v1/jobs/${created.body.id}`);
      assert.equal(again.text, first.text);
    } finally {
      await server.close();
    }
  });
});

describe('finished answers: a store shared by several servers (KILN_TEST_PG)', () => {
  const schema = freshSchemaName();
  let server: TestServer;
  after(async () => {
    await server?.close();
    await dropSchema(schema);
  });

  it('keeps nothing: another server may change a finished job', async () => {
    server = await startServer({ KILN_STORE: TEST_PG_URL, KILN_PG_SCHEMA: schema });
    const created = await server.request('POST', '/v1/jobs', { type: 'noop' });
    await server.waitForJob(created.body.id);
    const answers = server.kiln.scheduler.finishedAnswers;
    assert.equal(answers.enabled, false);
    const first = await server.request('GET', `/v1/jobs/${created.body.id}`);
    const second = await server.request('GET', `/v1/jobs/${created.body.id}`);
    assert.equal(second.text, first.text);
    assert.equal(answers.size, 0);
  });
});
