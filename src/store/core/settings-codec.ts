import type { LimitOverride } from '../../contract/limits.js';

/** Settings are key-value text in both stores; a task type's limit override is kept under this prefix, as JSON. */
export const LIMITS_PREFIX = 'limits:';

/** Overrides from their stored settings; a value that does not parse is left out. */
export function parseOverrides(settings: Iterable<[string, string]>): Map<string, LimitOverride> {
  const overrides = new Map<string, LimitOverride>();
  for (const [key, value] of settings) {
    if (!key.startsWith(LIMITS_PREFIX)) continue;
    try {
      overrides.set(key.slice(LIMITS_PREFIX.length), JSON.parse(value) as LimitOverride);
    } catch {
      // Written by this code as JSON; anything else is not an override.
    }
  }
  return overrides;
}
