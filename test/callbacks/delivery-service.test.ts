import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { CallbackDeliveryService } from '../../src/callbacks/delivery-service.js';
import { newJobId } from '../../src/jobs/ids.js';
import type { Callback, Job } from '../../src/contract/job.js';
import { renderBatch, renderJob } from '../../src/server/render.js';
import { PostgresStore } from '../../src/store/postgres/store.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import type { DeliveryAttempt, JobStore } from '../../src/store/store.js';
import { captureLog, LEVELS } from '../support/log-lines.js';
import { connect, dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';
import { type Receiver, startReceiver, verifySignature } from '../support/receiver.js';
import { watchFailures } from '../support/watch-failures.js';
import { claimJobs, completed, finishOne, newJob } from '../support/store-fixtures.js';

/**
 * The delivery service against real stores and real receivers: the address guard at
 * delivery time (a host that resolves to loopback is refused when the connection is
 * made, whatever was checked at submission), timeouts, and several servers on one
 * PostgreSQL schema delivering each delivery once.
 */
const SECRET = 'delivery-test-secret';
const SHORT_BACKOFF = { initialMs: 5, factor: 1, maxMs: 5, jitter: 'none' as const };

const closers: (() => Promise<void>)[] = [];
after(async () => {
  for (const close of closers.reverse()) await close();
});

async function receiver(...args: Parameters<typeof startReceiver>): Promise<Receiver> {
  const started = await startReceiver(...args);
  closers.push(() => started.close());
  return started;
}

function service(store: JobStore, overrides: Partial<ConstructorParameters<typeof CallbackDeliveryService>[0]> = {}) {
  const delivery = new CallbackDeliveryService({
    store,
    secret: SECRET,
    timeoutMs: 2000,
    maxAttempts: 1,
    allowPrivate: false,
    render: renderJob,
    renderBatch,
    backoff: SHORT_BACKOFF,
    ...overrides,
  });
  closers.push(() => delivery.stop());
  return delivery;
}

/** Inserts jobs with `callback` straight into the store (no submission guard) and completes them. */
async function finishedWithCallback(store: JobStore, callback: Callback, n = 1): Promise<string[]> {
  const jobs = Array.from({ length: n }, () => newJob({ id: newJobId(), createdAt: Date.now(), callback }));
  const inserted = await store.insert(jobs);
  assert.equal(inserted.ok, true);
  const claimed = await claimJobs(store, n);
  assert.equal(claimed.length, n);
  for (const job of claimed) await finishOne(store, job, completed({ n: 1 }));
  return jobs.map((job) => job.id);
}

function nextRecorded(delivery: CallbackDeliveryService, count = 1): Promise<DeliveryAttempt[]> {
  const seen: DeliveryAttempt[] = [];
  return new Promise((resolve) => {
    const stop = delivery.onRecorded((attempt) => {
      seen.push(attempt);
      if (seen.length < count) return;
      stop();
      resolve(seen);
    });
  });
}

async function memoryStore(): Promise<JobStore> {
  const store = await SqliteStore.open(':memory:', { capacity: 1000 });
  closers.push(() => store.close());
  return store;
}

describe('callback delivery: the address guard when the attempt is made', () => {
  it('refuses a name that resolves to loopback at connect time; the receiver behind it gets nothing', async () => {
    const store = await memoryStore();
    const hook = await receiver();
    const port = new URL(hook.url).port;
    const delivery = service(store);
    const recorded = nextRecorded(delivery);
    delivery.start();
    const [id] = await finishedWithCallback(store, { url: `http://localhost:${port}/hook` });
    const [attempt] = await recorded;
    assert.equal(attempt?.outcome, 'failed');
    assert.equal(attempt?.httpStatus, null);
    assert.match(attempt?.error ?? '', /the host localhost resolves to [0-9a-f:.]+, a loopback address/);
    assert.equal(hook.received.length, 0);
    const [record] = (await store.deliveries(id as string)) ?? [];
    assert.equal(record?.status, 'failed');
    assert.match(record?.error ?? '', /loopback/);
  });

  it('refuses an address literal that is not public without connecting', async () => {
    const store = await memoryStore();
    const hook = await receiver();
    const delivery = service(store);
    const recorded = nextRecorded(delivery);
    delivery.start();
    await finishedWithCallback(store, { url: `${hook.url}/hook` });
    const [attempt] = await recorded;
    assert.equal(attempt?.outcome, 'failed');
    assert.match(attempt?.error ?? '', /127\.0\.0\.1 is a loopback address/);
    assert.equal(hook.received.length, 0);
  });

  it('with allowPrivate, delivers to the same receiver', async () => {
    const store = await memoryStore();
    const hook = await receiver();
    const delivery = service(store, { allowPrivate: true });
    const recorded = nextRecorded(delivery);
    delivery.start();
    const [id] = await finishedWithCallback(store, { url: `${hook.url}/hook` });
    const [attempt] = await recorded;
    assert.equal(attempt?.outcome, 'delivered');
    const request = await hook.request(0);
    assert.ok(verifySignature(SECRET, request.headers['kiln-signature'] as string, request.rawBody));
    assert.equal((JSON.parse(request.rawBody) as Job).id, id);
  });
});

describe('callback delivery: timeouts', () => {
  it('an answer that does not come within the timeout is a failed attempt, retried', async () => {
    const store = await memoryStore();
    // The first request is held open; the second is answered.
    const hook = await receiver((_request, n, response) => {
      if (n > 0) response.writeHead(200).end();
    });
    const delivery = service(store, { allowPrivate: true, timeoutMs: 200, maxAttempts: 2 });
    const recorded = nextRecorded(delivery, 2);
    delivery.start();
    await finishedWithCallback(store, { url: hook.url });
    const [first, second] = await recorded;
    assert.equal(first?.outcome, 'retry');
    assert.equal(first?.error, 'no answer within 200 ms');
    assert.equal(second?.outcome, 'delivered');
    assert.equal(hook.received.length, 2);
  });
});

describe('callback delivery: several servers on one PostgreSQL schema', () => {
  it('delivers each delivery once, whichever server finished the job', async () => {
    const schema = freshSchemaName();
    closers.push(() => dropSchema(schema));
    const stores: PostgresStore[] = [];
    for (let i = 0; i < 2; i++) {
      const store = await PostgresStore.open({
        url: TEST_PG_URL,
        schema,
        poolSize: 4,
        capacity: 10_000,
        pollMs: 60_000,
      });
      closers.push(() => store.close());
      stores.push(store);
    }
    const [a, b] = stores as [PostgresStore, PostgresStore];
    const hook = await receiver();
    const services = [
      service(a, { allowPrivate: true, concurrency: 4 }),
      service(b, { allowPrivate: true, concurrency: 4 }),
    ];
    const JOBS = 40;
    let recordedCount = 0;
    const allRecorded = new Promise<void>((resolve) => {
      for (const delivery of services) {
        delivery.onRecorded(() => {
          recordedCount++;
          if (recordedCount === JOBS) resolve();
        });
      }
    });
    for (const delivery of services) delivery.start();
    // Half the jobs end on each server.
    const ids = [
      ...(await finishedWithCallback(a, { url: hook.url }, JOBS / 2)),
      ...(await finishedWithCallback(b, { url: hook.url }, JOBS / 2)),
    ];
    await allRecorded;
    // Nothing more is on its way: every attempt in flight was recorded or refused.
    await Promise.all(services.map((delivery) => delivery.stop()));
    assert.equal(hook.received.length, JOBS);
    const deliveries = hook.received.map((request) => request.headers['kiln-delivery']);
    assert.equal(new Set(deliveries).size, JOBS, 'each delivery arrived once');
    const jobs = new Set(hook.received.map((request) => (JSON.parse(request.rawBody) as Job).id));
    assert.deepEqual([...jobs].sort(), [...ids].sort());
    for (const id of ids) {
      const records = await a.deliveries(id);
      assert.deepEqual(
        records?.map((record) => [record.attempt, record.status]),
        [[1, 'delivered']],
      );
    }
    assert.equal(await a.nextDeliveryAt(), null);
  });

  it('carries on a delivery whose server died mid-attempt once its lease runs out', async () => {
    const schema = freshSchemaName();
    closers.push(() => dropSchema(schema));
    const dead = await PostgresStore.open({ url: TEST_PG_URL, schema, poolSize: 2, capacity: 100, pollMs: 60_000 });
    const alive = await PostgresStore.open({ url: TEST_PG_URL, schema, poolSize: 2, capacity: 100, pollMs: 60_000 });
    closers.push(() => alive.close());
    const hook = await receiver();
    const [id] = await finishedWithCallback(dead, { url: hook.url });
    // The dead server leased the attempt (a short lease) and never answered for it.
    const [leased] = await dead.claimDeliveries('dead-server', 300, 10);
    assert.equal(leased?.jobId, id);
    await dead.close();
    const delivery = service(alive, { allowPrivate: true, pollMs: 60_000 });
    const recorded = nextRecorded(delivery);
    delivery.start();
    const [attempt] = await recorded;
    assert.equal(attempt?.id, leased?.id);
    assert.equal(attempt?.outcome, 'delivered');
    assert.equal(hook.received[0]?.headers['kiln-delivery'], leased?.id);
  });
});

describe('callback delivery: claims that keep failing', () => {
  it('logs the fault once when it starts and once when it ends, retrying with back-off meanwhile', async () => {
    const schema = freshSchemaName();
    closers.push(() => dropSchema(schema));
    const opened = await PostgresStore.open({ url: TEST_PG_URL, schema, poolSize: 4, capacity: 1000, pollMs: 60_000 });
    closers.push(() => opened.close());
    const claims = watchFailures(opened, 'claimDeliveries');
    const log = captureLog();
    const hook = await receiver();
    const delivery = service(claims.store, { allowPrivate: true, pollMs: 100, log: log.logger });
    const db = await connect();
    closers.push(() => db.end());
    // Without its table every claim fails in the database.
    await db.query(`ALTER TABLE "${schema}".callback_deliveries RENAME TO callback_deliveries_away`);
    const failed = claims.nextFailure();
    delivery.start();
    await failed;
    while (claims.failures() < 5) await claims.nextFailure();
    const lines = () => log.lines.filter((line) => line.fault === 'claiming callback deliveries');
    assert.deepEqual(
      lines().map((line) => [line.level, line.msg]),
      [[LEVELS.warn, 'claiming callback deliveries failed; retrying']],
      `one line for ${claims.failures()} failed claims`,
    );

    await db.query(`ALTER TABLE "${schema}".callback_deliveries_away RENAME TO callback_deliveries`);
    const recorded = nextRecorded(delivery);
    const [id] = await finishedWithCallback(opened, { url: hook.url });
    const [attempt] = await recorded;
    assert.equal(attempt?.outcome, 'delivered');
    assert.equal((JSON.parse(hook.received[0]?.rawBody ?? 'null') as Job | null)?.id, id);
    const end = await log.waitFor(
      (line) => line.fault === 'claiming callback deliveries' && line.level === LEVELS.info,
      'claims work again',
    );
    assert.equal(end.msg, 'claiming callback deliveries works again');
    assert.equal(end.failures, claims.failures());
    assert.equal(lines().length, 2);
  });
});
