import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { requestJson } from '../support/http.js';
import { kilnProcessEnv, mainScript } from '../support/kiln-process.js';
import { fixtureTasksDir } from '../support/paths.js';
import { pollUntil } from '../support/poll.js';
import { mountSmallDisk, smallDiskSkip } from '../support/small-disk.js';

/**
 * The log's disk fills up (the server's output is a file on a disk that is full, as a
 * container's log often is): the server goes on serving and drops the lines it cannot
 * write instead of ending on the write error, and logs again once there is room.
 */
describe('a server whose log is on a full disk', { skip: smallDiskSkip() }, () => {
  it(
    'keeps serving while its log cannot be written, and logs again once there is room',
    { timeout: 120_000 },
    async () => {
      const disk = mountSmallDisk(1);
      const logPath = join(disk.dir, 'kiln.log');
      const out = openSync(logPath, 'a');
      const child = spawn(process.execPath, [mainScript], {
        env: kilnProcessEnv({
          KILN_STORE: 'memory',
          KILN_THREADS: '1',
          KILN_TASKS_DIR: fixtureTasksDir,
          LOG_FORMAT: 'json',
        }),
        stdio: ['ignore', out, out],
      });
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      try {
        const lines = () =>
          readFileSync(logPath, 'utf8')
            .split('\n')
            .filter((text) => text.startsWith('{'))
            .map((text) => JSON.parse(text) as { msg?: string; address?: string });
        const serving = await pollUntil(
          async () => lines().find((line) => line.msg === 'kiln is serving'),
          (line) => line !== undefined,
          { what: 'the server to log that it serves' },
        );
        const url = String(serving?.address);

        disk.fill();
        for (let i = 0; i < 200; i++) {
          const submitted = await requestJson(url, 'POST', '/v1/jobs', { type: 'test.quick', payload: { n: i } });
          assert.equal(submitted.status, 201, submitted.text);
          assert.equal((await requestJson(url, 'GET', '/v1/queue')).status, 200);
        }
        assert.equal(child.exitCode, null, 'the server is still running');

        disk.free();
        const sizeAfterFree = statSync(logPath).size;
        await pollUntil(
          async () => {
            await requestJson(url, 'GET', '/v1/queue');
            return statSync(logPath).size;
          },
          (size) => size > sizeAfterFree,
          { what: 'the log to be written again' },
        );
        assert.equal(child.exitCode, null, 'the server is still running');
      } finally {
        child.kill('SIGKILL');
        await exited;
        closeSync(out);
        disk.remove();
      }
    },
  );
});
