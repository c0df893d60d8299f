import { scryptSync } from 'node:crypto';
import { z } from 'zod';
import { saltOf } from '../encoding.js';
import { defineTask } from '../task.js';

/** scrypt needs 128 * N * r bytes; above this a single job would take over the machine's memory. */
const MAX_SCRYPT_MEMORY = 1024 * 1024 * 1024;

const schema = z
  .object({
    password: z.string().max(1024),
    salt: z.string().min(1).max(1024).optional(),
    saltEncoding: z.enum(['base64', 'utf8']).default('base64'),
    /** CPU/memory cost N: a power of two from 2 to 2^20. */
    cost: z
      .number()
      .int()
      .min(2)
      .max(2 ** 20)
      .refine((n) => (n & (n - 1)) === 0, { error: 'must be a power of two' })
      .default(16_384),
    blockSize: z.number().int().min(1).max(32).default(8),
    parallelization: z.number().int().min(1).max(16).default(1),
    keyLength: z.number().int().min(16).max(256).default(64),
    output: z.enum(['hex', 'base64']).default('hex'),
  })
  .strict()
  .refine((p) => 128 * p.cost * p.blockSize <= MAX_SCRYPT_MEMORY, {
    error: 'cost * blockSize must be at most 8388608 (scrypt would need more than 1 GiB)',
    path: ['cost'],
  });

export default defineTask({
  name: 'hash.scrypt',
  description:
    'Derive a key from a password with scrypt (memory-hard password hashing). Returns the hash, the salt (base64 when generated) and N, r, p.',
  schema,
  defaults: { timeoutMs: 120_000 },
  handler(payload) {
    const { salt, saltEncoding, bytes } = saltOf(payload);
    const N = payload.cost;
    const r = payload.blockSize;
    const p = payload.parallelization;
    const key = scryptSync(payload.password, bytes, payload.keyLength, {
      N,
      r,
      p,
      // OpenSSL's own estimate is 128 * r * (N + p + 2) bytes; leave a little room above it.
      maxmem: 128 * r * (N + p + 2) + 1024 * 1024,
    });
    return { hash: key.toString(payload.output), salt, saltEncoding, N, r, p, keyLength: payload.keyLength };
  },
});
