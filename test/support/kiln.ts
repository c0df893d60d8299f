import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/config.js';
import type { Job } from '../../src/contract/job.js';
import { requestJson, type TestResponse } from './http.js';
import { fixtureTasksDir } from './paths.js';
import { pollUntil } from './poll.js';

export type { TestResponse } from './http.js';
import { createKiln, type Kiln, type KilnParts } from '../../src/kiln.js';
import type { JobStore } from '../../src/store/store.js';

export interface TestServer {
  kiln: Kiln;
  url: string;
  request(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<TestResponse>;
  /** GET the job with ?wait= until it is terminal (long polls one after another, for two minutes at most). */
  waitForJob(id: string): Promise<Record<string, unknown>>;
  /** Resolves when the job (watched in process) reaches `status`. */
  whenStatus(id: string, status: Job['status']): Promise<Job>;
  /** Resolves when this server holds (`true`) or no longer holds (`false`) an attempt of the job. */
  whenHeld(id: string, held?: boolean): Promise<void>;
  close(): Promise<void>;
}

/**
 * A real Kiln on a real socket: memory store unless env says otherwise (`KILN_STORE:
 * 'sqlite'` means a file in a fresh temp dir), the fixture tasks, silent logs.
 */
export async function startServer(
  env: Record<string, string> = {},
  openStore?: (dataDir: string) => Promise<JobStore>,
  parts: Omit<KilnParts, 'store'> = {},
): Promise<TestServer> {
  const dataDir = mkdtempSync(join(tmpdir(), 'kiln-test-'));
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    KILN_STORE: 'memory',
    KILN_THREADS: '1',
    KILN_TASKS_DIR: fixtureTasksDir,
    KILN_SHUTDOWN_GRACE_MS: '2000',
    LOG_LEVEL: 'silent',
    ...env,
    ...(env.KILN_STORE === 'sqlite' ? { KILN_STORE: `sqlite:${join(dataDir, 'kiln.db')}` } : {}),
  });
  const kiln = await createKiln(config, {
    ...parts,
    ...(openStore === undefined ? {} : { store: await openStore(dataDir) }),
  });
  const url = await kiln.listen();
  const request = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
    requestJson(url, method, path, body, headers);
  return {
    kiln,
    url,
    request,
    async waitForJob(id) {
      // Long polls, one after another, until the job has finished.
      let before: unknown = null;
      return pollUntil(
        async () => {
          const response = await request('GET', `/v1/jobs/${id}?wait=30`);
          if (response.status !== 200) {
            // What the poll before read, and what a plain read answers now: a job missed by
            // one read and found by the next is not the same failure as a job gone.
            const again = await request('GET', `/v1/jobs/${id}`);
            throw new Error(
              `GET job ${id}: ${response.status} ${response.text}; the poll before read ${JSON.stringify(before)}; read again: ${again.status} ${again.text}`,
            );
          }
          before = response.body;
          return response.body;
        },
        (job) => ['completed', 'failed', 'cancelled'].includes(job.status),
        { what: `job ${id} to finish`, deadlineMs: 120_000, everyMs: 0 },
      );
    },
    async whenStatus(id, status) {
      // The event is the signal; reads of the job back it up, so that news the bus delivered
      // before the subscription is not waited for for ever, and a job that never gets there
      // fails the test with what it read.
      let unsubscribe = () => {};
      let done = false;
      const heard = new Promise<Job>((resolve) => {
        unsubscribe = kiln.scheduler.events.subscribe(id, (job) => {
          if (job?.status === status) resolve(job);
        });
      });
      const read = pollUntil(
        async () => (done ? null : kiln.scheduler.get(id)),
        (job) => done || job?.status === status,
        { what: `job ${id} to be ${status}`, deadlineMs: 60_000 },
      );
      try {
        return (await Promise.race([heard, read.then((job) => job as Job)])) as Job;
      } finally {
        done = true;
        unsubscribe();
        await read.catch(() => undefined);
      }
    },
    async whenHeld(id, held = true) {
      await pollUntil(
        async () => kiln.scheduler.holdsAttempt(id),
        (holds) => holds === held,
        { what: `job ${id} to be ${held ? '' : 'no longer '}held here` },
      );
    },
    async close() {
      await kiln.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Resumes dispatch and waits for each of `ids`: every one completes, in one attempt. */
export async function resumeAndExpectEachRanOnce(server: TestServer, ids: readonly string[]): Promise<void> {
  await server.request('POST', '/v1/queue/resume');
  for (const id of ids) {
    const job = await server.waitForJob(id);
    assert.equal(job.status, 'completed', JSON.stringify(job));
    assert.equal(job.attempts, 1, `job ${id} ran once`);
  }
}
