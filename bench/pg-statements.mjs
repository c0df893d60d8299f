/**
 * Statements per job on PostgreSQL: one Kiln server on a fresh schema, the noop batch
 * workload of pg-throughput (batches of 100, 8 in flight) and single POSTs (16
 * connections), each after 1,000 jobs of warm-up; every statement the server's driver
 * sends is counted (lib/count-pg-statements.cjs). Prints statements per job (warm-up
 * included) and the most frequent statements. Not part of run-all: it describes, it has
 * no baseline.
 *
 *   node bench/pg-statements.mjs [--size tiny|full]
 */
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { measureKilnRun, warmKiln } from './lib/measure.mjs';
import { dropSchema, freshSchemaName, KILN_SCHEMA_PREFIX, PG_URL, requirePostgres } from './lib/postgres.mjs';
import { BENCH_DIR, startKiln } from './lib/processes.mjs';
import { benchOptions, runBenchmark } from './lib/report.mjs';

const NAME = 'pg-statements';
const options = benchOptions({ full: 1, tiny: 1 });
const WARM = 1000;
const WORKLOADS = [
  { name: 'noop batches of 100', load: { mode: 'batch', batchSize: 100, concurrency: 8 }, total: 20_000, tiny: 2_000 },
  { name: 'single POSTs', load: { mode: 'single', concurrency: 8, connections: 16 }, total: 3_000, tiny: 300 },
];

await runBenchmark(NAME, async () => {
  await requirePostgres();
  for (const workload of WORKLOADS) {
    const total = options.size === 'tiny' ? workload.tiny : workload.total;
    const schema = freshSchemaName(KILN_SCHEMA_PREFIX);
    const out = join(tmpdir(), `kiln-pg-statements-${process.pid}.json`);
    const server = await startKiln({
      store: 'postgres',
      pg: { url: PG_URL, schema },
      nodeArgs: ['--require', join(BENCH_DIR, 'lib', 'count-pg-statements.cjs')],
      env: { PG_STATEMENTS_OUT: out },
    });
    let run;
    try {
      await warmKiln(server, { type: 'noop' }, WARM);
      run = await measureKilnRun(server, { total, job: { type: 'noop' }, ...workload.load }, { completedBefore: WARM });
    } finally {
      await server.stop();
      await dropSchema(schema);
    }
    const counts = JSON.parse(readFileSync(out, 'utf8')).sort((a, b) => b[1] - a[1]);
    rmSync(out, { force: true });
    const statements = counts.reduce((sum, [, n]) => sum + n, 0);
    console.log(
      `\n${workload.name}: ${statements} statements for ${WARM + total} jobs, ${(statements / (WARM + total)).toFixed(3)} per job (${run.jobsPerSecond.toFixed(0)} jobs/s)`,
    );
    for (const [text, n] of counts.slice(0, 8)) console.log(`  ${String(n).padStart(6)}  ${text}`);
  }
});
