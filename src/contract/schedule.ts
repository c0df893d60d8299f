/** The rules a schedule is defined with (API.md "Schedules"). */
export const OVERLAP_RULES = ['allow', 'skip'] as const;
export const CATCH_UP_RULES = ['none', 'last'] as const;

/** What a client sets of a schedule (PUT /v1/schedules/{name}). */
export interface ScheduleDefinition {
  name: string;
  /** Five fields (minute precision) or six (leading seconds). */
  cron: string;
  /** IANA time zone the cron fields are read in. */
  timezone: string;
  /** The job request each tick submits, as the client gave it (validated at PUT time). */
  job: Record<string, unknown>;
  overlap: (typeof OVERLAP_RULES)[number];
  catchUp: (typeof CATCH_UP_RULES)[number];
  paused: boolean;
  /** The next tick; null while paused. */
  nextRunAt: number | null;
  /** When the definition was written (creation or replacement, pause, resume). */
  updatedAt: number;
}

export interface Schedule extends ScheduleDefinition {
  /** The tick (or trigger) that made the latest job; null before the first. */
  lastRunAt: number | null;
  lastJobId: string | null;
  createdAt: number;
}
