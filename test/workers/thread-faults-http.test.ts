import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/kiln.js';
import { captureLog } from '../support/log-lines.js';
import { repoRoot } from '../support/paths.js';
import { dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';

/**
 * Misbehaving handlers beside ordinary ones, through HTTP, a SQLite file and real
 * worker threads (the fixtures of test/fixtures/tasks): who is charged for a crash,
 * what the log and the metrics say, recycling, isolation and the result ceiling.
 */

const tasksDir = `${repoRoot}test/fixtures/tasks`;

async function submit(server: TestServer, body: Record<string, unknown>): Promise<string> {
  const response = await server.request('POST', '/v1/jobs', body);
  assert.equal(response.status, 201, response.text);
  return response.body.id as string;
}

async function restarts(server: TestServer, reason: string): Promise<number> {
  const text = (await server.request('GET', '/metrics')).text;
  const line = text.split('\n').find((l) => l.startsWith(`kiln_thread_restarts_total{reason="${reason}"} `));
  assert.ok(line !== undefined, `kiln_thread_restarts_total{reason="${reason}"} is exported`);
  return Number(line.split(' ')[1]);
}

const pgSchema = freshSchemaName();
const STORES = [
  ['a SQLite file', { KILN_STORE: 'sqlite' }],
  ['PostgreSQL', { KILN_STORE: TEST_PG_URL, KILN_PG_SCHEMA: pgSchema }],
] as const;

for (const [storeName, storeEnv] of STORES) {
  describe(`a crash is charged to the job whose work raised it (${storeName})`, () => {
    let server: TestServer;
    const log = captureLog();
    before(async () => {
      server = await startServer({ ...storeEnv, KILN_TASKS_DIR: tasksDir }, undefined, { logger: log.logger });
    });
    after(async () => {
      await server.close();
      if (storeName === 'PostgreSQL') await dropSchema(pgSchema);
    });

    it('a throw from a timer after its handler returned does not fail the next job on the thread', async () => {
      const culprit = await submit(server, { type: 'fixture.late-throw', payload: { n: 1 }, maxAttempts: 1 });
      assert.equal((await server.waitForJob(culprit)).status, 'completed');
      const innocent = await submit(server, { type: 'fixture.fire', payload: {}, maxAttempts: 1 });
      const job = await server.waitForJob(innocent);
      // Its first attempt was cut short by the culprit's timer, given back uncounted, and
      // ran again on a fresh thread, where nothing was left to fire.
      assert.equal(job.status, 'completed', JSON.stringify(job));
      assert.equal(job.result, 'nothing to fire');
      assert.equal((job.error as { code: string }).code, 'interrupted');

      assert.equal(await restarts(server, 'crashed'), 1);
      const crashes = log.lines.filter((line) => line.reason === 'crashed');
      assert.equal(crashes.length, 1, JSON.stringify(crashes));
      const [crash] = crashes;
      assert.deepEqual(crash?.culprit, { jobId: culprit, attempt: 1, late: true });
      assert.deepEqual(crash?.attempts, [{ jobId: innocent, attempt: 1 }]);
      assert.equal(crash?.cause, 'Error: late throw 1 (an uncaught exception)');
      assert.match(String(crash?.msg), new RegExp(`job ${culprit} \\(attempt 1\\) raised an uncaught error after`));
      // A finished job stays finished: nothing done is undone.
      assert.equal((await server.waitForJob(culprit)).status, 'completed');
    });

    it('process.exit from a timer after its handler returned is charged to that job, not the next', async () => {
      const before = await restarts(server, 'crashed');
      const culprit = await submit(server, {
        type: 'fixture.late-throw',
        payload: { n: 3, exit: true },
        maxAttempts: 1,
      });
      assert.equal((await server.waitForJob(culprit)).status, 'completed');
      const innocent = await submit(server, { type: 'fixture.fire', payload: {}, maxAttempts: 1 });
      const job = await server.waitForJob(innocent);
      assert.equal(job.status, 'completed', JSON.stringify(job));
      assert.equal((job.error as { code: string }).code, 'interrupted');
      assert.equal(await restarts(server, 'crashed'), before + 1);
      const crash = log.lines.filter((line) => line.reason === 'crashed').at(-1);
      assert.deepEqual(crash?.culprit, { jobId: culprit, attempt: 1, late: true });
      assert.deepEqual(crash?.attempts, [{ jobId: innocent, attempt: 1 }]);
      assert.equal(crash?.cause, 'Error: process.exit(9) after its handler returned (process.exit)');
      assert.equal((await server.waitForJob(culprit)).status, 'completed');
    });

    it('a timeout is logged with the job, its attempt and the cause, and counted', async () => {
      const id = await submit(server, { type: 'fixture.block', payload: {}, maxAttempts: 1, timeoutMs: 200 });
      const job = await server.waitForJob(id);
      assert.equal((job.error as { code: string }).code, 'timeout');
      assert.equal(await restarts(server, 'timeout'), 1);
      const lines = log.lines.filter((line) => line.reason === 'timeout');
      assert.deepEqual(
        lines.map(({ level, attempts, cause, msg }) => ({ level, attempts, cause, msg })),
        [
          {
            level: 40,
            attempts: [{ jobId: id, attempt: 1 }],
            cause: 'ran longer than its timeout of 200 ms',
            msg: 'worker thread replaced (timeout)',
          },
        ],
      );
    });

    it('a timer that throws while its own attempt still runs fails that attempt as worker_crashed', async () => {
      const culprit = await submit(server, {
        type: 'fixture.late-throw',
        payload: { n: 2, fire: true, wait: true },
        maxAttempts: 1,
      });
      const job = await server.waitForJob(culprit);
      assert.equal(job.status, 'failed');
      assert.deepEqual(job.error, {
        code: 'worker_crashed',
        message: 'attempt 1 crashed its worker thread: Error: late throw 2 (an uncaught exception outside the handler)',
        attempt: 1,
      });
    });
  });
}

describe('thread recycling, isolation and the result ceiling', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({
      KILN_STORE: 'sqlite',
      KILN_TASKS_DIR: tasksDir,
      KILN_THREAD_MAX_JOBS: '3',
      KILN_MAX_RESULT_BYTES: '2048',
    });
  });
  after(() => server.close());

  const run = async (body: Record<string, unknown>) => server.waitForJob(await submit(server, body));

  it('KILN_THREAD_MAX_JOBS replaces a thread after that many attempts', async () => {
    const seen: Array<{ threadId: number; seen: unknown }> = [];
    for (const mark of ['a', 'b', 'c', 'd']) {
      const job = await run({ type: 'fixture.thread-state', payload: { mark } });
      assert.equal(job.status, 'completed', JSON.stringify(job));
      seen.push(job.result as { threadId: number; seen: unknown });
    }
    const [a, b, c, d] = seen;
    assert.equal(b?.threadId, a?.threadId);
    assert.equal(c?.threadId, a?.threadId);
    assert.notEqual(d?.threadId, a?.threadId, 'the fourth attempt ran on a new thread');
    assert.equal(d?.seen, null);
    assert.equal(await restarts(server, 'recycled'), 1);
  });

  it('an isolated task leaves nothing behind for the jobs after it', async () => {
    assert.equal((await run({ type: 'fixture.poison', payload: {} })).status, 'completed');
    for (const mark of ['after-1', 'after-2']) {
      const job = await run({ type: 'fixture.thread-state', payload: { mark } });
      assert.equal(job.status, 'completed');
      assert.equal(typeof job.result, 'object', `not poisoned: ${JSON.stringify(job.result)}`);
    }
    assert.ok((await restarts(server, 'isolated')) >= 1);
  });

  it('a result over KILN_MAX_RESULT_BYTES fails the job at once as result_too_large', async () => {
    const job = await run({ type: 'fixture.big-result', payload: { char: 'x', n: 5000 }, maxAttempts: 3 });
    assert.equal(job.status, 'failed');
    assert.equal(job.attempts, 1, 'not retried: the same result would come back');
    assert.equal(job.result, null);
    assert.deepEqual(job.error, {
      code: 'result_too_large',
      message:
        'ResultTooLargeError: the result is at least 5002 bytes of JSON, over the limit of 2048 (KILN_MAX_RESULT_BYTES)',
      attempt: 1,
    });
    const fits = await run({ type: 'fixture.big-result', payload: { char: 'x', n: 2000 } });
    assert.equal(fits.status, 'completed');
  });
});
