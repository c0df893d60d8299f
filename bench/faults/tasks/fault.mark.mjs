import { appendFileSync } from 'node:fs';

/**
 * Appends `S <job> <attempt> <pid> <ms>` to the file KILN_FAULT_MARKS when its handler
 * starts and `E …` when it ends, spinning `payload.ms` of CPU in between. appendFileSync
 * hands the line to the kernel before the handler goes on, so a SIGKILL of the server
 * keeps every mark written before it.
 */
export default {
  name: 'fault.mark',
  description: 'Marks its start and end in the file KILN_FAULT_MARKS, with CPU work between.',
  defaults: { maxAttempts: 10, backoff: { initialMs: 10, factor: 2, maxMs: 200, jitter: 'none' } },
  handler(payload, ctx) {
    const path = process.env.KILN_FAULT_MARKS;
    if (path !== undefined) appendFileSync(path, `S ${ctx.jobId} ${ctx.attempt} ${process.pid} ${Date.now()}\n`);
    const until = performance.now() + (payload?.ms ?? 0);
    while (performance.now() < until) {
      // CPU-bound on purpose
    }
    if (path !== undefined) appendFileSync(path, `E ${ctx.jobId} ${ctx.attempt} ${process.pid} ${Date.now()}\n`);
    return { attempt: ctx.attempt };
  },
};
