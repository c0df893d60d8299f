import { z } from 'zod';
import { decodeInput } from './encoding.js';
import { defineTask, NonRetryableError } from './task.js';

/** The most a decompression task may produce: a zip bomb fails cleanly instead of filling the heap. */
export const MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024;

/** The largest accepted `data` string (10 MiB of characters). */
export const MAX_DATA_CHARS = 10 * 1024 * 1024;

/**
 * Runs a zlib decompression capped at MAX_DECOMPRESSED_BYTES. Corrupt input and output
 * over the cap are properties of the data, so both fail the job without retries.
 */
export function decompressBounded(
  format: string,
  decompress: (input: Buffer, maxOutputLength: number) => Buffer,
  input: Buffer,
): Buffer {
  try {
    return decompress(input, MAX_DECOMPRESSED_BYTES);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'ERR_BUFFER_TOO_LARGE' || err instanceof RangeError) {
      throw new NonRetryableError(`${format} data decompresses to more than ${MAX_DECOMPRESSED_BYTES} bytes`);
    }
    throw new NonRetryableError(`data is not valid ${format}: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** A decompression task: base64 `data` in, base64 or UTF-8 out, capped and non-retryable on bad input. */
export function decompressionTask(
  name: string,
  format: string,
  decompress: (input: Buffer, maxOutputLength: number) => Buffer,
) {
  const schema = z
    .object({
      /** The compressed bytes, base64-encoded. */
      data: z.string().max(MAX_DATA_CHARS),
      output: z.enum(['base64', 'utf8']).default('base64'),
    })
    .strict();
  return defineTask({
    name,
    description: `Decompress ${format} data (base64 in). Returns the data as base64 or UTF-8; output is capped at 64 MiB, corrupt input fails without retries.`,
    schema,
    handler(payload) {
      const input = decodeInput(payload.data, 'base64', 'data');
      const output = decompressBounded(format, decompress, input);
      return { data: output.toString(payload.output), inputBytes: input.length, outputBytes: output.length };
    },
  });
}
