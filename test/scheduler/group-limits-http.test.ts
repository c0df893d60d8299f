import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { startServer } from '../support/kiln.js';
import { pollUntil } from '../support/poll.js';
import { holdFixture, holdJob, serverStores } from '../support/hold.js';

const { dir, schema } = holdFixture('kiln-group-limits-');

for (const [name, env] of serverStores(schema)) {
  describe(`group limits over HTTP: ${name}`, () => {
    it('holds a group to its concurrency while other groups run, and shows it in GET /v1/groups', async () => {
      const server = await startServer({ ...env, KILN_THREADS: '2' });
      try {
        const put = await server.request('PUT', '/v1/groups/tenant-a/limits', { concurrency: 1 });
        assert.equal(put.status, 200, put.text);
        assert.deepEqual(put.body, {
          name: 'tenant-a',
          limits: { concurrency: 1, rateLimit: null },
          running: 0,
          queued: 0,
        });
        const a1 = await holdJob(server, dir, 'a1', { group: 'tenant-a' });
        const a2 = await holdJob(server, dir, 'a2', { group: 'tenant-a' });
        const a3 = await holdJob(server, dir, 'a3', { group: 'tenant-a' });
        await server.whenStatus(a1.id, 'running');
        // b1 comes after a2 in claim order: running, it shows that a2 was passed over.
        const b1 = await holdJob(server, dir, 'b1', { group: 'tenant-b' });
        await server.whenStatus(b1.id, 'running');
        assert.equal((await server.request('GET', `/v1/jobs/${a2.id}`)).body.status, 'queued');
        const groups = await server.request('GET', '/v1/groups');
        assert.equal(groups.status, 200, groups.text);
        assert.deepEqual(groups.body, {
          groups: [
            { name: 'tenant-a', limits: { concurrency: 1, rateLimit: null }, running: 1, queued: 2 },
            { name: 'tenant-b', limits: null, running: 1, queued: 0 },
          ],
        });
        const metrics = await pollUntil(
          async () => (await server.request('GET', '/metrics')).text,
          (text) => /^kiln_group_limited_total\{group="tenant-a",limit="concurrency"\} [1-9]/m.test(text),
          { what: 'the held group counted as passed over' },
        );
        assert.match(metrics, /^kiln_group_limited_total\{group="tenant-a",limit="rate"\} 0$/m);
        assert.match(metrics, /^kiln_group_running\{group="tenant-a"\} 1$/m);
        assert.doesNotMatch(metrics, /group="tenant-b"/, 'a group without limits has no series');
        writeFileSync(a1.release, '');
        await server.whenStatus(a2.id, 'running');
        assert.equal((await server.request('GET', `/v1/jobs/${a3.id}`)).body.status, 'queued');
        const removed = await server.request('DELETE', '/v1/groups/tenant-a/limits');
        assert.equal(removed.status, 204, removed.text);
        assert.doesNotMatch((await server.request('GET', '/metrics')).text, /group="tenant-a"/, 'its series went');
        for (const job of [a2, a3, b1]) writeFileSync(job.release, '');
        for (const job of [a1, a2, a3, b1]) assert.equal((await server.waitForJob(job.id)).status, 'completed');
        assert.deepEqual((await server.request('GET', '/v1/groups')).body, { groups: [] });
      } finally {
        await server.close();
      }
    });

    it('keeps group limits across a restart, and refuses what is not a limit or a group', async () => {
      const first = await startServer(env);
      try {
        const put = await first.request('PUT', '/v1/groups/tenant-r/limits', {
          rateLimit: { max: 5, perMs: 60_000 },
        });
        assert.equal(put.status, 200, put.text);
        assert.deepEqual(put.body.limits, { concurrency: null, rateLimit: { max: 5, perMs: 60_000 } });
        assert.equal((await first.request('PUT', '/v1/groups/tenant-r/limits', {})).status, 400);
        assert.equal((await first.request('PUT', '/v1/groups/tenant-r/limits', { concurrency: 0 })).status, 400);
        assert.equal((await first.request('PUT', '/v1/groups/tenant-r/limits', { max: 1 })).status, 400);
        assert.equal((await first.request('PUT', '/v1/groups/not%20a%20group/limits', { concurrency: 1 })).status, 400);
        const groups = (await first.request('GET', '/v1/groups')).body.groups;
        assert.deepEqual(
          groups.find((group: { name: string }) => group.name === 'tenant-r'),
          {
            name: 'tenant-r',
            limits: { concurrency: null, rateLimit: { max: 5, perMs: 60_000 } },
            running: 0,
            queued: 0,
          },
        );
      } finally {
        await first.close();
      }
      if (env.KILN_STORE === 'sqlite') return; // a fresh file each start: kept across restarts is the store's test
      const second = await startServer(env);
      try {
        const groups = (await second.request('GET', '/v1/groups')).body.groups;
        assert.deepEqual(
          groups.map((group: { name: string }) => group.name),
          ['tenant-r'],
        );
        assert.equal((await second.request('DELETE', '/v1/groups/tenant-r/limits')).status, 204);
        assert.deepEqual((await second.request('GET', '/v1/groups')).body, { groups: [] });
      } finally {
        await second.close();
      }
    });
  });
}
