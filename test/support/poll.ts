import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Reads `read` until `done` accepts what it answers, and answers that; fails naming
 * `what` (and the last value read) once `deadlineMs` has passed. For state that changes
 * without an event to wait for (another process's writes, a database's clock).
 */
export async function pollUntil<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  { what, deadlineMs = 30_000, everyMs = 50 }: { what: string; deadlineMs?: number; everyMs?: number },
): Promise<T> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() >= deadline) {
      throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}; last read: ${JSON.stringify(value)}`);
    }
    await sleep(everyMs);
  }
}
