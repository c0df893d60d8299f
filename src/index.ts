export type { Snooze, TaskContext, TaskDefinition } from './workers/task.js';
export { defineTask, NonRetryableError } from './workers/task.js';
