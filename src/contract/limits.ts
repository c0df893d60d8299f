/** A run-time override of a task's limits: a field given replaces the module's (null: no such limit). */
export interface LimitOverride {
  concurrency?: number | null;
  rateLimit?: { max: number; perMs: number } | null;
}

/** A task type's limits (API.md "Task limits"). */
export interface TaskLimits {
  /** At most this many attempts of the type running at once. */
  concurrency: number | null;
  /** At most `max` attempts started in any window of `perMs`. */
  rateLimit: { max: number; perMs: number } | null;
}

/** What a limit is set on: a task type (API.md "Task limits") or a group (API.md "Group limits"). */
export type LimitKind = 'type' | 'group';
