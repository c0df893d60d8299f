import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { newJobId } from '../../src/jobs/ids.js';
import { PostgresStore } from '../../src/store/postgres/store.js';
import { insertOk, newJob, rescueOnce } from '../support/store-fixtures.js';
import { pollUntil } from '../support/poll.js';
import { dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';

/**
 * Node leases on a shared schema: a server's beat (one row, whatever it runs) keeps its
 * attempts its own; once it is not heard of for its node lease, another server's rescuer
 * takes them over although their job leases have long to run.
 */
const schemas: string[] = [];
const stores: PostgresStore[] = [];
after(async () => {
  for (const store of stores.splice(0)) await store.close();
  for (const schema of schemas) await dropSchema(schema);
});

const JOB_LEASE_MS = 600_000;
const NODE_LEASE_MS = 1_500;

async function node(schema: string): Promise<PostgresStore> {
  const store = await PostgresStore.open({
    url: TEST_PG_URL,
    schema,
    poolSize: 2,
    capacity: 1_000_000,
    leaseMs: JOB_LEASE_MS,
    nodeLeaseMs: NODE_LEASE_MS,
  });
  stores.push(store);
  return store;
}

describe('postgres store: node leases (KILN_TEST_PG)', () => {
  it(
    'keeps a beating server’s attempts, and takes over a silent server’s within its node lease',
    { timeout: 120_000 },
    async () => {
      const schema = freshSchemaName();
      schemas.push(schema);
      const [a, b] = [await node(schema), await node(schema)];
      const owner = 'server-a';
      await insertOk(
        a,
        Array.from({ length: 4 }, () => newJob({ id: newJobId(), createdAt: Date.now() })),
      );
      const claimed = (await a.claim({ owner, leaseMs: JOB_LEASE_MS, batches: 4, micro: null })).flat();
      assert.equal(claimed.length, 4);
      assert.deepEqual(await a.heartbeat(owner, [], JOB_LEASE_MS), [], 'a beat of the node alone');

      // Beating (the node alone, as between job renewals) for twice the node lease: nothing moves.
      const until = Date.now() + 2 * NODE_LEASE_MS;
      while (Date.now() < until) {
        await a.heartbeat(owner, [], JOB_LEASE_MS);
        assert.equal(await rescueOnce(b), 0, 'a live server’s attempts are left alone');
        await sleep(100);
      }
      assert.ok(
        (await b.nodes()).some((n) => n.id === owner),
        'the beating server is listed',
      );

      // Silent: the other server's rescuer takes the attempts over once the node lease has run out.
      const silentAt = Date.now();
      let moved = 0;
      await pollUntil(
        async () => (moved += await rescueOnce(b)),
        (n) => n === claimed.length,
        { what: 'the silent server’s attempts to be taken over' },
      );
      const tookMs = Date.now() - silentAt;
      assert.ok(tookMs < JOB_LEASE_MS / 10, `taken over by the node lease, not the job lease (${tookMs} ms)`);
      for (const job of claimed) {
        const now = await b.get(job.id);
        assert.notEqual(now?.status, 'running', `${job.id} is no longer running under the dead server`);
      }
      await pollUntil(
        () => b.nodes(),
        (nodes) => !nodes.some((n) => n.id === owner),
        { what: 'the silent server to leave the node list' },
      );
      // A late outcome of the dead server is refused.
      const late = await a.finish([
        { id: claimed[0]!.id, attempt: claimed[0]!.attempts, owner, outcome: { kind: 'completed', resultText: '1' } },
      ]);
      assert.deepEqual(late, [null]);
    },
  );
});
