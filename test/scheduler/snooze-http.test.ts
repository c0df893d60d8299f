import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { followJobEvents } from '../support/http.js';
import { startServer, type TestServer } from '../support/kiln.js';
import { pollUntil } from '../support/poll.js';
import { dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';

/**
 * `ctx.snooze(ms)` through the real API, real worker threads and each store: the job is
 * scheduled again with its attempt given back, shows its snoozes and next run, and is
 * counted; KILN_MAX_SNOOZES ends a job that snoozes for ever. The test.snooze fixture
 * snoozes its first `times` runs (one thread, so it sees every run of a job).
 */
const schema = freshSchemaName();
const clusterSchema = freshSchemaName();
const dir = mkdtempSync(join(tmpdir(), 'kiln-snooze-'));
after(async () => {
  await dropSchema(schema);
  await dropSchema(clusterSchema);
  rmSync(dir, { recursive: true, force: true });
});

const stores: { name: string; env: Record<string, string> }[] = [
  { name: 'SQLite', env: { KILN_STORE: 'sqlite' } },
  { name: 'PostgreSQL (KILN_TEST_PG)', env: { KILN_STORE: TEST_PG_URL, KILN_PG_SCHEMA: schema } },
];

async function submit(server: TestServer, job: object): Promise<string> {
  const created = await server.request('POST', '/v1/jobs', job);
  assert.equal(created.status, 201, created.text);
  return created.body.id as string;
}

async function snoozedMetric(server: TestServer): Promise<number> {
  const metrics = await server.request('GET', '/metrics');
  const match = /^kiln_jobs_snoozed_total\{type="test\.snooze"\} (\d+)$/m.exec(metrics.text);
  assert.ok(match, 'kiln_jobs_snoozed_total{type="test.snooze"} is exposed');
  return Number(match[1]);
}

for (const store of stores) {
  describe(`snooze on ${store.name}`, { timeout: 120_000 }, () => {
    let server: TestServer;
    before(async () => {
      // Any type measured under 50 ms counts as tiny, so test.snooze is micro-batched once learned.
      server = await startServer({ ...store.env, KILN_THREADS: '1', KILN_MAX_SNOOZES: '2' }, undefined, {
        microBatch: { tinyMs: 50 },
      });
    });
    after(async () => {
      await server.close();
    });

    it('runs a returned snooze again later, without using up its only attempt', async () => {
      const before = await snoozedMetric(server);
      // 50 ms: the job is due later, so only the dispatcher's timer for the earliest due job runs it again.
      const id = await submit(server, { type: 'test.snooze', payload: { times: 2, ms: 50 }, maxAttempts: 1 });
      const job = await server.waitForJob(id);
      assert.equal(job.status, 'completed', JSON.stringify(job));
      assert.deepEqual(job.result, { run: 3, attempt: 1 });
      assert.equal(job.attempts, 1);
      assert.equal(job.snoozes, 2);
      assert.equal(job.error, null);
      assert.equal((await snoozedMetric(server)) - before, 2);
    });

    it('shows a snoozed job scheduled, with its snoozes and next run, in GET and its event stream', async () => {
      const id = await submit(server, { type: 'test.snooze', payload: { times: 1, ms: 86_400_000 } });
      let resolveSeen!: (job: any) => void;
      const seen = new Promise<any>((resolve) => {
        resolveSeen = resolve;
      });
      const stream = followJobEvents(server.url, id, (job) => {
        if (job.status === 'scheduled' && job.snoozes === 1) resolveSeen(job);
      });
      try {
        const shown = await seen;
        assert.equal(shown.attempts, 0, 'the snoozed attempt was given back');
        assert.ok(
          Date.parse(shown.runAt) >= Date.parse(shown.createdAt) + 86_000_000,
          `runs a day later: ${shown.runAt}`,
        );
        const read = await server.request('GET', `/v1/jobs/${id}`);
        assert.equal(read.body.status, 'scheduled');
        assert.equal(read.body.snoozes, 1);
        assert.equal(read.body.runAt, shown.runAt);
        const listed = await server.request('GET', '/v1/jobs?status=scheduled&type=test.snooze');
        assert.equal(listed.body.jobs.find((job: { id: string }) => job.id === id)?.snoozes, 1);
      } finally {
        stream.stop();
      }
      const cancelled = await server.request('POST', `/v1/jobs/${id}/cancel`);
      assert.equal(cancelled.status, 200, cancelled.text);
      assert.equal(cancelled.body.snoozes, 1);
    });

    it('fails a job at the snooze past KILN_MAX_SNOOZES (snooze_limit), whatever attempts it has left', async () => {
      const id = await submit(server, { type: 'test.snooze', payload: { times: 10, ms: 0 }, maxAttempts: 5 });
      const job = await server.waitForJob(id);
      assert.equal(job.status, 'failed');
      assert.equal(job.snoozes, 2, 'the refused snooze is not counted');
      assert.equal(job.attempts, 1);
      assert.deepEqual(job.error, {
        code: 'snooze_limit',
        message: 'the job snoozed 2 times, the most KILN_MAX_SNOOZES allows (2); it fails instead of snoozing again',
        attempt: 1,
      });
    });

    it('fails the attempt of a thrown snooze outside 0 to a day as a handler error naming the range', async () => {
      const id = await submit(server, {
        type: 'test.snooze',
        payload: { times: 1, ms: -5, throw: true },
        maxAttempts: 1,
      });
      const job = await server.waitForJob(id);
      assert.equal(job.status, 'failed');
      assert.equal(job.snoozes, 0);
      assert.deepEqual(job.error, {
        code: 'handler_error',
        message: 'SnoozeError: ctx.snooze(ms) takes a number of milliseconds from 0 to 86400000, got -5',
        attempt: 1,
      });
    });

    it('snoozes the jobs of a micro-batch each on its own', async () => {
      // Teach the dispatcher that test.snooze is tiny: a few jobs, one message each.
      for (let n = 0; n < 5; n++) {
        const warm = await submit(server, { type: 'test.snooze', payload: { times: 0 } });
        assert.equal((await server.waitForJob(warm)).status, 'completed');
      }
      await server.request('POST', '/v1/queue/pause');
      const response = await server.request('POST', '/v1/jobs/batch', {
        jobs: Array.from({ length: 40 }, (_, n) => ({
          type: 'test.snooze',
          payload: { times: n % 2, ms: 0, throw: n % 4 === 1 },
          maxAttempts: 1,
        })),
      });
      assert.equal(response.status, 201, response.text);
      const ids = response.body.jobs.map((job: { id: string }) => job.id) as string[];
      const before = server.kiln.scheduler.dispatchStats;
      await server.request('POST', '/v1/queue/resume');
      const done = await Promise.all(ids.map((id) => server.waitForJob(id)));
      for (const [n, job] of done.entries()) {
        assert.equal(job.status, 'completed', JSON.stringify(job));
        assert.equal(job.snoozes, n % 2);
        assert.equal(job.attempts, 1);
        assert.deepEqual(job.result, { run: 1 + (n % 2), attempt: 1 });
      }
      const after = server.kiln.scheduler.dispatchStats;
      const attempts = after.attempts - before.attempts;
      assert.equal(attempts, 60, '40 jobs, 20 of them twice');
      assert.ok(after.messages - before.messages < attempts, 'some messages held several jobs');
    });
  });
}

describe('snooze on a PostgreSQL cluster (KILN_TEST_PG)', { timeout: 120_000 }, () => {
  it('runs a snoozed job again when it is due, on whichever server of the cluster', async () => {
    const env = { KILN_STORE: TEST_PG_URL, KILN_PG_SCHEMA: clusterSchema, KILN_THREADS: '1' };
    const servers = [await startServer(env), await startServer(env)];
    try {
      const [first, second] = servers as [TestServer, TestServer];
      const ready = join(dir, 'ready');
      const id = await submit(first, { type: 'test.snooze', payload: { untilFile: ready, ms: 100 }, maxAttempts: 1 });
      // Snoozes every 100 ms until the file is there (KILN_MAX_SNOOZES allows 100 of them).
      await pollUntil(
        async () => (await second.request('GET', `/v1/jobs/${id}`)).body,
        (job) => job.snoozes >= 1,
        { what: 'the job to snooze, as the other server reads it' },
      );
      writeFileSync(ready, '');
      const job = await second.waitForJob(id);
      assert.equal(job.status, 'completed', JSON.stringify(job));
      assert.equal(job.attempts, 1, 'no snoozed attempt was counted');
      assert.ok(typeof job.snoozes === 'number' && job.snoozes >= 1, `snoozes: ${String(job.snoozes)}`);
      assert.deepEqual((job.result as { attempt: number }).attempt, 1);
    } finally {
      for (const server of servers) await server.close();
    }
  });
});
