import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { type KilnProcess, killAllKilns, spawnKiln } from '../support/kiln-process.js';
import { dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';
import { tempFiles } from '../support/temp-files.js';

/**
 * A job whose handler takes its whole server down (`process.kill(process.pid, 'SIGKILL')`)
 * each time it starts, on real server processes restarted on the same store: every rescue
 * of its attempt counts an interruption, started or not, and the third
 * (KILN_MAX_INTERRUPTIONS' default) fails the job with `too_many_interruptions`, logged once
 * with its id and the servers it took down, though it has attempts left.
 */

const MAX_INTERRUPTIONS = 3;
const quickBackoff = { initialMs: 10, factor: 1, maxMs: 10, jitter: 'none' };

/**
 * Starts a server on the store, submits the poison pill through the first one, and
 * starts another each time one dies, until a server reports the job failed.
 */
async function killUntilStopped(env: Record<string, string>): Promise<{
  job: any;
  killed: number;
  stopper: KilnProcess;
  servers: KilnProcess[];
}> {
  const servers: KilnProcess[] = [];
  let id: string | null = null;
  for (let killed = 0; killed <= MAX_INTERRUPTIONS; killed++) {
    // On SQLite the job runs again at once at start, and may take a server down before it serves.
    const kiln = await spawnKiln(env).catch((error: unknown) => {
      if (id !== null && /SIGKILL/.test(String(error))) return null;
      throw error;
    });
    if (kiln === null) continue;
    servers.push(kiln);
    if (id === null) {
      const created = await kiln.request('POST', '/v1/jobs', {
        type: 'test.kill-server',
        maxAttempts: 10,
        backoff: quickBackoff,
      });
      assert.equal(created.status, 201, created.text);
      id = created.body.id as string;
    }
    const jobId: string = id;
    // The job either takes this server down, or this server's rescue stops it.
    const ended: { exit: { signal: NodeJS.Signals | null } } | { job: any } = await Promise.race([
      kiln.exited.then((exit) => ({ exit })),
      kiln.waitForJob(jobId, 1_000).then(
        (job) => ({ job }),
        () => kiln.exited.then((exit) => ({ exit })),
      ),
    ]);
    if ('job' in ended) return { job: ended.job, killed, stopper: kiln, servers };
    assert.equal(ended.exit.signal, 'SIGKILL', `server ${killed + 1} was killed by the job, not otherwise`);
  }
  assert.fail(`the job was not stopped after ${MAX_INTERRUPTIONS + 1} servers`);
}

async function checkStopped({ job, killed, stopper }: Awaited<ReturnType<typeof killUntilStopped>>): Promise<void> {
  assert.equal(killed, MAX_INTERRUPTIONS, 'each interruption took a server down');
  assert.equal(job.status, 'failed');
  assert.equal(job.interruptions, MAX_INTERRUPTIONS);
  assert.ok(job.attempts < job.maxAttempts, 'stopped whatever attempts it had left');
  assert.equal(job.error.code, 'too_many_interruptions');
  const line = await stopper.waitForLog(/too_many_interruptions/);
  assert.equal(line.job, job.id);
  assert.ok(Array.isArray(line.servers) && line.servers.length === MAX_INTERRUPTIONS, JSON.stringify(line));
  assert.equal(new Set(line.servers as string[]).size, MAX_INTERRUPTIONS, 'the servers it took down, each one');
  assert.equal(stopper.logs.filter((entry) => /too_many_interruptions/.test(entry.msg)).length, 1, 'logged once');
}

describe('a job that keeps killing its servers', { timeout: 180_000 }, () => {
  const newPath = tempFiles('kiln-poison-');
  const schema = freshSchemaName();
  after(async () => {
    await killAllKilns();
    await dropSchema(schema);
  });

  it('is stopped after KILN_MAX_INTERRUPTIONS servers restarted on one SQLite file', async () => {
    const stopped = await killUntilStopped({ KILN_STORE: `sqlite:${newPath()}`, KILN_THREADS: '1' });
    await checkStopped(stopped);
  });

  it('is stopped after KILN_MAX_INTERRUPTIONS servers on one PostgreSQL schema', async () => {
    const stopped = await killUntilStopped({
      KILN_STORE: TEST_PG_URL,
      KILN_PG_SCHEMA: schema,
      KILN_THREADS: '1',
      KILN_NODE_LEASE_MS: '1000',
    });
    await checkStopped(stopped);
  });
});
