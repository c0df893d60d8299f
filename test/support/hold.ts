import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import type { TestServer } from './kiln.js';
import { dropSchema, freshSchemaName, TEST_PG_URL } from './postgres.js';

/** A folder for held jobs' release files and a PostgreSQL schema, both gone after the file's tests. */
export function holdFixture(prefix: string): { dir: string; schema: string } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const schema = freshSchemaName();
  after(async () => {
    await dropSchema(schema);
    rmSync(dir, { recursive: true, force: true });
  });
  return { dir, schema };
}

/**
 * Submits a `test.hold` job (with `fields` added to the request) that runs until its
 * release file, in `dir`, exists; answers its id and that file.
 */
export async function holdJob(
  server: TestServer,
  dir: string,
  name: string,
  fields: Record<string, unknown> = {},
): Promise<{ id: string; release: string }> {
  const release = join(dir, `${name}-${Math.random().toString(36).slice(2)}`);
  const created = await server.request('POST', '/v1/jobs', { type: 'test.hold', payload: { release }, ...fields });
  assert.equal(created.status, 201, created.text);
  return { id: created.body.id as string, release };
}

/** Both stores of a server test, by name: a fresh SQLite file each start, and PostgreSQL in `schema`. */
export function serverStores(schema: string): [string, Record<string, string>][] {
  return [
    ['sqlite', { KILN_STORE: 'sqlite' }],
    ['postgres (KILN_TEST_PG)', { KILN_STORE: TEST_PG_URL, KILN_PG_SCHEMA: schema }],
  ];
}
