import { isMainThread } from 'node:worker_threads';

// Throws when a worker thread imports it; the main thread's import (to read the name) succeeds.
if (!isMainThread) throw new Error('thrown at import in a worker thread');

export default { name: 'bad.import-worker', handler: () => ({ ran: true }) };
