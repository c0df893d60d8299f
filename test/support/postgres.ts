import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { PostgresStore } from '../../src/store/postgres/store.js';

/** The PostgreSQL server the tests use: KILN_TEST_PG, else the local one. */
export const TEST_PG_URL = process.env.KILN_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** A schema name of its own for one test run, so runs never share tables. */
export function freshSchemaName(): string {
  return `kiln_test_${randomBytes(6).toString('hex')}`;
}

export async function connect(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: TEST_PG_URL });
  await client.connect();
  return client;
}

export async function dropSchema(schema: string): Promise<void> {
  const client = await connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

/**
 * The table the test.record fixture task writes each attempt into (job, attempt,
 * process, start and end by the database's clock).
 */
export async function createAttemptsTable(db: pg.ClientBase, table: string): Promise<void> {
  await db.query(
    `CREATE TABLE ${table} (n bigserial PRIMARY KEY, job_id uuid NOT NULL, attempt int NOT NULL, pid int NOT NULL,
       started_at timestamptz NOT NULL, ended_at timestamptz, spin_ms int NOT NULL DEFAULT 0)`,
  );
}

/**
 * What a test file opens on the test server, closed and dropped in its `after`: stores
 * in fresh schemas (the options tests of the claim use), and anything else to close.
 */
export class PgTestScope {
  readonly #schemas: string[] = [];
  readonly #closing: (() => Promise<void>)[] = [];

  /** A store in a schema of its own, with a pool of 2 and no polling to speak of. */
  async openStore(capacity: number): Promise<{ store: PostgresStore; schema: string }> {
    const schema = freshSchemaName();
    this.#schemas.push(schema);
    const store = await PostgresStore.open({ url: TEST_PG_URL, schema, poolSize: 2, capacity, pollMs: 60_000 });
    this.onClose(() => store.close());
    return { store, schema };
  }

  onClose(close: () => Promise<void>): void {
    this.#closing.push(close);
  }

  async close(): Promise<void> {
    for (const close of this.#closing.splice(0)) await close();
    for (const schema of this.#schemas.splice(0)) await dropSchema(schema);
  }
}
