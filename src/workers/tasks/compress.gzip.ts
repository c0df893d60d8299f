import { gzipSync } from 'node:zlib';
import { z } from 'zod';
import { MAX_DATA_CHARS } from '../compression.js';
import { decodeInput } from '../encoding.js';
import { defineTask } from '../task.js';

const schema = z
  .object({
    data: z.string().max(MAX_DATA_CHARS),
    encoding: z.enum(['utf8', 'base64']).default('utf8'),
    level: z.number().int().min(0).max(9).default(6),
  })
  .strict();

export default defineTask({
  name: 'compress.gzip',
  description: 'Compress data with gzip. Returns the compressed bytes as base64 and both sizes.',
  schema,
  handler(payload) {
    const input = decodeInput(payload.data, payload.encoding, 'data');
    const output = gzipSync(input, { level: payload.level });
    return { data: output.toString('base64'), inputBytes: input.length, outputBytes: output.length };
  },
});
