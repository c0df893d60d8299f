/**
 * What a token may do (API.md, "Authentication"). The scopes nest: `read` is every GET,
 * the event streams and /metrics; `submit` is `read` and submitting jobs; `admin` is
 * everything. Each route declares the one it needs, next to the route.
 */
export const SCOPES = ['read', 'submit', 'admin'] as const;
export type Scope = (typeof SCOPES)[number];

/** Whether a token holding `held` may take an action that needs `needed`. */
export function grants(held: readonly Scope[], needed: Scope): boolean {
  const rank = SCOPES.indexOf(needed);
  return held.some((scope) => SCOPES.indexOf(scope) >= rank);
}
