import { brotliCompressSync, constants } from 'node:zlib';
import { z } from 'zod';
import { MAX_DATA_CHARS } from '../compression.js';
import { decodeInput } from '../encoding.js';
import { defineTask } from '../task.js';

const schema = z
  .object({
    data: z.string().max(MAX_DATA_CHARS),
    encoding: z.enum(['utf8', 'base64']).default('utf8'),
    quality: z.number().int().min(0).max(11).default(11),
  })
  .strict();

export default defineTask({
  name: 'compress.brotli',
  description: 'Compress data with Brotli. Returns the compressed bytes as base64 and both sizes.',
  schema,
  defaults: { timeoutMs: 120_000 },
  handler(payload) {
    const input = decodeInput(payload.data, payload.encoding, 'data');
    const output = brotliCompressSync(input, {
      params: {
        [constants.BROTLI_PARAM_QUALITY]: payload.quality,
        [constants.BROTLI_PARAM_SIZE_HINT]: input.length,
        [constants.BROTLI_PARAM_MODE]:
          payload.encoding === 'utf8' ? constants.BROTLI_MODE_TEXT : constants.BROTLI_MODE_GENERIC,
      },
    });
    return { data: output.toString('base64'), inputBytes: input.length, outputBytes: output.length };
  },
});
