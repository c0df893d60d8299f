import { performance } from 'node:perf_hooks';
import { z } from 'zod';
import { defineTask } from '../task.js';

const schema = z.object({ ms: z.number().int().min(0).max(600_000) }).strict();

export default defineTask({
  name: 'cpu.spin',
  description:
    'Busy-waits on its thread for the given milliseconds (a CPU-bound job of known cost, for benchmarks). Returns the time spun.',
  schema,
  handler(payload, ctx) {
    const start = performance.now();
    const end = start + payload.ms;
    // Progress every 10 %, for spins long enough that someone may be watching (≥ 1 s).
    let nextReport = payload.ms >= 1000 ? 10 : 100;
    let now = start;
    while (now < end) {
      now = performance.now();
      const percent = ((now - start) / payload.ms) * 100;
      if (percent >= nextReport && percent < 100) {
        ctx.progress(nextReport);
        nextReport += 10;
      }
    }
    return { spunMs: Math.round((now - start) * 1000) / 1000 };
  },
});
