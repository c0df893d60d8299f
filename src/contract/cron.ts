import { Cron } from 'croner';

/**
 * Cron timetables, read by croner (five fields, or six with leading seconds; names in an
 * IANA time zone). Croner's rules for daylight-saving changes apply (README, "Schedules"):
 * a fixed time that falls in a gap runs at the first valid time after it, and one that
 * occurs twice runs once; an interval pattern skips the times in a gap and runs on both
 * occurrences of a repeated time.
 */
export class Timetable {
  readonly #cron: Cron;

  /** Throws a plain Error naming what is wrong with the pattern or the time zone. */
  constructor(pattern: string, timezone: string) {
    this.#cron = new Cron(pattern, { timezone, mode: '5-or-6-parts', paused: true });
  }

  /** The first tick strictly after `ms` (null: the pattern has no later tick). */
  nextAfter(ms: number): number | null {
    // Croner compares whole seconds: a reference inside a tick's second would skip the tick.
    return this.#cron.nextRun(new Date(Math.floor(ms / 1000) * 1000 + 999))?.getTime() ?? null;
  }

  /** The latest tick strictly before `ms`, or null. */
  lastBefore(ms: number): number | null {
    for (const run of this.#cron.previousRuns(2, new Date(ms))) {
      if (run.getTime() < ms) return run.getTime();
    }
    return null;
  }
}

/** Whether `timezone` is an IANA time zone name this runtime knows. */
export function isTimeZone(timezone: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: timezone });
    return true;
  } catch {
    return false;
  }
}
