import { randomBytes } from 'node:crypto';
import pg from 'pg';

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
