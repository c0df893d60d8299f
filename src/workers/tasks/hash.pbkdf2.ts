import { pbkdf2Sync } from 'node:crypto';
import { z } from 'zod';
import { saltOf } from '../encoding.js';
import { defineTask } from '../task.js';

const schema = z
  .object({
    password: z.string().max(1024),
    /** Decoded with saltEncoding; a random 16-byte salt is generated (and returned) when absent. */
    salt: z.string().min(1).max(1024).optional(),
    saltEncoding: z.enum(['base64', 'utf8']).default('base64'),
    iterations: z.number().int().min(1).max(10_000_000).default(600_000),
    keyLength: z.number().int().min(16).max(256).default(32),
    digest: z.enum(['sha256', 'sha512', 'sha1']).default('sha256'),
    output: z.enum(['hex', 'base64']).default('hex'),
  })
  .strict();

export default defineTask({
  name: 'hash.pbkdf2',
  description:
    'Derive a key from a password with PBKDF2 (password storage, key derivation). Returns the hash, the salt (base64 when generated), the iterations and the digest.',
  schema,
  defaults: { timeoutMs: 120_000 },
  handler(payload) {
    const { salt, saltEncoding, bytes } = saltOf(payload);
    const key = pbkdf2Sync(payload.password, bytes, payload.iterations, payload.keyLength, payload.digest);
    return {
      hash: key.toString(payload.output),
      salt,
      saltEncoding,
      iterations: payload.iterations,
      keyLength: payload.keyLength,
      digest: payload.digest,
    };
  },
});
