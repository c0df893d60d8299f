import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { resumeAndExpectEachRanOnce, startServer } from '../support/kiln.js';
import { captureLog, LEVELS } from '../support/log-lines.js';
import { mountSmallDisk, smallDiskSkip } from '../support/small-disk.js';

const pad = 'p'.repeat(4000);

describe('the SQLite file on a disk that fills up', () => {
  it(
    'answers reads while writes answer 503, and loses nothing once space is back',
    { skip: smallDiskSkip() },
    async () => {
      const disk = mountSmallDisk(4);
      try {
        const server = await startServer({ KILN_STORE: 'sqlite', KILN_THREADS: '1' }, (_dataDir) =>
          SqliteStore.open(join(disk.dir, 'kiln.db'), { capacity: 100_000 }),
        );
        try {
          await server.request('POST', '/v1/queue/pause');
          const accepted: string[] = [];
          for (let n = 0; n < 20; n++) {
            const response = await server.request('POST', '/v1/jobs', { type: 'test.quick', payload: { n } });
            assert.equal(response.status, 201, response.text);
            accepted.push(response.body.id as string);
          }

          disk.fill();
          // The file may still have room of its own (WAL frames it reuses): write until it has none.
          let refused = false;
          for (let n = 0; n < 1000 && !refused; n++) {
            const response = await server.request('POST', '/v1/jobs', {
              type: 'test.quick',
              payload: { n },
              metadata: { pad },
            });
            if (response.status === 201) accepted.push(response.body.id as string);
            else {
              assert.equal(response.status, 503, response.text);
              assert.equal(response.body.code, 'store_unavailable');
              refused = true;
            }
          }
          assert.ok(refused, 'the disk filled up');

          const first = accepted[0] as string;
          for (let round = 0; round < 20; round++) {
            // Sent together, so the reads share the store thread's transaction with the write.
            const [write, job, queue] = await Promise.all([
              server.request('POST', '/v1/jobs', { type: 'test.quick', payload: { round }, metadata: { pad } }),
              server.request('GET', `/v1/jobs/${first}`),
              server.request('GET', '/v1/queue'),
            ]);
            assert.equal(write.status, 503, write.text);
            assert.equal(write.body.code, 'store_unavailable');
            assert.equal(job.status, 200, `round ${round}: GET /v1/jobs/{id}: ${job.text}`);
            assert.equal(job.body.status, 'queued');
            assert.equal(queue.status, 200, `round ${round}: GET /v1/queue: ${queue.text}`);
            assert.equal(queue.body.pending, accepted.length);
          }

          disk.free();
          const after = await server.request('POST', '/v1/jobs', { type: 'test.quick', payload: { after: true } });
          assert.equal(after.status, 201, after.text);
          accepted.push(after.body.id as string);
          assert.equal((await server.request('GET', '/v1/queue')).body.pending, accepted.length);
          await resumeAndExpectEachRanOnce(server, accepted);
        } finally {
          await server.close();
        }
      } finally {
        disk.remove();
      }
    },
  );

  it(
    'logs each fault once when the disk fills while jobs run, and once more when it heals',
    { skip: smallDiskSkip() },
    async () => {
      // Larger than the write-ahead log grows between checkpoints, so that freeing the filler is enough.
      const disk = mountSmallDisk(16);
      const log = captureLog();
      try {
        const server = await startServer(
          { KILN_STORE: 'sqlite', KILN_THREADS: '1' },
          () => SqliteStore.open(join(disk.dir, 'kiln.db'), { capacity: 100_000 }),
          { logger: log.logger },
        );
        try {
          await server.request('POST', '/v1/queue/pause');
          const accepted: string[] = [];
          for (let batch = 0; batch < 20; batch++) {
            const jobs = Array.from({ length: 100 }, (_, n) => ({ type: 'test.quick', payload: { n } }));
            const response = await server.request('POST', '/v1/jobs/batch', { jobs });
            assert.equal(response.status, 201, response.text);
            for (const job of response.body.jobs as { id: string }[]) accepted.push(job.id);
          }
          assert.equal((await server.request('POST', '/v1/queue/resume')).status, 200);
          disk.fill();
          let refused = false;
          for (let n = 0; n < 1000 && !refused; n++) {
            const response = await server.request('POST', '/v1/jobs', { type: 'test.quick', metadata: { pad } });
            if (response.status === 201) accepted.push(response.body.id as string);
            else refused = response.status === 503;
          }
          assert.ok(refused, 'the disk filled up');
          for (let round = 0; round < 20; round++) {
            const [write, job, queue] = await Promise.all([
              server.request('POST', '/v1/jobs', { type: 'test.quick', metadata: { pad } }),
              server.request('GET', `/v1/jobs/${accepted[round] as string}`),
              server.request('GET', '/v1/queue'),
            ]);
            assert.equal(write.status, 503, write.text);
            assert.equal(job.status, 200, `round ${round}: GET /v1/jobs/{id}: ${job.text}`);
            assert.equal(queue.status, 200, `round ${round}: GET /v1/queue: ${queue.text}`);
          }

          const whileFull = log.lines.filter((line) => line.level >= LEVELS.warn && line.fault !== undefined);
          const started = [...new Set(whileFull.map((line) => String(line.fault)))];
          assert.ok(started.includes('dispatch') || started.includes('writing outcomes'), JSON.stringify(whileFull));
          for (const fault of started) {
            // A full disk can still take a write that fits the space SQLite holds (a log
            // checkpointed and reused): the fault ends there and starts again. What must
            // never happen is a line per retry: a start only after an end, one cause.
            const lines = log.lines.filter((line) => line.fault === fault);
            const told = lines.map((line) => (line.level === LEVELS.info ? 'end' : line.msg));
            assert.equal(told[0], `${fault} failed; retrying`, `${fault}: ${JSON.stringify(told)}`);
            told.forEach((said, n) => {
              if (said === `${fault} failed; retrying` && n > 0) {
                assert.equal(told[n - 1], 'end', `${fault}: started again without ending: ${JSON.stringify(told)}`);
              }
            });
            assert.ok(
              told.every((said) => said !== `${fault} still failing, with another cause`),
              `${fault}: one cause while the disk stays full: ${JSON.stringify(lines)}`,
            );
            for (const line of lines.filter((line) => line.level >= LEVELS.warn)) {
              assert.match(JSON.stringify(line.err), /disk is full/);
            }
          }
          assert.deepEqual(
            log.lines.filter((line) => line.level >= LEVELS.warn && line.fault === undefined && /fail/.test(line.msg)),
            [],
            'every failure is logged as a fault',
          );

          disk.free();
          for (const fault of started) {
            const end = await log.waitFor(
              (line) => line.fault === fault && line.level === LEVELS.info,
              `${fault} works again`,
            );
            assert.ok((end.failures as number) >= 1);
          }
          for (const id of accepted) {
            const job = await server.waitForJob(id);
            assert.equal(job.status, 'completed', JSON.stringify(job));
          }
          const queue = await server.request('GET', '/v1/queue');
          assert.equal(queue.body.byStatus.completed, accepted.length);
        } finally {
          await server.close();
        }
      } finally {
        disk.remove();
      }
    },
  );
});
