import type { LimitKind, LimitOverride } from '../../contract/limits.js';

/** Settings set at run time and kept across restarts: the pause, task limit overrides and group limits. */
export interface SettingsFacet {
  /** Whether dispatch is paused; kept across restarts. */
  paused(): Promise<boolean>;

  setPaused(paused: boolean): Promise<void>;

  /**
   * Limits set at run time, by key, kept across restarts: with kind `type` (the default)
   * task limit overrides (PUT /v1/tasks/{name}/limits), with kind `group` group limits
   * (PUT /v1/groups/{group}/limits).
   */
  limitOverrides(kind?: LimitKind): Promise<Map<string, LimitOverride>>;

  /** Set a key's limits, or remove them (null: for a type, back to the task module's own limits). */
  setLimitOverride(key: string, override: LimitOverride | null, kind?: LimitKind): Promise<void>;

  /** Queued and running jobs of each group that has any (GET /v1/groups). */
  groupCounts(): Promise<GroupCount[]>;
}

export interface GroupCount {
  group: string;
  queued: number;
  running: number;
}
