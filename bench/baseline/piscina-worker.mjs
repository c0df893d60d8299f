/** The raw piscina baseline's thread: calls the Kiln task handler named by workerData, nothing else. */
import { workerData } from 'node:worker_threads';

const { default: definition } = await import(workerData.taskUrl);
const ctx = { jobId: 'bench', attempt: 1, signal: new AbortController().signal, progress() {}, parents: [] };

export default function run(payload) {
  return definition.handler(payload, ctx);
}
