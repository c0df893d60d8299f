/**
 * JSON with object keys sorted at every depth, so two payloads that differ only in key
 * order compare equal (idempotency replays). Follows JSON.stringify otherwise: undefined,
 * functions and symbols are left out of objects and become null in arrays; `toJSON` is
 * honoured.
 *
 * The text is stored (dedupe keys are its hash; idempotency replays compare it), so its
 * form may not change. Keys sorted into a fresh object come out as JavaScript orders an
 * object's keys: integer-like keys first, ascending by value, then the others by UTF-16
 * code units. Stable-stringify packages (RFC 8785 `canonicalize`, `safe-stable-stringify`,
 * `fast-json-stable-stringify`, `json-stable-stringify`) sort every key by code units
 * ("10" before "2"), which would change the key of any payload with such keys.
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value)) ?? 'null';
}

function sortKeys(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  const withJson = value as { toJSON?: () => unknown };
  if (typeof withJson.toJSON === 'function') return sortKeys(withJson.toJSON());
  if (Array.isArray(value)) return value.map(sortKeys);
  const sorted: Record<string, unknown> = {};
  for (const key of Object.keys(value).sort()) {
    sorted[key] = sortKeys((value as Record<string, unknown>)[key]);
  }
  return sorted;
}
