import { createHash } from 'node:crypto';
import { z } from 'zod';
import { decodeInput } from '../encoding.js';
import { defineTask } from '../task.js';

const schema = z
  .object({
    data: z.string().max(10 * 1024 * 1024),
    encoding: z.enum(['utf8', 'base64']).default('utf8'),
    /** Round 1 hashes the data; every further round hashes the previous 32-byte digest. */
    rounds: z.number().int().min(1).max(10_000_000).default(1),
  })
  .strict();

export default defineTask({
  name: 'hash.sha256',
  description:
    'SHA-256 of the data, optionally re-hashed for a number of rounds (key stretching, benchmarks). Returns the hex digest.',
  schema,
  handler(payload, ctx) {
    let digest = createHash('sha256')
      .update(decodeInput(payload.data, payload.encoding, 'data'))
      .digest();
    const step = Math.max(1, Math.ceil(payload.rounds / 10));
    for (let round = 2; round <= payload.rounds; round++) {
      digest = createHash('sha256').update(digest).digest();
      if (round % step === 0) ctx.progress((round / payload.rounds) * 100);
    }
    return { digest: digest.toString('hex'), rounds: payload.rounds };
  },
});
