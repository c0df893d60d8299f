import { z } from 'zod';
import { defineTask } from '../task.js';

const schema = z.object({ limit: z.number().int().min(2).max(100_000_000) }).strict();

/** Odd numbers per segment: 256 KiB of Uint8Array stays in cache. */
const SEGMENT = 1 << 18;

/**
 * Counts the primes up to and including `limit` with a segmented sieve of Eratosthenes
 * over odd numbers: memory stays small at any limit, and each segment is an equal
 * share of the work, which makes progress reports even.
 */
function countPrimes(limit: number, onProgress: (percent: number) => void): { count: number; largest: number } {
  const root = Math.floor(Math.sqrt(limit));
  const small = new Uint8Array(root + 1);
  const basePrimes: number[] = [];
  for (let i = 3; i <= root; i += 2) {
    if (small[i] === 0) {
      basePrimes.push(i);
      for (let j = i * i; j <= root; j += 2 * i) small[j] = 1;
    }
  }

  let count = 1; // 2
  let largest = 2;
  // Index k of the whole sieve stands for the odd number 2k + 1; k = 0 (the number 1) is skipped.
  const lastIndex = Math.floor((limit - 1) / 2);
  const segments = Math.ceil(lastIndex / SEGMENT);
  const composite = new Uint8Array(SEGMENT);
  let reported = 0;
  for (let s = 0; s < segments; s++) {
    const low = 1 + s * SEGMENT; // first index in this segment
    const high = Math.min(lastIndex, low + SEGMENT - 1);
    composite.fill(0);
    for (const p of basePrimes) {
      const square = p * p;
      if ((square - 1) / 2 > high) break;
      // First odd multiple of p that is >= max(p*p, 2*low + 1).
      const lowNumber = 2 * low + 1;
      let first = Math.max(square, Math.ceil(lowNumber / p) * p);
      if (first % 2 === 0) first += p;
      for (let k = (first - 1) / 2; k <= high; k += p) composite[k - low] = 1;
    }
    for (let k = low; k <= high; k++) {
      if (composite[k - low] === 0) {
        count++;
        largest = 2 * k + 1;
      }
    }
    const percent = Math.floor(((s + 1) / segments) * 10) * 10;
    if (percent > reported && percent < 100) {
      reported = percent;
      onProgress(percent);
    }
  }
  return { count, largest };
}

export default defineTask({
  name: 'math.primes',
  description:
    'Counts the primes up to and including limit (at most 100,000,000) with a sieve of Eratosthenes. Returns the count and the largest.',
  schema,
  handler(payload, ctx) {
    return { limit: payload.limit, ...countPrimes(payload.limit, (percent) => ctx.progress(percent)) };
  },
});
