import { createHash } from 'node:crypto';
import type { Backoff, Callback, Job, NewJob } from '../contract/job.js';
import type { BatchCallback, NewBatch } from '../contract/batch.js';
import type { Dispatcher } from './dispatch/dispatcher.js';
import type { InsertOutcome, InsertResult, JobStore } from '../store/store.js';
import type { KilnMetrics } from './statistics/metrics.js';
import { RateWindow } from './statistics/rate-window.js';
import { canonicalJson } from '../store/core/canonical-json.js';
import { newJobId } from '../jobs/ids.js';
import { type FieldIssue, KilnError, unavailable, validationError } from './errors.js';
import { type TaskRegistry, validatePayload } from '../workers/registry.js';
import type { Tracing } from '../tracing/tracing.js';
import { storedTrace, type TraceParent } from '../tracing/trace-context.js';

/** The dedupe key of a job without an explicit one: SHA-256 of its type and canonical payload. */
export function dedupeKeyOf(type: string, payload: unknown): string {
  return createHash('sha256').update(type).update('\u0000').update(canonicalJson(payload)).digest('hex');
}

/** One job as a client asked for it, envelope already validated. */
export interface SubmitItem {
  type: string;
  payload?: unknown;
  priority?: number;
  maxAttempts?: number;
  timeoutMs?: number;
  backoff?: Backoff;
  /** Epoch ms. */
  runAt?: number;
  delayMs?: number;
  idempotencyKey?: string;
  /** Job ids, or `ref:<name>` naming an earlier item of the same batch. */
  dependsOn?: string[];
  metadata?: Record<string, unknown>;
  group?: string;
  ref?: string;
  /** Dedupe (`dedupe: true` is `{}`): the key defaults to a hash of the type and payload. */
  dedupe?: { key?: string; reuseMs?: number };
  /** The schedule that makes the job (set by the schedule runner, never by a request). */
  schedule?: string;
  callback?: Callback;
}

export interface Submitted {
  created: boolean;
  job: Job;
  /** Answered by dedupe: a job of the same work not finished, or a result reused. */
  dedupe?: 'inflight' | 'result';
}

/** The address guard of callback URLs. */
export interface CallbackUrlCheck {
  /** Why a callback URL is refused, or null. */
  urlProblem(url: string): Promise<string | null>;
}

export interface SubmissionOptions {
  store: JobStore;
  registry: TaskRegistry;
  metrics: KilnMetrics;
  dispatcher: Dispatcher;
  /** Absent: a `callback` is refused (400 callbacks_disabled). */
  callbacks?: CallbackUrlCheck | undefined;
  /** Whether the server drains (submissions are refused then). */
  draining(): boolean;
  /** Spans of submissions (src/tracing/); null: tracing is off. */
  tracing: Tracing | null;
}

/**
 * Admission of jobs, all or nothing: validation and defaults (prepare), the refusals a
 * client gets (draining, a full queue, a reused idempotency key, an unknown dependency),
 * and dispatch told of the jobs the store took.
 */
export class Submission {
  readonly #options: SubmissionOptions;
  /** Terminal jobs per second over the last seconds, for Retry-After hints. */
  readonly #finishRate = new RateWindow(10);

  constructor(options: SubmissionOptions) {
    this.#options = options;
  }

  /**
   * Validate, apply defaults and admit jobs, all or nothing. In a batch, issue
   * paths start `jobs.<index>.`; a single submission's start at the field.
   */
  async submit(items: SubmitItem[], options: { batch: boolean; trace?: TraceParent | null }): Promise<Submitted[]> {
    this.refuseWhileDraining();
    const newJobs = await this.prepare(items, options);
    return this.#insert(newJobs, options.batch, options.trace ?? null);
  }

  /**
   * A batch request: its jobs as `submit` makes them, in a new batch whose row the store
   * writes with them. Items answered by an existing job keep that job's batch.
   */
  async submitBatch(
    items: SubmitItem[],
    callback: BatchCallback | null = null,
    trace: TraceParent | null = null,
  ): Promise<{ batch: string; submitted: Submitted[] }> {
    this.refuseWhileDraining();
    const urlProblem = callback === null ? null : this.#batchCallbackProblem(callback.url);
    const newJobs = await this.prepare(items, { batch: true });
    const problem = await urlProblem;
    if (problem !== null) throw validationError([{ path: 'callback.url', message: problem }]);
    const createdAt = newJobs[0]?.createdAt ?? this.#options.store.now();
    const batch: NewBatch = { id: newJobId(createdAt), createdAt, callback };
    for (const job of newJobs) job.batch = batch.id;
    return { batch: batch.id, submitted: await this.#insert(newJobs, true, trace, batch) };
  }

  /** Why a batch's callback URL is refused, or null; refused whole when callbacks are disabled. */
  #batchCallbackProblem(url: string): Promise<string | null> {
    const callbacks = this.#options.callbacks;
    if (callbacks === undefined) {
      const issue = {
        path: 'callback',
        message: 'callbacks are disabled on this server (KILN_CALLBACK_SECRET is not set)',
      };
      throw new KilnError('callbacks_disabled', `${issue.path}: ${issue.message}`, { issues: [issue] });
    }
    // Awaited after the items are checked: a refusal of an item must not leave it unheard.
    const problem = callbacks.urlProblem(url);
    problem.catch(() => undefined);
    return problem;
  }

  /**
   * The store takes the jobs, each with its trace context: its PRODUCER span's when
   * tracing is on, else the request's own (a handler's calls still join that trace).
   */
  async #insert(
    newJobs: NewJob[],
    isBatch: boolean,
    trace: TraceParent | null,
    batch?: NewBatch,
  ): Promise<Submitted[]> {
    const tracing = this.#options.tracing;
    const spans = tracing === null ? null : tracing.submitting(newJobs, trace, batch ?? null);
    if (spans === null && trace !== null) {
      const stored = storedTrace(trace);
      for (const job of newJobs) job.trace = stored;
      if (batch !== undefined) batch.trace = stored;
    }
    let inserted: InsertResult;
    try {
      inserted = await this.#options.store.insert(newJobs, batch).catch(unavailable);
    } catch (error) {
      spans?.end(null, error instanceof KilnError ? error.code : 'internal_error');
      throw error;
    }
    if (!inserted.ok) {
      spans?.end(null, inserted.reason);
      throw this.refusal(inserted, newJobs.length, isBatch);
    }
    spans?.end(inserted.outcomes.map((outcome) => ({ created: outcome.created, id: outcome.job.id })));
    this.admitted(inserted.outcomes);
    return inserted.outcomes;
  }

  refuseWhileDraining(): void {
    if (!this.#options.draining()) return;
    this.#options.metrics.rejected('shutting_down');
    throw new KilnError('shutting_down', 'the server is shutting down; submit again shortly', {
      retryAfterSeconds: 5,
    });
  }

  /**
   * Validate items (task type, payload by the task's schema, refs, dependencies) and apply
   * defaults: the jobs to insert, or a KilnError that names every bad field. In a batch,
   * issue paths start `jobs.<index>.`; otherwise at the field.
   */
  async prepare(items: SubmitItem[], options: { batch: boolean; path?: string }): Promise<NewJob[]> {
    const now = this.#options.store.now();
    const prefix = (index: number) => (options.batch ? `jobs.${index}.` : (options.path ?? ''));
    const withCallback = items.findIndex((item) => item.callback !== undefined);
    if (withCallback >= 0 && this.#options.callbacks === undefined) {
      const issue = {
        path: `${prefix(withCallback)}callback`,
        message: 'callbacks are disabled on this server (KILN_CALLBACK_SECRET is not set)',
      };
      throw new KilnError('callbacks_disabled', `${issue.path}: ${issue.message}`, { issues: [issue] });
    }
    // Each callback URL is checked once per request, all at the same time (the guard may resolve names).
    const urlProblems = new Map<string, Promise<string | null>>();
    for (const item of items) {
      const url = item.callback?.url;
      if (url !== undefined && this.#options.callbacks !== undefined && !urlProblems.has(url)) {
        urlProblems.set(url, this.#options.callbacks.urlProblem(url));
      }
    }
    const issues: FieldIssue[] = [];
    const refs = new Map<string, string>();
    const keys = new Set<string>();
    const newJobs: NewJob[] = [];
    let unknownType: string | null = null;

    for (const [index, item] of items.entries()) {
      const task = this.#options.registry.get(item.type);
      const id = newJobId(now);
      if (item.ref !== undefined) {
        if (refs.has(item.ref))
          issues.push({ path: `${prefix(index)}ref`, message: `ref "${item.ref}" is used twice` });
        refs.set(item.ref, id);
      }
      if (item.idempotencyKey !== undefined) {
        if (keys.has(item.idempotencyKey)) {
          issues.push({ path: `${prefix(index)}idempotencyKey`, message: 'the same key is used twice in one batch' });
        }
        keys.add(item.idempotencyKey);
      }
      const dependsOn: string[] = [];
      for (const [position, dependency] of (item.dependsOn ?? []).entries()) {
        let resolved = dependency;
        if (dependency.startsWith('ref:')) {
          const target = refs.get(dependency.slice(4));
          if (target === undefined || target === id) {
            issues.push({
              path: `${prefix(index)}dependsOn.${position}`,
              message: `${dependency} must name the ref of an earlier job in the same batch`,
            });
            continue;
          }
          resolved = target;
        }
        if (dependsOn.includes(resolved)) {
          issues.push({ path: `${prefix(index)}dependsOn.${position}`, message: `${dependency} is listed twice` });
          continue;
        }
        dependsOn.push(resolved);
      }
      if (item.runAt !== undefined && item.delayMs !== undefined) {
        issues.push({ path: `${prefix(index)}runAt`, message: 'give at most one of runAt and delayMs' });
      }
      if (item.callback !== undefined) {
        const problem = await urlProblems.get(item.callback.url);
        if (problem != null) issues.push({ path: `${prefix(index)}callback.url`, message: problem });
      }
      if (task === undefined) {
        unknownType ??= `${prefix(index)}type`;
        issues.push({ path: `${prefix(index)}type`, message: `no task is registered as "${item.type}"` });
        continue;
      }
      const checked = await validatePayload(task, item.payload ?? {});
      if (!checked.ok) {
        for (const issue of checked.issues) {
          issues.push({
            path: `${prefix(index)}payload${issue.path === '' ? '' : `.${issue.path}`}`,
            message: issue.message,
          });
        }
        continue;
      }
      const runAt = item.runAt ?? (item.delayMs !== undefined && item.delayMs > 0 ? now + item.delayMs : null);
      newJobs.push({
        id,
        type: task.name,
        priority: item.priority ?? task.defaults.priority,
        payload: checked.value,
        maxAttempts: item.maxAttempts ?? task.defaults.maxAttempts,
        timeoutMs: item.timeoutMs ?? task.defaults.timeoutMs,
        backoff: item.backoff ?? task.defaults.backoff,
        idempotencyKey: item.idempotencyKey ?? null,
        dependsOn,
        metadata: item.metadata ?? {},
        group: item.group ?? null,
        runAt: runAt !== null && runAt > now ? runAt : null,
        createdAt: now,
        callback: item.callback ?? null,
        ...(item.dedupe === undefined
          ? {}
          : {
              dedupeKey: item.dedupe.key ?? dedupeKeyOf(task.name, checked.value),
              reuseMs: item.dedupe.reuseMs ?? null,
            }),
        ...(item.schedule === undefined ? {} : { schedule: item.schedule }),
      });
    }

    if (issues.length > 0) {
      if (unknownType !== null && issues.every((issue) => issue.path.endsWith('type'))) {
        throw new KilnError('unknown_task_type', issues.map((issue) => `${issue.path}: ${issue.message}`).join('; '), {
          issues,
        });
      }
      throw validationError(issues);
    }
    return newJobs;
  }

  /** The job a schedule's stored request makes (validated, defaults applied; `dedupe: true` is `{}`). */
  async prepareScheduled(
    request: Record<string, unknown>,
    schedule: string,
    idempotencyKey: string | null,
  ): Promise<NewJob> {
    const { dedupe, ...fields } = request as Omit<SubmitItem, 'dedupe'> & { dedupe?: true | SubmitItem['dedupe'] };
    const item: SubmitItem = {
      ...fields,
      schedule,
      ...(dedupe === undefined ? {} : { dedupe: dedupe === true ? {} : dedupe }),
      ...(idempotencyKey === null ? {} : { idempotencyKey }),
    };
    const [job] = (await this.prepare([item], { batch: false, path: 'job.' })) as [NewJob];
    this.#options.tracing?.scheduled(job, schedule);
    return job;
  }

  /** A schedule's tick this server fired: its job's PRODUCER span ends with what the insert answered. */
  scheduleFired(job: NewJob, insert: InsertResult | null): void {
    this.#options.tracing?.scheduleFired(job, insert);
  }

  /** The error a client gets for an insert the store refused. */
  refusal(inserted: Extract<InsertResult, { ok: false }>, count: number, batch: boolean): KilnError {
    const prefix = (index: number) => (batch ? `jobs.${index}.` : '');
    switch (inserted.reason) {
      case 'queue_full':
        this.#options.metrics.rejected('queue_full');
        return new KilnError(
          'queue_full',
          `the queue holds ${inserted.pending} pending jobs of ${inserted.capacity}; ${count} more do not fit`,
          { retryAfterSeconds: this.#retryAfterSeconds(inserted.pending + count - inserted.capacity) },
        );
      case 'idempotency_conflict':
        return new KilnError(
          'idempotency_conflict',
          `${prefix(inserted.index)}idempotencyKey was used before (job ${inserted.existingId}) with a different type or payload`,
        );
      case 'unknown_dependency':
        return new KilnError(
          'unknown_dependency',
          `${prefix(inserted.index)}dependsOn: no job has the id ${JSON.stringify(inserted.dependency)}`,
          { issues: [{ path: `${prefix(inserted.index)}dependsOn`, message: `no job ${inserted.dependency}` }] },
        );
    }
  }

  /** Jobs the store took: counted, and dispatch told of the best of them. */
  admitted(outcomes: InsertOutcome[]): void {
    const metrics = this.#options.metrics;
    let best = -1;
    for (const outcome of outcomes) {
      if (outcome.dedupe !== undefined) metrics.dedupeHit(outcome.job.type, outcome.dedupe);
      if (!outcome.created) continue;
      metrics.submitted(outcome.job.type);
      if (outcome.job.status === 'queued' && outcome.job.priority > best) best = outcome.job.priority;
    }
    // Better work than the claimed messages no thread has started takes their place.
    if (best >= 0) this.#options.dispatcher.preempt(best);
    this.#options.dispatcher.pump();
  }

  /** A job reached a terminal status by this server's hand: counted for Retry-After hints. */
  finished(): void {
    this.#finishRate.add(Date.now());
  }

  /** A hint for 429 answers: how long the recent completion rate needs to make room. */
  #retryAfterSeconds(excess: number): number {
    const perSecond = this.#finishRate.perSecond(Date.now());
    if (perSecond <= 0) return 1;
    return Math.min(60, Math.max(1, Math.ceil(excess / perSecond)));
  }
}
