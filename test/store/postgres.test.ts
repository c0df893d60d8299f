import { after } from 'node:test';
import { PostgresStore } from '../../src/store/postgres/store.js';
import { dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';
import { runStoreConformance } from './conformance/index.js';

// The same store tests as SQLite, on a real PostgreSQL server (KILN_TEST_PG), each
// store in a schema of its own.
const schemas: string[] = [];
after(async () => {
  for (const schema of schemas) await dropSchema(schema);
});

runStoreConformance('postgres store', (options) => {
  const schema = freshSchemaName();
  schemas.push(schema);
  return PostgresStore.open({ ...options, url: TEST_PG_URL, schema, poolSize: 4 });
});
