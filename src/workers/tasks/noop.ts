import { z } from 'zod';
import { defineTask } from '../task.js';

const schema = z.object({ echo: z.json().optional() }).strict();

export default defineTask({
  name: 'noop',
  description: 'Does nothing: returns payload.echo when given, else {"ok": true}. For benchmarks and smoke tests.',
  schema,
  handler(payload) {
    return payload.echo === undefined ? { ok: true } : payload.echo;
  },
});
