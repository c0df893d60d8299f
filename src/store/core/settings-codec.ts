import type { LimitKind, LimitOverride } from '../../contract/limits.js';

/**
 * Settings are key-value text in both stores; limits set at run time are kept as JSON
 * under a prefix per kind: a task type's override, or a group's limits.
 */
const LIMITS_PREFIXES: Record<LimitKind, string> = { type: 'limits:', group: 'group-limits:' };

/** The settings key prefix of a kind of limit. */
export function limitsPrefix(kind: LimitKind): string {
  return LIMITS_PREFIXES[kind];
}

/** The settings key of the limits set on `key` (a task type or a group). */
export function limitsKey(kind: LimitKind, key: string): string {
  return LIMITS_PREFIXES[kind] + key;
}

/** Limits of one kind from their stored settings; a value that does not parse is left out. */
export function parseOverrides(settings: Iterable<[string, string]>, kind: LimitKind): Map<string, LimitOverride> {
  const prefix = LIMITS_PREFIXES[kind];
  const overrides = new Map<string, LimitOverride>();
  for (const [key, value] of settings) {
    if (!key.startsWith(prefix)) continue;
    try {
      overrides.set(key.slice(prefix.length), JSON.parse(value) as LimitOverride);
    } catch {
      // Written by this code as JSON; anything else is not an override.
    }
  }
  return overrides;
}
