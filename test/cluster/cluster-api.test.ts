import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { killAllKilns, type KilnProcess, spawnKiln } from '../support/kiln-process.js';
import { pollUntil } from '../support/poll.js';
import { connect, dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';
import { tempFiles } from '../support/temp-files.js';

/**
 * The API across servers: three real server processes on one schema; a request to one
 * about a job another runs behaves as if there were one server.
 */
describe('cluster: the API holds across servers on one database', () => {
  const schema = freshSchemaName();
  const newPath = tempFiles('kiln-cluster-api-');
  let servers: KilnProcess[] = [];

  before(async () => {
    const env = { KILN_STORE: TEST_PG_URL, KILN_PG_SCHEMA: schema, KILN_PG_POOL_SIZE: '3', KILN_THREADS: '1' };
    for (let i = 0; i < 3; i++) servers.push(await spawnKiln(env));
  });
  after(async () => {
    await killAllKilns();
    servers = [];
    await dropSchema(schema);
  });

  /** Runs a test.hold job and answers it with the server whose thread holds it, and another one. */
  async function holdOnSomeServer(
    name: string,
  ): Promise<{ id: string; release: string; runner: KilnProcess; other: KilnProcess }> {
    const release = `${newPath()}.${name}`;
    const [first] = servers as [KilnProcess];
    const created = await first.request('POST', '/v1/jobs', { type: 'test.hold', payload: { release } });
    assert.equal(created.status, 201, created.text);
    const id = created.body.id as string;
    await first.waitForStatus(id, 'running');
    const db = await connect();
    try {
      const row = await db.query<{ lease_owner: string }>(`SELECT lease_owner FROM "${schema}".jobs WHERE id = $1`, [
        id,
      ]);
      const pid = Number((row.rows[0]?.lease_owner ?? '').split(':')[1]);
      const runner = servers.find((server) => server.child.pid === pid);
      assert.ok(runner, `the job runs on a server of this test (owner ${row.rows[0]?.lease_owner})`);
      const other = servers.find((server) => server !== runner) as KilnProcess;
      return { id, release, runner, other };
    } finally {
      await db.end();
    }
  }

  it(
    'lists every server in GET /v1/nodes, and counts the threads of all in /v1/queue',
    { timeout: 60_000 },
    async () => {
      const [a] = servers as [KilnProcess];
      const nodes = await a.request('GET', '/v1/nodes');
      assert.equal(nodes.status, 200);
      assert.deepEqual(
        nodes.body.nodes.map((node: { pid: number }) => node.pid).sort(),
        servers.map((server) => server.child.pid).sort(),
      );
      for (const node of nodes.body.nodes) {
        assert.equal(node.threads, 1);
        assert.equal(typeof node.version, 'string');
        assert.ok(node.lastSeenAt >= node.startedAt);
      }
      const queue = await a.request('GET', '/v1/queue');
      assert.equal(queue.body.threads.size, 3);
      assert.equal((await a.request('POST', '/v1/jobs', { type: 'noop' })).status, 201);
      const metrics = await a.request('GET', '/metrics');
      assert.match(metrics.text, /^kiln_nodes 3$/m);
      assert.match(metrics.text, /^kiln_store_commit_seconds_count [1-9]/m);
    },
  );

  it('answers a long poll on one server when the job completes on another', { timeout: 60_000 }, async (t) => {
    const { id, release, other } = await holdOnSomeServer('wait');
    const poll = other.request('GET', `/v1/jobs/${id}?wait=30`);
    const released = Date.now();
    writeFileSync(release, '');
    const answer = await poll;
    assert.equal(answer.status, 200);
    assert.equal(answer.body.status, 'completed');
    assert.equal(typeof answer.body.result.pid, 'number');
    t.diagnostic(`the long poll on the other server answered ${Date.now() - released} ms after the release`);
  });

  it('streams, on one server, the changes a job goes through on another', { timeout: 60_000 }, async () => {
    const { id, release, other } = await holdOnSomeServer('stream');
    const completed = other.waitForStatus(id, 'completed');
    // The stream is open (its first frame is the job as it is) before the job ends.
    await other.waitForStatus(id, 'running');
    writeFileSync(release, '');
    const job = await completed;
    assert.equal(job.status, 'completed');
  });

  it(
    'cancels, from one server, a job running on another: its thread there is stopped',
    { timeout: 60_000 },
    async (t) => {
      const { id, runner, other } = await holdOnSomeServer('cancel');
      const sent = Date.now();
      const cancelled = await other.request('POST', `/v1/jobs/${id}/cancel`);
      assert.equal(cancelled.status, 200, cancelled.text);
      assert.equal(cancelled.body.status, 'cancelled');
      // The runner gives its thread up: nothing busy there any more.
      await pollUntil(
        async () => (await runner.request('GET', '/metrics')).text,
        (text) => /^kiln_pool_busy_threads 0$/m.test(text),
        { what: 'the runner to give up the cancelled job (no busy thread)', deadlineMs: 10_000, everyMs: 20 },
      );
      t.diagnostic(`the runner stopped the attempt ${Date.now() - sent} ms after the cancel was sent`);
      const job = await runner.request('GET', `/v1/jobs/${id}`);
      assert.equal(job.body.status, 'cancelled');
      assert.equal(job.body.error.code, 'cancelled');
    },
  );

  it('pauses every server from one, and resumes them from another', { timeout: 60_000 }, async () => {
    const [a, b, c] = servers as [KilnProcess, KilnProcess, KilnProcess];
    assert.equal((await a.request('POST', '/v1/queue/pause')).body.paused, true);
    for (const server of [b, c]) {
      await pollUntil(
        async () => (await server.request('GET', '/v1/queue')).body.paused,
        (paused) => paused === true,
        { what: `${server.url} to be paused`, deadlineMs: 30_000, everyMs: 10 },
      );
    }
    const created = await b.request('POST', '/v1/jobs', { type: 'test.quick' });
    assert.equal(created.status, 201);
    // Nobody runs it while paused: a one-second long poll on each server sees it queued.
    const polls = await Promise.all(servers.map((s) => s.request('GET', `/v1/jobs/${created.body.id}?wait=1`)));
    for (const poll of polls) assert.equal(poll.body.status, 'queued');
    assert.equal((await c.request('POST', '/v1/queue/resume')).body.paused, false);
    const done = await a.waitForJob(created.body.id);
    assert.equal(done.status, 'completed');
    for (const server of servers) {
      await pollUntil(
        async () => (await server.request('GET', '/v1/queue')).body.paused,
        (paused) => paused === false,
        { what: `${server.url} to be resumed`, deadlineMs: 30_000, everyMs: 10 },
      );
    }
  });

  it('makes one job of one idempotency key sent to three servers at once', { timeout: 60_000 }, async () => {
    for (let round = 0; round < 20; round++) {
      const body = { type: 'test.quick', payload: { n: round }, idempotencyKey: `same-${round}` };
      const answers = await Promise.all(servers.map((server) => server.request('POST', '/v1/jobs', body)));
      const ids = new Set(answers.map((answer) => answer.body.id));
      assert.equal(ids.size, 1, `round ${round}: ${answers.map((a) => a.text).join(' | ')}`);
      assert.deepEqual(
        answers.map((answer) => answer.status).sort(),
        [200, 200, 201],
        `round ${round}: one created, two replayed`,
      );
    }
    const conflict = await servers[1]?.request('POST', '/v1/jobs', {
      type: 'test.quick',
      payload: { n: 'other' },
      idempotencyKey: 'same-0',
    });
    assert.equal(conflict?.status, 409);
    assert.equal(conflict?.body.code, 'idempotency_conflict');
  });

  it('applies a task limit override made on one server on every server', { timeout: 60_000 }, async () => {
    const [a, b, c] = servers as [KilnProcess, KilnProcess, KilnProcess];
    const put = await a.request('PUT', '/v1/tasks/test.quick/limits', { concurrency: 2 });
    assert.equal(put.status, 200, put.text);
    const limitsOn = async (server: KilnProcess) =>
      (await server.request('GET', '/v1/tasks')).body.tasks.find((t: { name: string }) => t.name === 'test.quick')
        .limits;
    // Each server reads the overrides again once a second.
    for (const server of [b, c]) {
      await pollUntil(
        () => limitsOn(server),
        (limits) => limits.concurrency === 2,
        { what: `${server.url} to apply the override`, deadlineMs: 30_000 },
      );
    }
    assert.equal((await c.request('DELETE', '/v1/tasks/test.quick/limits')).status, 200);
    for (const server of [a, b]) {
      await pollUntil(
        () => limitsOn(server),
        (limits) => limits.concurrency === null,
        { what: `${server.url} to drop the override`, deadlineMs: 30_000 },
      );
    }
  });

  it('applies group limits set on one server on every server', { timeout: 60_000 }, async () => {
    const [a, b, c] = servers as [KilnProcess, KilnProcess, KilnProcess];
    const put = await a.request('PUT', '/v1/groups/tenant-cluster/limits', { concurrency: 2 });
    assert.equal(put.status, 200, put.text);
    // What GET /v1/groups shows as limits is what that server applies.
    const limitsOn = async (server: KilnProcess) =>
      (await server.request('GET', '/v1/groups')).body.groups.find((g: { name: string }) => g.name === 'tenant-cluster')
        ?.limits ?? null;
    for (const server of [b, c]) {
      await pollUntil(
        () => limitsOn(server),
        (limits) => limits?.concurrency === 2,
        { what: `${server.url} to apply the group's limits`, deadlineMs: 30_000 },
      );
    }
    assert.equal((await c.request('DELETE', '/v1/groups/tenant-cluster/limits')).status, 204);
    for (const server of [a, b]) {
      await pollUntil(
        () => limitsOn(server),
        (limits) => limits === null,
        { what: `${server.url} to drop the group's limits`, deadlineMs: 30_000 },
      );
    }
  });
});
