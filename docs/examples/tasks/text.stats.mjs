// A Kiln task module: KILN_TASKS_DIR=docs/examples/tasks npm start
import { NonRetryableError } from 'kiln-queue';
import { z } from 'zod';

const schema = z
  .object({
    /** The text to count; leave it out to count the `data` strings of the job's dependencies. */
    text: z.string().max(1_000_000).optional(),
    top: z.number().int().min(1).max(100).default(3),
  })
  .strict();

export default {
  name: 'text.stats',
  description: 'Counts the words of a text, or of the texts its dependencies returned, and the most frequent ones.',
  schema,
  defaults: { priority: 6, maxAttempts: 2, timeoutMs: 10_000 },
  async handler(payload, ctx) {
    // ctx.parents: [{ id, type, result }] of the completed dependencies, in dependsOn order.
    const texts = payload.text !== undefined ? [payload.text] : ctx.parents.map((parent) => parent.result?.data);
    if (texts.length === 0 || texts.some((text) => typeof text !== 'string')) {
      // Retrying cannot fix this input: fail the job now instead of using up its attempts.
      throw new NonRetryableError('give payload.text, or depend on jobs whose result has a string "data"');
    }
    const counts = new Map();
    for (const [index, text] of texts.entries()) {
      ctx.signal.throwIfAborted();
      for (const word of text.toLowerCase().match(/[\p{L}\p{N}']+/gu) ?? []) {
        counts.set(word, (counts.get(word) ?? 0) + 1);
      }
      ctx.progress(((index + 1) / texts.length) * 100, `${index + 1} of ${texts.length} texts`);
    }
    const top = [...counts.entries()]
      .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
      .slice(0, payload.top)
      .map(([word, count]) => ({ word, count }));
    let words = 0;
    for (const count of counts.values()) words += count;
    return { texts: texts.length, words, distinct: counts.size, top };
  },
};
