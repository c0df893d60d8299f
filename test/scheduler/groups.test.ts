import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/kiln.js';
import { dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';

const schema = freshSchemaName();
const stores: [string, Record<string, string>][] = [
  ['memory', {}],
  ['sqlite file', { KILN_STORE: 'sqlite' }],
  ['postgres', { KILN_STORE: TEST_PG_URL, KILN_PG_SCHEMA: schema }],
];

for (const [name, env] of stores) {
  describe(`fair share between groups through the API (${name} store)`, () => {
    let server: TestServer;

    before(async () => {
      // One thread: test.sequence's `seq` is then the order in which jobs started.
      server = await startServer({ KILN_THREADS: '1', ...env });
    });

    after(async () => {
      await server.close();
      if (name === 'postgres') await dropSchema(schema);
    });

    it(
      'runs 10 jobs of group B among the first 20, submitted after 1,000 of group A',
      { timeout: 120_000 },
      async () => {
        assert.equal((await server.request('POST', '/v1/queue/pause')).status, 200);
        const job = (group: string, label: string) => ({ type: 'test.sequence', group, payload: { label } });
        const a = await server.request('POST', '/v1/jobs/batch', {
          jobs: Array.from({ length: 1000 }, (_, i) => job('tenant-a', `a${i}`)),
        });
        assert.equal(a.status, 201);
        const b = await server.request('POST', '/v1/jobs/batch', {
          jobs: Array.from({ length: 10 }, (_, i) => job('tenant-b', `b${i}`)),
        });
        assert.equal(b.status, 201);
        assert.equal(b.body.jobs[0].group, 'tenant-b');
        assert.equal((await server.request('POST', '/v1/queue/resume')).status, 200);

        const starts: number[] = [];
        for (const submitted of b.body.jobs) {
          const done = await server.waitForJob(submitted.id);
          assert.equal(done.status, 'completed');
          starts.push((done.result as { seq: number }).seq);
        }
        // Turns alternate: a0 b0 a1 b1 … so B's jobs start 2nd, 4th, … 20th.
        assert.deepEqual(
          starts,
          Array.from({ length: 10 }, (_, i) => 2 * (i + 1)),
        );
        const lastA = await server.waitForJob(a.body.jobs[999].id);
        assert.equal((lastA.result as { seq: number }).seq, 1010, 'and group A finishes in its own order');

        const listed = await server.request('GET', '/v1/jobs?group=tenant-b&limit=500');
        assert.equal(listed.status, 200);
        assert.deepEqual(
          listed.body.jobs.map((j: { id: string }) => j.id),
          b.body.jobs.map((j: { id: string }) => j.id).reverse(),
        );
      },
    );

    it('refuses a group that is not 1–128 letters, digits, ., _, : or -', async () => {
      for (const group of ['', 'has space', 'x'.repeat(129), 'ümlaut', 42]) {
        const response = await server.request('POST', '/v1/jobs', { type: 'noop', group });
        assert.equal(response.status, 400, JSON.stringify(group));
        assert.equal(response.body.code, 'validation_error');
        assert.equal(response.body.errors[0].path, 'group');
      }
      const bad = await server.request('GET', '/v1/jobs?group=a%20b');
      assert.equal(bad.status, 400);
      const ok = await server.request('POST', '/v1/jobs', { type: 'noop', group: 'org:42/x'.replace('/', '.') });
      assert.equal(ok.status, 201);
      assert.equal(ok.body.group, 'org:42.x');
      assert.equal((await server.request('GET', `/v1/jobs/${ok.body.id}`)).body.group, 'org:42.x');
    });
  });
}
