/**
 * The two stores the claim-cost benchmarks (limited-backlog, group-backlog) open in this
 * process from dist/: SQLite in memory, and PostgreSQL in a schema of its own per open,
 * dropped at close. `measureStores` runs `measure(open, close)` `runs` times on each and
 * summarizes every figure it answers, plus the ratio the benchmark names.
 */
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { dropSchema, freshSchemaName, openPostgresStore } from './postgres.mjs';
import { ROOT_DIR } from './processes.mjs';
import { summarize } from './report.mjs';

export async function claimStores(schemaPrefix) {
  const { SqliteStore } = await import(
    pathToFileURL(join(ROOT_DIR, 'dist', 'src', 'store', 'sqlite', 'store.js')).href
  );
  const sqlite = {
    name: 'sqlite (in memory)',
    open: () => SqliteStore.open(':memory:', { capacity: 10_000_000, synchronous: 'normal' }),
    close: (store) => store.close(),
  };
  const schemas = [];
  const postgres = {
    name: 'postgres',
    open() {
      const schema = freshSchemaName(schemaPrefix);
      schemas.push(schema);
      return openPostgresStore({ schema, poolSize: 4 });
    },
    async close(store) {
      await store.close();
      for (const schema of schemas.splice(0)) await dropSchema(schema);
    },
  };
  return [sqlite, postgres];
}

/** `ratio(figures of one run)` becomes the figure `ratioP50`. */
export async function measureStores(stores, runs, measure, ratio) {
  const figures = {};
  const all = [];
  for (const store of stores) {
    const perRun = [];
    for (let run = 0; run < runs; run++) perRun.push(await measure(store.open, store.close));
    all.push({ store: store.name, runs: perRun });
    const keys = Object.keys(perRun[0] ?? {});
    figures[store.name] = Object.fromEntries(keys.map((key) => [key, summarize(perRun.map((r) => r[key]))]));
    figures[store.name].ratioP50 = summarize(perRun.map(ratio));
  }
  return { figures, runs: all };
}
