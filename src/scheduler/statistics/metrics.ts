import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import { FastCounter, FastHistogram } from './fast-metrics.js';
import type { JobStats } from './job-stats.js';
import type { QueueCounts } from '../../contract/queue.js';
import { JOB_STATUSES, type JobStatus } from '../../contract/job.js';
import { PENDING_STATUSES } from '../../store/core/statuses.js';
import { REFUSAL_REASONS, type RefusalReason } from '../dispatch/refused-outcome.js';
import { THREAD_END_REASONS, type ThreadEndReason } from '../../workers/pool.js';

export const ATTEMPT_METRIC_OUTCOMES = ['success', 'error', 'timeout', 'crash', 'snoozed'] as const;
export type AttemptMetricOutcome = (typeof ATTEMPT_METRIC_OUTCOMES)[number];
const FINISHED_STATUSES = ['completed', 'failed', 'cancelled'] as const;
const DEDUPE_KINDS = ['inflight', 'result'] as const;
const LIMIT_KINDS = ['concurrency', 'rate'] as const;
const SCHEDULE_TICK_OUTCOMES = ['created', 'skipped', 'overlap'] as const;

export interface GaugeSource {
  counts(): Promise<QueueCounts>;
  capacity: number;
  /** Worker threads alive now. */
  threads(): number;
  busyThreads(): number;
  /** Registered task types (each gets its series at 0) and the attempts of each this server runs. */
  taskTypes?: () => string[];
  runningByType?: () => Map<string, number>;
  /** Attempts of each task type this server claimed that wait in its queue for a thread (kiln_task_claimed). */
  claimedByType?: () => Map<string, number>;
  /** Attempts this server runs of each group with limits (kiln_group_running). */
  runningByGroup?: () => Map<string, number>;
  /** Whether dispatch is paused (kiln_queue_paused). */
  paused?: () => boolean;
  /** Live servers sharing the store; absent for a store of one process. */
  liveNodes?: () => Promise<number>;
  /** Where the recent figures of GET /v1/stats go, fed by the same calls as the counters. */
  stats?: JobStats;
}

/**
 * Wait and run times: from a tenth of a millisecond (a micro-batched hash) to an hour (a
 * long report), no bucket more than 2.5 times the one below, so a quantile anywhere in
 * that range is read between two close bounds.
 */
export const JOB_SECONDS_BUCKETS = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300,
  600, 1200, 1800, 3600,
];
/** HTTP answers: a long poll holds a request up to 60 s. */
const HTTP_SECONDS_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const COMMIT_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5];
const GAUGE_STATUSES = JOB_STATUSES.filter((status) => status === 'running' || PENDING_STATUSES.includes(status));

/**
 * The Prometheus metrics of one Kiln instance, on a registry of its own (several
 * instances may share a process in tests). Counters are bumped by the scheduler;
 * gauges are read from the store and the pool when scraped.
 */
export class KilnMetrics {
  readonly registry = new Registry();
  readonly #submitted: FastCounter<'type'>;
  readonly #finished: FastCounter<'type' | 'status'>;
  readonly #snoozed: Counter<'type'>;
  readonly #attempts: FastCounter<'type' | 'outcome'>;
  readonly #rejected: Counter<'reason'>;
  readonly #wait: FastHistogram<'type'>;
  readonly #run: FastHistogram<'type' | 'outcome'>;
  readonly #commit: FastHistogram;
  readonly #limited: FastCounter<'type' | 'limit'>;
  readonly #groupLimited: Counter<'group' | 'limit'>;
  readonly #dedupe: FastCounter<'type' | 'kind'>;
  readonly #scheduleTicks: Counter<'schedule' | 'outcome'>;
  readonly #callbacks: Counter<'outcome'>;
  readonly #refused: Counter<'reason'>;
  readonly #threadRestarts: Counter<'reason'>;
  readonly #httpRequests: FastCounter<'method' | 'route' | 'status'>;
  readonly #httpSeconds: FastHistogram<'method' | 'route'>;
  readonly #stats: JobStats | undefined;

  constructor(source: GaugeSource) {
    this.#stats = source.stats;
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    // These three are gauges named like counters, which `promtool check metrics` refuses.
    for (const name of [
      'nodejs_active_handles_total',
      'nodejs_active_requests_total',
      'nodejs_active_resources_total',
    ]) {
      this.registry.removeSingleMetric(name);
    }
    this.#submitted = new FastCounter({
      name: 'kiln_jobs_submitted_total',
      help: 'Jobs accepted, by task type.',
      labelNames: ['type'],
      registers,
    });
    this.#finished = new FastCounter({
      name: 'kiln_jobs_finished_total',
      help: 'Jobs that reached a terminal status.',
      labelNames: ['type', 'status'],
      registers,
    });
    this.#snoozed = new Counter({
      name: 'kiln_jobs_snoozed_total',
      help: 'Snoozes (ctx.snooze): jobs scheduled again with their attempt given back, by task type.',
      labelNames: ['type'],
      registers,
    });
    this.#attempts = new FastCounter({
      name: 'kiln_job_attempts_total',
      help: 'Attempts that ended, by outcome.',
      labelNames: ['type', 'outcome'],
      registers,
    });
    this.#rejected = new Counter({
      name: 'kiln_admission_rejected_total',
      help: 'Submissions refused at admission.',
      labelNames: ['reason'],
      registers,
    });
    this.#wait = new FastHistogram({
      name: 'kiln_job_wait_seconds',
      help: 'Time from ready to started.',
      labelNames: ['type'],
      buckets: JOB_SECONDS_BUCKETS,
      registers,
    });
    this.#run = new FastHistogram({
      name: 'kiln_job_run_seconds',
      help: 'Attempt run time, by outcome.',
      labelNames: ['type', 'outcome'],
      buckets: JOB_SECONDS_BUCKETS,
      registers,
    });
    this.#commit = new FastHistogram({
      name: 'kiln_store_commit_seconds',
      help: 'Time a store commit of writes took (with its fsync on SQLite).',
      buckets: COMMIT_BUCKETS,
      registers,
    });
    for (const reason of ['queue_full', 'shutting_down']) this.#rejected.inc({ reason }, 0);

    // Gauges share one read of the counts per scrape. While the store cannot answer (the
    // database is away) they keep the last figures read, so the scrape itself still works.
    let snapshot: Promise<QueueCounts | null> | null = null;
    let last: QueueCounts | null = null;
    const counts = (): Promise<QueueCounts | null> => {
      snapshot ??= source
        .counts()
        .then(
          (read) => (last = read),
          () => last,
        )
        .finally(() => {
          setImmediate(() => {
            snapshot = null;
          });
        });
      return snapshot;
    };
    new Gauge({
      name: 'kiln_queue_depth',
      help: 'Queued jobs, by priority.',
      labelNames: ['priority'],
      registers,
      async collect() {
        const c = await counts();
        if (c === null) return;
        for (const [priority, n] of c.queuedByPriority.entries()) this.set({ priority: String(priority) }, n);
      },
    });
    new Gauge({
      name: 'kiln_jobs',
      help: 'Jobs in each non-terminal status.',
      labelNames: ['status'],
      registers,
      async collect() {
        const c = await counts();
        if (c === null) return;
        for (const status of GAUGE_STATUSES) this.set({ status }, c.byStatus[status as JobStatus]);
      },
    });
    new Gauge({
      name: 'kiln_queue_capacity',
      help: 'Pending jobs admitted at most.',
      registers,
      collect() {
        this.set(source.capacity);
      },
    });
    new Gauge({
      name: 'kiln_queue_oldest_age_seconds',
      help: 'Age of the oldest queued job since it became ready; 0 when none is queued.',
      registers,
      async collect() {
        const c = await counts();
        if (c === null) return;
        this.set(c.oldestQueuedReadyAt === null ? 0 : Math.max(0, (Date.now() - c.oldestQueuedReadyAt) / 1000));
      },
    });
    new Gauge({
      name: 'kiln_pool_threads',
      help: 'Worker threads alive in the pool (below the configured count while a dead one is replaced).',
      registers,
      collect() {
        this.set(source.threads());
      },
    });
    new Gauge({
      name: 'kiln_pool_busy_threads',
      help: 'Worker threads running an attempt.',
      registers,
      collect() {
        this.set(source.busyThreads());
      },
    });
    const { taskTypes, runningByType, claimedByType } = source;
    // Attempts by task type, every registered type shown (0 when it has none).
    const byType = (name: string, help: string, read: (() => Map<string, number>) | undefined) =>
      new Gauge({
        name,
        help,
        labelNames: ['type'],
        registers,
        collect() {
          this.reset();
          const counted = read?.() ?? new Map<string, number>();
          for (const type of taskTypes?.() ?? []) this.set({ type }, counted.get(type) ?? 0);
          for (const [type, n] of counted) this.set({ type }, n);
        },
      });
    byType(
      'kiln_task_claimed',
      'Attempts of each task type this server claimed that wait in its queue for a thread (not started).',
      claimedByType,
    );
    byType(
      'kiln_task_running',
      'Attempts of each task type this server runs now (their handler started).',
      runningByType,
    );
    this.#limited = new FastCounter({
      name: 'kiln_task_limited_total',
      help: "Claims that passed a job over because its type's limit held it back.",
      labelNames: ['type', 'limit'],
      registers,
    });
    this.#groupLimited = new Counter({
      name: 'kiln_group_limited_total',
      help: "Claims that passed a job over because its group's limit held it back (groups with limits only).",
      labelNames: ['group', 'limit'],
      registers,
    });
    const { runningByGroup } = source;
    new Gauge({
      name: 'kiln_group_running',
      help: 'Attempts of each group with limits this server runs now (their handler started).',
      labelNames: ['group'],
      registers,
      collect() {
        this.reset();
        for (const [group, n] of runningByGroup?.() ?? []) this.set({ group }, n);
      },
    });
    this.#dedupe = new FastCounter({
      name: 'kiln_dedupe_hits_total',
      help: 'Submissions answered by dedupe: a job of the same work not finished (inflight) or a reused result.',
      labelNames: ['type', 'kind'],
      registers,
    });
    this.#scheduleTicks = new Counter({
      name: 'kiln_schedule_ticks_total',
      help: 'Schedule ticks fired here, by outcome: a job created, skipped (task type not registered, job refused), or held back by overlap.',
      labelNames: ['schedule', 'outcome'],
      registers,
    });
    this.#callbacks = new Counter({
      name: 'kiln_callback_deliveries_total',
      help: 'Callback delivery attempts, by outcome: delivered, retry (failed, another follows), failed (the last).',
      labelNames: ['outcome'],
      registers,
    });
    for (const outcome of ['delivered', 'retry', 'failed']) this.#callbacks.inc({ outcome }, 0);
    this.#refused = new Counter({
      name: 'kiln_outcomes_refused_total',
      help: "Attempt outcomes the store's fence refused, by why: the attempt was no longer this server's (gone, cancelled, rescued, rerun, finished, lease_lost; unknown if the job could not be read).",
      labelNames: ['reason'],
      registers,
    });
    for (const reason of [...REFUSAL_REASONS, 'unknown']) this.#refused.inc({ reason }, 0);
    this.#threadRestarts = new Counter({
      name: 'kiln_thread_restarts_total',
      help: 'Worker threads that ended and were replaced, by reason: crashed, memory, timeout, stopped, recycled, isolated.',
      labelNames: ['reason'],
      registers,
    });
    for (const reason of THREAD_END_REASONS) this.#threadRestarts.inc({ reason }, 0);
    const paused = source.paused;
    new Gauge({
      name: 'kiln_queue_paused',
      help: 'Whether dispatch is paused (1) or running (0).',
      registers,
      collect() {
        this.set(paused?.() === true ? 1 : 0);
      },
    });
    this.#httpRequests = new FastCounter({
      name: 'kiln_http_requests_total',
      help: 'HTTP requests answered, by route pattern, method and status code.',
      labelNames: ['method', 'route', 'status'],
      registers,
    });
    this.#httpSeconds = new FastHistogram({
      name: 'kiln_http_request_duration_seconds',
      help: 'Time from a request to the end of its answer, by route pattern and method.',
      labelNames: ['method', 'route'],
      buckets: HTTP_SECONDS_BUCKETS,
      registers,
    });

    // Every labelled counter starts at 0 for each task type and label value, so that
    // rate() and increase() see the first failure after a restart instead of a series
    // that appears already at 1 (which they read as no increase).
    // The wait histogram too, so the first jobs of a type already make a rate of its buckets.
    for (const type of source.taskTypes?.() ?? []) {
      this.#wait.zero({ type });
      this.#submitted.inc({ type }, 0);
      for (const status of FINISHED_STATUSES) this.#finished.inc({ type, status }, 0);
      this.#snoozed.inc({ type }, 0);
      for (const outcome of ATTEMPT_METRIC_OUTCOMES) this.#attempts.inc({ type, outcome }, 0);
      for (const kind of DEDUPE_KINDS) this.#dedupe.inc({ type, kind }, 0);
      for (const limit of LIMIT_KINDS) this.#limited.inc({ type, limit }, 0);
    }

    const liveNodes = source.liveNodes;
    if (liveNodes !== undefined) {
      new Gauge({
        name: 'kiln_nodes',
        help: 'Live servers sharing the PostgreSQL store (seen within three lease periods).',
        registers,
        async collect() {
          this.set(await liveNodes().catch(() => 0));
        },
      });
    }
  }

  submitted(type: string, n = 1): void {
    this.#submitted.labels(type).inc(n);
    this.#stats?.submitted(n);
  }

  finished(type: string, status: (typeof FINISHED_STATUSES)[number]): void {
    this.#finished.labels(type, status).inc();
    this.#stats?.finished(status);
  }

  snoozed(type: string): void {
    this.#snoozed.inc({ type });
  }

  attempt(type: string, outcome: AttemptMetricOutcome, seconds: number): void {
    this.#attempts.labels(type, outcome).inc();
    this.#run.labels(type, outcome).observe(seconds);
    this.#stats?.ran(seconds * 1000);
  }

  waited(type: string, seconds: number): void {
    this.#wait.labels(type).observe(seconds);
    this.#stats?.waited(seconds * 1000);
  }

  rejected(reason: 'queue_full' | 'shutting_down'): void {
    this.#rejected.inc({ reason });
  }

  /** One HTTP answer: `route` is the route's pattern (`/v1/jobs/:id`), never the raw URL. */
  httpRequest(method: string, route: string, status: number, seconds: number): void {
    this.#httpRequests.labels(method, route, String(status)).inc();
    this.#httpSeconds.labels(method, route).observe(seconds);
  }

  dedupeHit(type: string, kind: (typeof DEDUPE_KINDS)[number]): void {
    this.#dedupe.labels(type, kind).inc();
  }

  // The schedules and groups whose series exist: a tick or a claim decided before a
  // schedule or a group's limits were removed, and counted after, would make them again.
  readonly #knownSchedules = new Set<string>();
  readonly #limitedGroups = new Set<string>();

  scheduleTick(schedule: string, outcome: (typeof SCHEDULE_TICK_OUTCOMES)[number]): void {
    if (!this.#knownSchedules.has(schedule)) return;
    this.#scheduleTicks.inc({ schedule, outcome });
  }

  /** A schedule exists: its tick counters start at 0 (they are labelled by its name, known only at run time). */
  scheduleKnown(schedule: string): void {
    this.#knownSchedules.add(schedule);
    for (const outcome of SCHEDULE_TICK_OUTCOMES) this.#scheduleTicks.inc({ schedule, outcome }, 0);
  }

  /** A schedule was removed: its series go with it. */
  scheduleGone(schedule: string): void {
    this.#knownSchedules.delete(schedule);
    for (const outcome of SCHEDULE_TICK_OUTCOMES) this.#scheduleTicks.remove({ schedule, outcome });
  }

  limited(type: string, limit: (typeof LIMIT_KINDS)[number]): void {
    this.#limited.labels(type, limit).inc();
  }

  groupLimited(group: string, limit: (typeof LIMIT_KINDS)[number]): void {
    if (!this.#limitedGroups.has(group)) return;
    this.#groupLimited.inc({ group, limit });
  }

  /** A group was given limits: its series start at 0 (groups are known only at run time). */
  groupKnown(group: string): void {
    this.#limitedGroups.add(group);
    for (const limit of LIMIT_KINDS) this.#groupLimited.inc({ group, limit }, 0);
  }

  /** A group's limits were removed: its series go with them. */
  groupGone(group: string): void {
    this.#limitedGroups.delete(group);
    for (const limit of LIMIT_KINDS) this.#groupLimited.remove({ group, limit });
  }

  callbackDelivery(outcome: 'delivered' | 'retry' | 'failed'): void {
    this.#callbacks.inc({ outcome });
  }

  outcomeRefused(reason: RefusalReason | 'unknown'): void {
    this.#refused.inc({ reason });
  }

  /** A worker thread ended and is replaced (kiln_thread_restarts_total). */
  threadEnded(reason: ThreadEndReason): void {
    this.#threadRestarts.inc({ reason });
  }

  /** A store commit took this long (kiln_store_commit_seconds). */
  storeCommitted(seconds: number): void {
    this.#commit.observe(seconds);
  }
}
