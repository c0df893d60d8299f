import { gunzipSync } from 'node:zlib';
import { z } from 'zod';
import { decompressBounded, MAX_DATA_CHARS } from '../compression.js';
import { decodeInput } from '../encoding.js';
import { defineTask } from '../task.js';

const schema = z
  .object({
    /** The gzip bytes, base64-encoded. */
    data: z.string().max(MAX_DATA_CHARS),
    output: z.enum(['base64', 'utf8']).default('base64'),
  })
  .strict();

export default defineTask({
  name: 'compress.gunzip',
  description:
    'Decompress gzip data (base64 in). Returns the data as base64 or UTF-8; output is capped at 64 MiB, corrupt input fails without retries.',
  schema,
  handler(payload) {
    const input = decodeInput(payload.data, 'base64', 'data');
    const output = decompressBounded('gzip', (buf, maxOutputLength) => gunzipSync(buf, { maxOutputLength }), input);
    return { data: output.toString(payload.output), inputBytes: input.length, outputBytes: output.length };
  },
});
