import type { Backoff, Job, NewJob } from '../../contract/job.js';
import type { Clock } from '../../time/clock.js';
import type { FireResult, InsertResult, JobStore } from '../../store/store.js';
import type { KilnMetrics } from '../statistics/metrics.js';
import type { Schedule } from '../../contract/schedule.js';
import type { ScheduleDefinition } from '../../contract/schedule.js';
import { FaultLog, type FaultLogger } from '../../fault-log.js';
import { KilnError } from '../errors.js';
import { Timetable } from '../../contract/cron.js';

/**
 * Schedules (API.md "Schedules"): each tick of a schedule's cron timetable makes one job.
 *
 * One timer for the whole service, armed for the earliest `nextRunAt` of all schedules
 * (not one per schedule), and armed again whenever a schedule changes or ticks. A tick
 * is fired by the store in one transaction: a compare-and-set of `nextRunAt` from the
 * value this server read, the overlap check, and the job's insert with the idempotency
 * key `schedule:<name>:<tick time>`. So however many servers share a store, one of them
 * fires each tick and the tick makes one job; the others see their compare-and-set fail
 * and read the schedule again. With a store shared by several servers, the schedules
 * are also read again every second, so changes made on another server take effect here.
 *
 * A tick is late, not missed, while it is at most MISFIRE_MS old (a busy process, a quick
 * restart): each late tick still makes its job. A tick found older than that was missed
 * while no server ran: `catchUp: none` drops it and every other tick that passed, `last`
 * makes one job for the most recent tick that passed; either way the timetable then
 * goes on from now.
 *
 * States of the service: created → start() (schedules read, timer armed) → stop().
 */
export interface ScheduleRunnerOptions {
  store: JobStore;
  clock: Clock;
  metrics: KilnMetrics;
  log: FaultLogger;
  /** Whether a task type is registered now. */
  registered(type: string): boolean;
  /** The job a schedule's request makes (validated, defaults applied), or a KilnError naming what is wrong. */
  prepare(request: Record<string, unknown>, schedule: string, idempotencyKey: string | null): Promise<NewJob>;
  /** Jobs the store took: counted and handed to dispatch. */
  admitted(inserted: Extract<InsertResult, { ok: true }>): void;
  /**
   * A tick this server fired, with its prepared job and what inserting it answered (null:
   * none was made); a tick another server fired first is never told of.
   */
  fired?(job: NewJob, insert: InsertResult | null): void;
  /** The error a client gets for an insert the store refused. */
  refusal(inserted: Extract<InsertResult, { ok: false }>): KilnError;
  /** Turns a store failure into the error a client gets (503 store_unavailable); rethrows anything else. */
  storeFailed(error: unknown): never;
}

/** How late a tick may be and still make its job (Quartz's default misfire threshold). */
export const MISFIRE_MS = 60_000;
/**
 * How long ticks wait after the store failed to fire one, n times in a row: 1 s doubling
 * to 30 s, half of MISFIRE_MS, so the ticks of a store that is back within half a minute
 * are late, not missed.
 */
const STORE_BACKOFF: Backoff = { initialMs: 1000, factor: 2, maxMs: 30_000, jitter: 'none' };
/** The longest the one timer is set for; it is armed again then (setTimeout holds at most ~24.8 days). */
const MAX_TIMER_MS = 3_600_000;

export type ScheduleInput = Omit<ScheduleDefinition, 'nextRunAt' | 'updatedAt'>;

export class ScheduleRunner {
  readonly #options: ScheduleRunnerOptions;
  readonly #store: JobStore;
  readonly #clock: Clock;
  /** Each schedule as last read or written, by name. */
  #schedules = new Map<string, Schedule>();
  readonly #timetables = new Map<string, { key: string; timetable: Timetable }>();
  #cancelTimer: (() => void) | null = null;
  /** The pass over due ticks in progress, and whether another must follow it. */
  #pass: Promise<void> | null = null;
  #again = false;
  /** After a store failure, no tick is tried before this time. */
  #retryAfter = 0;
  readonly #storeFault: FaultLog;
  #started = false;
  #stopped = false;

  constructor(options: ScheduleRunnerOptions) {
    this.#options = options;
    this.#store = options.store;
    this.#clock = options.clock;
    this.#storeFault = new FaultLog(options.log, {
      what: 'firing schedule ticks',
      backoff: STORE_BACKOFF,
      now: () => this.#clock.now(),
    });
  }

  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    await this.reload();
  }

  /** Stop ticking; a pass under way ends after its current tick. Safe to call twice. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#cancelTimer?.();
    this.#cancelTimer = null;
    await this.whenIdle();
  }

  /** Resolves once no pass over due ticks is under way (tests wait on it after moving a fake clock). */
  async whenIdle(): Promise<void> {
    while (this.#pass !== null) await this.#pass;
  }

  // ── the API's actions ─────────────────────────────────────────────────────

  list(): Promise<Schedule[]> {
    return this.#store.schedules().catch(this.#options.storeFailed);
  }

  async get(name: string): Promise<Schedule> {
    const schedule = await this.#store.getSchedule(name).catch(this.#options.storeFailed);
    if (schedule === null) throw noSuchSchedule(name);
    return schedule;
  }

  /** Create or replace; the job request is validated now, as a submission would be. */
  async put(input: ScheduleInput): Promise<{ created: boolean; schedule: Schedule }> {
    await this.#options.prepare(input.job, input.name, null);
    const now = this.#clock.now();
    const nextRunAt = input.paused ? null : this.#timetable(input).nextAfter(now);
    const written = await this.#store
      .putSchedule({ ...input, nextRunAt, updatedAt: now })
      .catch(this.#options.storeFailed);
    this.#remember(written.schedule);
    return written;
  }

  async remove(name: string): Promise<void> {
    if (!(await this.#store.removeSchedule(name).catch(this.#options.storeFailed))) throw noSuchSchedule(name);
    this.#forget(name);
    this.#arm();
  }

  /** Pause: no ticks (nextRunAt null) until resumed; resume: ticks again from now on, none made up. */
  async setPaused(name: string, paused: boolean): Promise<Schedule> {
    const current = await this.get(name);
    const now = this.#clock.now();
    const nextRunAt = paused ? null : this.#timetable(current).nextAfter(now);
    const { schedule } = await this.#store
      .putSchedule({ ...current, paused, nextRunAt, updatedAt: now })
      .catch(this.#options.storeFailed);
    this.#remember(schedule);
    return schedule;
  }

  /** One job now, whatever the timetable, overlap and paused say; recorded as the schedule's last job. */
  async trigger(name: string): Promise<Job> {
    const schedule = await this.get(name);
    const job = await this.#options.prepare(schedule.job, name, null);
    const fired = await this.#store
      .fireSchedule({ name, expected: null, nextRunAt: null, runAt: this.#clock.now(), job, skipOverlap: false })
      .catch(this.#options.storeFailed);
    if (!fired.fired) throw noSuchSchedule(name);
    this.#options.fired?.(job, fired.insert);
    this.#remember(fired.schedule);
    const inserted = fired.insert as InsertResult;
    if (!inserted.ok) throw this.#options.refusal(inserted);
    this.#options.admitted(inserted);
    return (inserted.outcomes[0] as { job: Job }).job;
  }

  // ── ticking ───────────────────────────────────────────────────────────────

  /** Fire every due tick, then arm the timer for the next; one pass at a time. */
  #runDue(): Promise<void> {
    if (this.#pass !== null) {
      this.#again = true;
      return this.#pass;
    }
    const pass = this.#firePass().finally(() => {
      this.#pass = null;
      this.#arm();
    });
    this.#pass = pass;
    return pass;
  }

  async #firePass(): Promise<void> {
    // #runDue records this pass before any of it runs: a pass with nothing due would
    // otherwise end, and clear the record, before it was made.
    await Promise.resolve();
    do {
      this.#again = false;
      const now = this.#clock.now();
      for (const name of [...this.#schedules.keys()]) {
        let schedule = this.#schedules.get(name);
        while (!this.#stopped && schedule !== undefined && isDue(schedule, now) && now >= this.#retryAfter) {
          schedule = await this.#tick(schedule, now);
        }
      }
    } while (this.#again && !this.#stopped);
  }

  /** Fires the schedule's due tick; answers the schedule as it is now (undefined: gone, or not due here). */
  async #tick(schedule: Schedule, now: number): Promise<Schedule | undefined> {
    const due = schedule.nextRunAt as number;
    let timetable: Timetable;
    try {
      timetable = this.#timetable(schedule);
    } catch (error) {
      // Stored by an earlier version that read it differently: say so, and leave it be.
      this.#options.log.error({ err: error, schedule: schedule.name }, 'a stored schedule has a cron it cannot read');
      this.#schedules.delete(schedule.name);
      return undefined;
    }
    // A tick older than the misfire threshold was missed (no server ran): `last` makes one job for
    // the most recent tick that passed, `none` none, and the timetable goes on from now.
    const missed = due < now - MISFIRE_MS;
    const runAt = !missed ? due : schedule.catchUp === 'last' ? (timetable.lastBefore(now + 1) ?? due) : null;
    const nextRunAt = missed ? timetable.nextAfter(now) : timetable.nextAfter(due);
    const type = typeof schedule.job.type === 'string' ? schedule.job.type : '';
    let job: NewJob | null = null;
    let skipped: string | null = null;
    if (runAt !== null) {
      if (!this.#options.registered(type)) skipped = `no task is registered as "${type}"`;
      else {
        try {
          job = await this.#options.prepare(schedule.job, schedule.name, tickKey(schedule.name, runAt));
        } catch (error) {
          // The task's payload schema changed since the schedule was written.
          if (!(error instanceof KilnError)) throw error;
          skipped = error.message;
        }
      }
    }
    let fired: FireResult;
    try {
      fired = await this.#store.fireSchedule({
        name: schedule.name,
        expected: { nextRunAt: due, updatedAt: schedule.updatedAt },
        nextRunAt,
        runAt: runAt ?? due,
        job,
        skipOverlap: schedule.overlap === 'skip',
      });
    } catch (error) {
      this.#storeAway(error);
      return undefined;
    }
    this.#storeFault.succeeded();
    if (fired.fired && job !== null) this.#options.fired?.(job, fired.insert);
    if (!fired.fired) {
      // Another server fired this tick, or the schedule changed: read it as it is now.
      let current: Schedule | null;
      try {
        current = await this.#store.getSchedule(schedule.name);
      } catch (error) {
        this.#storeAway(error);
        return undefined;
      }
      if (current === null) {
        this.#forget(schedule.name);
      } else this.#remember(current, false);
      return current !== null && current.nextRunAt !== due ? current : undefined;
    }
    this.#remember(fired.schedule, false);
    if (runAt !== null) this.#count(schedule.name, runAt, fired, skipped);
    return fired.schedule;
  }

  /** The store cannot be reached: the due ticks are tried again after a back-off, as they still are. */
  #storeAway(error: unknown): void {
    this.#retryAfter = this.#clock.now() + this.#storeFault.failed(error);
  }

  #count(name: string, runAt: number, fired: Extract<FireResult, { fired: true }>, skipped: string | null): void {
    const tick = new Date(runAt).toISOString();
    if (skipped !== null) {
      this.#options.log.warn({ schedule: name, tick, reason: skipped }, 'a schedule tick was skipped');
      this.#options.metrics.scheduleTick(name, 'skipped');
    } else if (fired.overlap) {
      this.#options.metrics.scheduleTick(name, 'overlap');
    } else if (fired.insert !== null && !fired.insert.ok) {
      const reason = this.#options.refusal(fired.insert).message;
      this.#options.log.warn({ schedule: name, tick, reason }, 'a schedule tick was skipped');
      this.#options.metrics.scheduleTick(name, 'skipped');
    } else if (fired.insert !== null) {
      this.#options.admitted(fired.insert);
      this.#options.metrics.scheduleTick(name, 'created');
    }
  }

  // ── the schedules in memory and the timer ─────────────────────────────────

  /** Read the schedules again: a server of a shared store sees changes made on another server. */
  async reload(): Promise<void> {
    const schedules = await this.#store.schedules();
    const before = this.#schedules;
    this.#schedules = new Map(schedules.map((schedule) => [schedule.name, schedule]));
    for (const name of before.keys()) if (!this.#schedules.has(name)) this.#options.metrics.scheduleGone(name);
    for (const name of this.#schedules.keys()) if (!before.has(name)) this.#options.metrics.scheduleKnown(name);
    for (const name of this.#timetables.keys()) if (!this.#schedules.has(name)) this.#timetables.delete(name);
    this.#arm();
  }

  /** A schedule that no longer exists: its entry, its timetable and its metric series go. */
  #forget(name: string): void {
    if (this.#schedules.delete(name)) this.#options.metrics.scheduleGone(name);
    this.#timetables.delete(name);
  }

  #remember(schedule: Schedule, arm = true): void {
    if (!this.#schedules.has(schedule.name)) this.#options.metrics.scheduleKnown(schedule.name);
    this.#schedules.set(schedule.name, schedule);
    if (arm) this.#arm();
  }

  #timetable(schedule: Pick<Schedule, 'name' | 'cron' | 'timezone'>): Timetable {
    const key = `${schedule.cron}\u0000${schedule.timezone}`;
    const known = this.#timetables.get(schedule.name);
    if (known !== undefined && known.key === key) return known.timetable;
    const timetable = new Timetable(schedule.cron, schedule.timezone);
    this.#timetables.set(schedule.name, { key, timetable });
    return timetable;
  }

  /** The one timer, for the earliest tick of all schedules. */
  #arm(): void {
    this.#cancelTimer?.();
    this.#cancelTimer = null;
    if (!this.#started || this.#stopped || this.#pass !== null) return;
    let earliest: number | null = null;
    for (const schedule of this.#schedules.values()) {
      if (schedule.paused || schedule.nextRunAt === null) continue;
      if (earliest === null || schedule.nextRunAt < earliest) earliest = schedule.nextRunAt;
    }
    if (earliest === null) return;
    const delay = Math.min(
      MAX_TIMER_MS,
      Math.max(0, earliest - this.#clock.now(), this.#retryAfter - this.#clock.now()),
    );
    this.#cancelTimer = this.#clock.setTimer(() => {
      this.#cancelTimer = null;
      void this.#runDue().catch((error: unknown) =>
        this.#options.log.error({ err: error }, 'schedules failed to tick'),
      );
    }, delay);
  }
}

function isDue(schedule: Schedule, now: number): boolean {
  return !schedule.paused && schedule.nextRunAt !== null && schedule.nextRunAt <= now;
}

/** The idempotency key of a tick's job: one job per tick, however many servers fire it. */
export function tickKey(name: string, at: number): string {
  return `schedule:${name}:${new Date(at).toISOString()}`;
}

function noSuchSchedule(name: string): KilnError {
  return new KilnError('not_found', `no schedule is named ${JSON.stringify(name)}`);
}
