import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { KilnProcess } from './kiln-process.js';

/** A fresh temp dir (pushed on `dirs`, for the test to remove): the store's file, and the file that releases held jobs. */
export function freshDir(dirs: string[]): { store: string; release: string } {
  const dir = mkdtempSync(join(tmpdir(), 'kiln-shutdown-'));
  dirs.push(dir);
  return { store: `sqlite:${join(dir, 'kiln.db')}`, release: join(dir, 'release') };
}

/** Submits one job, which must be accepted; answers its id. */
export async function submit(kiln: KilnProcess, body: unknown): Promise<string> {
  const response = await kiln.request('POST', '/v1/jobs', body);
  assert.equal(response.status, 201, response.text);
  return response.body.id;
}

/** Sends SIGTERM and waits for the log line written in the same turn that starts the drain. */
export async function startDrain(kiln: KilnProcess): Promise<void> {
  kiln.child.kill('SIGTERM');
  await kiln.waitForLog('shutting down: draining running attempts');
}

/** The process exits 0, not by a signal. */
export async function assertExitedCleanly(kiln: KilnProcess): Promise<void> {
  assert.deepEqual(await kiln.exited, { code: 0, signal: null }, kiln.stderr());
}

/** SIGTERM, and the process exits 0. */
export async function stopCleanly(kiln: KilnProcess): Promise<void> {
  kiln.child.kill('SIGTERM');
  await assertExitedCleanly(kiln);
}
