import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import { JOB_STATUSES, type JobStatus, PENDING_STATUSES } from '../jobs/model.js';
import type { QueueCounts } from '../store/store.js';

export type AttemptMetricOutcome = 'success' | 'error' | 'timeout' | 'crash';

export interface GaugeSource {
  counts(): Promise<QueueCounts>;
  capacity: number;
  threads: number;
  busyThreads(): number;
  /** Registered task types (each gets its series at 0) and the attempts of each this server runs. */
  taskTypes?: () => string[];
  runningByType?: () => Map<string, number>;
  /** Live servers sharing the store; absent for a store of one process. */
  liveNodes?: () => Promise<number>;
}

const RUN_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300];
const WAIT_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300, 3600];
const COMMIT_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5];
const GAUGE_STATUSES = JOB_STATUSES.filter((status) => status === 'running' || PENDING_STATUSES.includes(status));

/**
 * The Prometheus metrics of one Kiln instance, on a registry of its own (several
 * instances may share a process in tests). Counters are bumped by the scheduler;
 * gauges are read from the store and the pool when scraped.
 */
export class KilnMetrics {
  readonly registry = new Registry();
  readonly #submitted: Counter<'type'>;
  readonly #finished: Counter<'type' | 'status'>;
  readonly #attempts: Counter<'type' | 'outcome'>;
  readonly #rejected: Counter<'reason'>;
  readonly #wait: Histogram<'type'>;
  readonly #run: Histogram<'type' | 'outcome'>;
  readonly #commit: Histogram;
  readonly #limited: Counter<'type' | 'limit'>;
  readonly #dedupe: Counter<'type' | 'kind'>;

  constructor(source: GaugeSource) {
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
    this.#submitted = new Counter({
      name: 'kiln_jobs_submitted_total',
      help: 'Jobs accepted, by task type.',
      labelNames: ['type'],
      registers,
    });
    this.#finished = new Counter({
      name: 'kiln_jobs_finished_total',
      help: 'Jobs that reached a terminal status.',
      labelNames: ['type', 'status'],
      registers,
    });
    this.#attempts = new Counter({
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
    this.#wait = new Histogram({
      name: 'kiln_job_wait_seconds',
      help: 'Time from ready to started.',
      labelNames: ['type'],
      buckets: WAIT_BUCKETS,
      registers,
    });
    this.#run = new Histogram({
      name: 'kiln_job_run_seconds',
      help: 'Attempt run time, by outcome.',
      labelNames: ['type', 'outcome'],
      buckets: RUN_BUCKETS,
      registers,
    });
    this.#commit = new Histogram({
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
      help: 'Worker threads in the pool.',
      registers,
      collect() {
        this.set(source.threads);
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
    const { taskTypes, runningByType } = source;
    new Gauge({
      name: 'kiln_task_running',
      help: 'Attempts of each task type this server runs now.',
      labelNames: ['type'],
      registers,
      collect() {
        this.reset();
        const running = runningByType?.() ?? new Map<string, number>();
        for (const type of taskTypes?.() ?? []) this.set({ type }, running.get(type) ?? 0);
        for (const [type, n] of running) this.set({ type }, n);
      },
    });
    this.#limited = new Counter({
      name: 'kiln_task_limited_total',
      help: "Claims that passed a job over because its type's limit held it back.",
      labelNames: ['type', 'limit'],
      registers,
    });
    this.#dedupe = new Counter({
      name: 'kiln_dedupe_hits_total',
      help: 'Submissions answered by dedupe: a job of the same work not finished (inflight) or a reused result.',
      labelNames: ['type', 'kind'],
      registers,
    });
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
    this.#child(this.#submitted, type).inc(n);
  }

  finished(type: string, status: 'completed' | 'failed' | 'cancelled'): void {
    this.#child(this.#finished, type, status).inc();
  }

  attempt(type: string, outcome: AttemptMetricOutcome, seconds: number): void {
    this.#child(this.#attempts, type, outcome).inc();
    this.#child(this.#run, type, outcome).observe(seconds);
  }

  waited(type: string, seconds: number): void {
    this.#child(this.#wait, type).observe(seconds);
  }

  // Label lookups hash the label set on every call; these run several times per job,
  // so the bound children are kept (the label values are task types and fixed words).
  readonly #children = new Map<object, Map<string, unknown>>();

  #child<C>(metric: { labels(...values: string[]): C }, ...values: string[]): C {
    let byKey = this.#children.get(metric);
    if (byKey === undefined) {
      byKey = new Map();
      this.#children.set(metric, byKey);
    }
    const key = values.join('\u0000');
    let child = byKey.get(key) as C | undefined;
    if (child === undefined) {
      child = metric.labels(...values);
      byKey.set(key, child);
    }
    return child;
  }

  rejected(reason: 'queue_full' | 'shutting_down'): void {
    this.#rejected.inc({ reason });
  }

  dedupeHit(type: string, kind: 'inflight' | 'result'): void {
    this.#child(this.#dedupe, type, kind).inc();
  }

  limited(type: string, limit: 'concurrency' | 'rate'): void {
    this.#child(this.#limited, type, limit).inc();
  }

  /** A store commit took this long (kiln_store_commit_seconds). */
  storeCommitted(seconds: number): void {
    this.#commit.observe(seconds);
  }
}
