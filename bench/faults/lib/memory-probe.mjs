/**
 * Preloaded into a Kiln server by the soak (`node --import …/memory-probe.mjs`): every
 * KILN_BENCH_MEMORY_MS (default 1000) ms each thread appends one JSON line to the file
 * KILN_BENCH_MEMORY_LOG: the main thread (thread 0) process.memoryUsage() and its V8 heap
 * spaces; every worker thread (they inherit the option: the pool's threads and the
 * SQLite store's) its own isolate's heap, which the main thread's figures leave out. The
 * timers are unref()ed, so they never keep a thread alive.
 */
import { appendFileSync } from 'node:fs';
import { getHeapSpaceStatistics, getHeapStatistics } from 'node:v8';
import { isMainThread, threadId } from 'node:worker_threads';

const path = process.env.KILN_BENCH_MEMORY_LOG;
if (path !== undefined && path !== '') {
  const everyMs = Number(process.env.KILN_BENCH_MEMORY_MS ?? 1000);
  const timer = setInterval(() => {
    let line;
    if (isMainThread) {
      const spaces = Object.fromEntries(getHeapSpaceStatistics().map((s) => [s.space_name, s.space_used_size]));
      line = { thread: 0, at: Date.now(), ...process.memoryUsage(), spaces };
    } else {
      const heap = getHeapStatistics();
      line = {
        thread: threadId,
        at: Date.now(),
        heapUsed: heap.used_heap_size,
        heapTotal: heap.total_heap_size,
        external: heap.external_memory,
        mallocedMemory: heap.malloced_memory,
      };
    }
    appendFileSync(path, `${JSON.stringify(line)}\n`);
  }, everyMs);
  timer.unref();
}
