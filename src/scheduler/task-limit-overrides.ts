import type { Dispatcher } from './dispatch/dispatcher.js';
import type { JobStore } from '../store/store.js';
import type { LimitOverride } from '../contract/limits.js';
import type { LoadedTask, TaskRegistry } from '../workers/registry.js';
import type { TaskLimits } from '../contract/limits.js';
import { effectiveLimits } from './dispatch/task-limits.js';
import { noSuchTask, unavailable } from './errors.js';

/** A registered task with its limits (GET /v1/tasks). */
export interface TaskInfo {
  task: LoadedTask;
  override: LimitOverride | null;
  /** The module's limits with the override on top: what dispatch applies. */
  effective: TaskLimits;
  /** Attempts of the task this server runs now. */
  running: number;
  /** Starts its rate limit allows now (null: no rate limit). */
  tokens: number | null;
}

export interface TaskLimitOverridesOptions {
  store: JobStore;
  registry: TaskRegistry;
  dispatcher: Dispatcher;
}

/**
 * Run-time overrides of task limits (PUT /v1/tasks/{name}/limits): stored, read at start
 * and again when another server may have changed them, and handed to dispatch, which
 * enforces the limits (dispatch/task-limits.ts).
 */
export class TaskLimitOverrides {
  readonly #options: TaskLimitOverridesOptions;
  /** The overrides as last read from the store. */
  #overrides = new Map<string, LimitOverride>();
  /** Writes made here; a read of the store that began before one of them is stale. */
  #writes = 0;

  constructor(options: TaskLimitOverridesOptions) {
    this.#options = options;
  }

  async load(): Promise<void> {
    this.#overrides = await this.#options.store.limitOverrides();
    this.#apply();
  }

  /** Reads the overrides again, and hands them to dispatch if another server changed them. */
  async reload(): Promise<void> {
    try {
      const writes = this.#writes;
      const overrides = await this.#options.store.limitOverrides();
      // A set() answered while this read was under way: the read may predate it.
      if (writes !== this.#writes) return;
      if (JSON.stringify([...overrides]) === JSON.stringify([...this.#overrides])) return;
      this.#overrides = overrides;
      this.#apply();
    } catch {
      // The store is away: the limits in force stay until it answers again.
    }
  }

  /** The registered tasks with their limits: declared, overridden, in force, and their use now. */
  tasks(): TaskInfo[] {
    const dispatcher = this.#options.dispatcher;
    return this.#options.registry.list().map((task) => {
      const override = this.#overrides.get(task.name) ?? null;
      const effective = effectiveLimits(task, override ?? undefined);
      const usage = dispatcher.limits.byType.usage(task.name);
      return {
        task,
        override,
        effective,
        running: dispatcher.attemptsBy('type', 'all').get(task.name) ?? 0,
        tokens: usage.tokens,
      };
    });
  }

  /** Override a task's limits at run time (stored; null for a field: no such limit). */
  async set(name: string, override: LimitOverride | null): Promise<TaskInfo> {
    if (this.#options.registry.get(name) === undefined) throw noSuchTask(name);
    await this.#options.store.setLimitOverride(name, override).catch(unavailable);
    this.#writes++;
    if (override === null) this.#overrides.delete(name);
    else this.#overrides.set(name, override);
    this.#apply();
    return this.tasks().find((info) => info.task.name === name) as TaskInfo;
  }

  /** Each registered task's limits with its override, for the dispatcher. */
  #apply(): void {
    const limits = new Map<string, TaskLimits>();
    for (const task of this.#options.registry.list()) {
      limits.set(task.name, effectiveLimits(task, this.#overrides.get(task.name)));
    }
    this.#options.dispatcher.configureLimits('type', limits);
  }
}
