import type { Backoff } from '../contract/job.js';

/**
 * The delay before attempt n+1 after n failed attempts (n >= 1), per API.md:
 * d = min(maxMs, initialMs * factor^(n-1)); `full` jitter draws from [0, d],
 * `equal` from [d/2, d], `none` is d. `random` returns a number in [0, 1).
 */
export function retryDelayMs(backoff: Backoff, failedAttempts: number, random: () => number = Math.random): number {
  const exponent = Math.max(0, failedAttempts - 1);
  const raw = backoff.initialMs * backoff.factor ** exponent;
  const d = Math.min(backoff.maxMs, Number.isFinite(raw) ? raw : backoff.maxMs);
  switch (backoff.jitter) {
    case 'none':
      return Math.round(d);
    case 'equal':
      return Math.round(d / 2 + random() * (d / 2));
    case 'full':
      return Math.round(random() * d);
  }
}
