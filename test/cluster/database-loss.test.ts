import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';
import { after, describe, it } from 'node:test';
import { type KilnProcess, killAllKilns, spawnKiln } from '../support/kiln-process.js';
import { pollUntil } from '../support/poll.js';
import { connect, createAttemptsTable, dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';
import { tempFiles } from '../support/temp-files.js';

/** A TCP proxy in front of the database that the test can cut and restore. */
class CuttableProxy {
  readonly #target: { host: string; port: number };
  readonly #sockets = new Set<Socket>();
  #server: Server | null = null;
  #silent = false;
  port = 0;

  constructor(target: { host: string; port: number }) {
    this.#target = target;
  }

  async open(): Promise<void> {
    const server = createServer((client) => {
      const upstream = tcpConnect(this.#target.port, this.#target.host);
      for (const socket of [client, upstream]) {
        this.#sockets.add(socket);
        socket.on('close', () => this.#sockets.delete(socket));
        socket.on('error', () => socket.destroy());
      }
      client.pipe(upstream).pipe(client);
      if (this.#silent) for (const socket of [client, upstream]) socket.pause();
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', resolve));
    this.port = (server.address() as { port: number }).port;
    this.#server = server;
  }

  /** The test database's URL, through this proxy. */
  get url(): string {
    const proxied = new URL(TEST_PG_URL);
    proxied.hostname = '127.0.0.1';
    proxied.port = String(this.port);
    return proxied.toString();
  }

  /** Nothing gets through any more, yet every connection stays open (a network gone silent). */
  silence(): void {
    this.#silent = true;
    for (const socket of this.#sockets) socket.pause();
  }

  /** What was held back flows again. */
  speak(): void {
    this.#silent = false;
    for (const socket of this.#sockets) socket.resume();
  }

  /** Every connection drops and new ones are refused. */
  async cut(): Promise<void> {
    const server = this.#server;
    this.#server = null;
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => (server === null ? resolve() : server.close(() => resolve())));
  }
}

type Db = Awaited<ReturnType<typeof connect>>;
type AttemptRow = { attempt: number; ended_at: Date | null };

async function waitForRows(db: Db, table: string, id: string, n: number): Promise<AttemptRow[]> {
  return pollUntil(
    async () =>
      (await db.query<AttemptRow>(`SELECT attempt, ended_at FROM ${table} WHERE job_id = $1 ORDER BY attempt`, [id]))
        .rows,
    (rows) => rows.length >= n,
    { what: `${n} recorded attempts of job ${id}`, deadlineMs: 60_000, everyMs: 20 },
  );
}

/**
 * Until the server has stored the start of the job's attempt (a start rides with the
 * server's next group of writes): only then does the attempt count if it is cut off.
 */
async function waitForStartStored(db: Db, schema: string, id: string): Promise<void> {
  await pollUntil(
    async () =>
      (await db.query<{ attempt_started: boolean }>(`SELECT attempt_started FROM "${schema}".jobs WHERE id = $1`, [id]))
        .rows[0]?.attempt_started,
    (started) => started === true,
    { what: `the start of job ${id} to be stored`, deadlineMs: 30_000, everyMs: 20 },
  );
}

/**
 * A server (one thread, a lease of 1.5 s) on a schema of its own, behind a proxy of its
 * own, runs a test.record job spinning for `spinMs` (it records straight to the database,
 * not through the proxy). Once the attempt is recorded and its start stored, `fault` acts
 * on the proxy; the server must stop the attempt on its own; `meanwhile` checks what it
 * answers then; `heal` lets the database through again, and the job runs a second
 * attempt, the first one stopped before its end. `check` sees the server, the job and
 * the attempts recorded before all is torn down.
 */
async function attemptGivenUp({
  spinMs,
  fault,
  meanwhile = async () => {},
  heal,
  check,
}: {
  spinMs: number;
  fault: (proxy: CuttableProxy) => void | Promise<void>;
  meanwhile?: (kiln: KilnProcess) => Promise<void>;
  heal: (proxy: CuttableProxy) => void | Promise<void>;
  check: (kiln: KilnProcess, id: string, runs: AttemptRow[]) => Promise<void>;
}): Promise<void> {
  const target = new URL(TEST_PG_URL);
  const ownSchema = freshSchemaName();
  const table = `public.${ownSchema}_attempts`;
  const db = await connect();
  const proxy = new CuttableProxy({ host: target.hostname, port: Number(target.port || 5432) });
  try {
    await createAttemptsTable(db, table);
    await proxy.open();
    const kiln = await spawnKiln({
      KILN_STORE: proxy.url,
      KILN_PG_SCHEMA: ownSchema,
      KILN_THREADS: '1',
      KILN_LEASE_MS: '1500',
    });
    const created = await kiln.request('POST', '/v1/jobs', {
      type: 'test.record',
      payload: { url: TEST_PG_URL, table, spinMs },
    });
    assert.equal(created.status, 201);
    const id = created.body.id as string;
    await waitForRows(db, table, id, 1);
    await waitForStartStored(db, ownSchema, id);
    await fault(proxy);
    await pollUntil(
      async () => (await kiln.request('GET', '/metrics')).text,
      (text) => /^kiln_pool_busy_threads 0$/m.test(text),
      { what: 'the server to stop the attempt on its own (no busy thread)', deadlineMs: 60_000, everyMs: 20 },
    );
    await meanwhile(kiln);
    await heal(proxy);
    const runs = await waitForRows(db, table, id, 2);
    assert.equal(runs[0]?.ended_at, null, 'the first attempt was stopped, not run to its end');
    await check(kiln, id, runs);
  } finally {
    await killAllKilns();
    await proxy.cut();
    await db.query(`DROP TABLE IF EXISTS ${table}`);
    await db.end();
    await dropSchema(ownSchema);
  }
}

describe('cluster: a server that loses its database', () => {
  const schema = freshSchemaName();
  const newPath = tempFiles('kiln-db-loss-');
  const target = new URL(TEST_PG_URL);
  const proxy = new CuttableProxy({ host: target.hostname, port: Number(target.port || 5432) });
  after(async () => {
    await killAllKilns();
    await proxy.cut();
    await dropSchema(schema);
  });

  it(
    'keeps its attempt while the database refuses connections for longer than its lease, and writes the outcome once it is back',
    { timeout: 60_000 },
    async () => {
      const ownSchema = freshSchemaName();
      const table = `public.${ownSchema}_attempts`;
      const db = await connect();
      const cuttable = new CuttableProxy({ host: target.hostname, port: Number(target.port || 5432) });
      try {
        await createAttemptsTable(db, table);
        await cuttable.open();
        const kiln = await spawnKiln({
          KILN_STORE: cuttable.url,
          KILN_PG_SCHEMA: ownSchema,
          KILN_THREADS: '1',
          KILN_LEASE_MS: '1500',
        });
        const created = await kiln.request('POST', '/v1/jobs', {
          type: 'test.record',
          payload: { url: TEST_PG_URL, table, spinMs: 3000 },
        });
        assert.equal(created.status, 201);
        const id = created.body.id as string;
        await waitForRows(db, table, id, 1);
        await waitForStartStored(db, ownSchema, id);
        // Nothing gets through and new connections are refused: the database is down for
        // everyone, so nobody can take the attempt over, and the server keeps it.
        await cuttable.cut();
        // The handler ends (it records straight to the database) twice a lease into the outage.
        await pollUntil(
          async () =>
            (await db.query<AttemptRow>(`SELECT attempt, ended_at FROM ${table} WHERE job_id = $1`, [id])).rows,
          (rows) => rows.length === 1 && rows[0]?.ended_at !== null,
          { what: 'the attempt to end while the database is away', deadlineMs: 30_000, everyMs: 20 },
        );
        await cuttable.open();
        const done = await kiln.waitForJob(id);
        assert.equal(done.status, 'completed');
        assert.equal(done.attempts, 1, 'the outcome was written, not refused, and the job not run again');
        assert.equal(done.interruptions, 0);
        const runs = await waitForRows(db, table, id, 1);
        assert.equal(runs.length, 1, 'the handler ran once');
      } finally {
        await killAllKilns();
        await cuttable.cut();
        await db.query(`DROP TABLE IF EXISTS ${table}`);
        await db.end();
        await dropSchema(ownSchema);
      }
    },
  );

  it(
    'gives its attempts up when the database stops answering without closing, and answers 503 meanwhile',
    { timeout: 120_000 },
    async () => {
      await attemptGivenUp({
        spinMs: 60_000,
        // The heartbeat never comes back; the server stops the attempt on its own all the same.
        fault: (silent) => silent.silence(),
        meanwhile: async (kiln) => {
          const refused = await kiln.request('POST', '/v1/jobs', { type: 'test.quick' });
          assert.equal(refused.status, 503, refused.text);
          assert.equal(refused.body.code, 'store_unavailable');
        },
        heal: (silent) => silent.speak(),
        check: async (_kiln, _id, runs) => {
          assert.equal(runs[1]?.attempt, 2);
        },
      });
    },
  );

  it(
    'keeps its running attempt, answers 503 and /ready 503, reconnects by itself and writes the outcome',
    { timeout: 60_000 },
    async () => {
      await proxy.open();
      const kiln = await spawnKiln({
        KILN_STORE: proxy.url,
        KILN_PG_SCHEMA: schema,
        KILN_THREADS: '1',
        KILN_LEASE_MS: '60000',
      });
      const release = newPath();
      const created = await kiln.request('POST', '/v1/jobs', { type: 'test.hold', payload: { release } });
      assert.equal(created.status, 201);
      const id = created.body.id as string;
      await kiln.waitForStatus(id, 'running');

      await proxy.cut();
      // A write it cannot store is refused, never accepted.
      const refused = await kiln.request('POST', '/v1/jobs', { type: 'test.quick' });
      assert.equal(refused.status, 503, refused.text);
      assert.equal(refused.body.code, 'store_unavailable');
      assert.ok(Number(refused.headers.get('retry-after')) >= 1);
      const ready = await kiln.request('GET', '/ready');
      assert.equal(ready.status, 503);
      // The attempt goes on and ends while the database is away.
      writeFileSync(release, '');

      await proxy.open();
      await pollUntil(
        async () => (await kiln.request('GET', '/ready')).status,
        (status) => status === 200,
        { what: 'the server to be ready again', deadlineMs: 30_000 },
      );
      const done = await kiln.waitForJob(id);
      assert.equal(done.status, 'completed');
      assert.equal(done.attempts, 1, 'the outcome was written under the lease it ran with, not re-run');
      assert.equal(typeof done.result.pid, 'number');
      const list = await kiln.request('GET', '/v1/jobs');
      assert.deepEqual(
        list.body.jobs.map((job: { id: string }) => job.id),
        [id],
        'the refused submission was not stored',
      );
    },
  );
});
