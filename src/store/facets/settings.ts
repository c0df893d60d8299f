import type { LimitOverride } from '../../contract/limits.js';

/** Settings set at run time and kept across restarts: the pause and task limit overrides. */
export interface SettingsFacet {
  /** Whether dispatch is paused; kept across restarts. */
  paused(): Promise<boolean>;

  setPaused(paused: boolean): Promise<void>;

  /** Task limits set at run time (PUT /v1/tasks/{name}/limits), by task type; kept across restarts. */
  limitOverrides(): Promise<Map<string, LimitOverride>>;

  /** Set a type's override, or remove it (null: back to the task module's own limits). */
  setLimitOverride(type: string, override: LimitOverride | null): Promise<void>;
}
