import type { AttemptOutcome, ClaimedJob, FinishItem, JobStore } from '../../store/store.js';
import type { AttemptResult } from '../../workers/protocol.js';
import type { Batch } from './batch.js';
import type { JobError } from '../../contract/job.js';
import type { KilnMetrics } from '../statistics/metrics.js';
import type { MicroBatching } from './micro-batch.js';
import { FaultLog, type FaultLogger } from '../../fault-log.js';
import { refusalReason } from './refused-outcome.js';
import { type AttemptEnd, decideAttempt } from './retry-policy.js';
import type { AttemptEnding } from '../../tracing/tracing.js';
import { readStoredTrace, traceLogFields } from '../../tracing/trace-context.js';

/** What deciding the outcomes of a batch reads and teaches. */
export interface OutcomeContext {
  store: JobStore;
  metrics: KilnMetrics;
  micro: MicroBatching;
  owner: string;
  random: () => number;
  /** Whether a task type runs each attempt on a fresh thread (never micro-batched). */
  isolated?: ((type: string) => boolean) | undefined;
  /** Snoozes a job may make (KILN_MAX_SNOOZES). */
  maxSnoozes: number;
}

/**
 * The outcomes of a batch its thread started, job by job (retry-policy.ts decides each),
 * with what they teach: each type's cost for micro-batching, the wait and run metrics.
 * `results` is null when the thread gave no answer (it died or was stopped), with
 * `failure` saying why; `started` is when the thread started the batch.
 */
export function batchOutcomes(
  batch: Batch,
  results: AttemptResult[] | null,
  failure: unknown,
  started: number,
  context: OutcomeContext,
): FinishItem[] {
  const { metrics, micro } = context;
  const now = context.store.now();
  const elapsedMs = Date.now() - started;
  const alone = batch.jobs.length === 1;
  for (const [index, job] of batch.jobs.entries()) {
    if (job.readyAt !== null) metrics.waited(job.type, Math.max(0, started - job.readyAt) / 1000);
    // An isolated type is never learned, so never tiny: each of its attempts needs a thread of its own.
    if (results !== null && context.isolated?.(job.type) !== true) {
      micro.learn(job.type, results[index]?.ms ?? elapsedMs / batch.jobs.length);
    }
    // A broken batch cannot say which job was at fault: each runs alone next.
    micro.setSolo(job.id, !alone && results === null && batch.abortReason !== 'shutdown');
  }
  const seconds = elapsedMs / 1000 / batch.jobs.length;
  const items: FinishItem[] = [];
  for (const [index, job] of batch.jobs.entries()) {
    const span = batch.spans?.[index];
    if (batch.dropped.has(job.id)) {
      metrics.attempt(job.type, 'error', seconds);
      span?.end({ kind: 'cancelled' }, started);
      continue;
    }
    // A handler that saw the abort (ctx.signal) and failed because of it, before its
    // thread was stopped, failed of the abort: the abort's reason decides.
    const answered = results?.[index];
    const result = answered !== undefined && (batch.abortReason === null || answered.ok) ? answered : undefined;
    let end: AttemptEnd;
    if (result !== undefined) end = { kind: 'answered', result };
    else if (batch.abortReason === 'timeout' || batch.abortReason === 'shutdown') {
      end = { kind: 'aborted', reason: batch.abortReason };
    } else end = { kind: 'crashed', cause: failure instanceof Error ? failure.message : String(failure) };
    const { outcome, metric } = decideAttempt(job, end, alone, now, context.random, context.maxSnoozes);
    metrics.attempt(job.type, metric, seconds);
    if (outcome.kind === 'snoozed') metrics.snoozed(job.type);
    span?.end(attemptEnding(outcome), started);
    items.push({ id: job.id, attempt: job.attempts, owner: context.owner, outcome, startedAt: started });
  }
  return items;
}

/** An attempt's outcome as its span tells it. */
function attemptEnding(outcome: AttemptOutcome): AttemptEnding {
  switch (outcome.kind) {
    case 'completed':
      return { kind: 'completed' };
    case 'failed':
      return {
        kind: 'failed',
        errorType: outcome.error.code,
        message: outcome.error.message,
        retryAt: outcome.retryAt,
      };
    case 'released':
      return { kind: 'released', errorType: outcome.error.code };
    case 'snoozed':
      return { kind: 'snoozed', runAt: outcome.runAt };
    case 'unstarted':
      return { kind: 'released', errorType: 'unstarted' };
  }
}

/** A claimed job given back before its thread started it: its attempt is not counted. */
export function givenBack(job: ClaimedJob, owner: string, now: number): FinishItem {
  const error: JobError = {
    code: 'interrupted',
    message: 'claimed, then given back before it started',
    attempt: job.attempts,
  };
  const outcome: AttemptOutcome = { kind: 'released', error, retryAt: now };
  return { id: job.id, attempt: job.attempts, owner, outcome };
}

export interface OutcomeWriterOptions {
  store: JobStore;
  metrics: KilnMetrics;
  /** Where the faults of writing and the refused outcomes are logged. */
  log: FaultLogger;
  random: () => number;
  /** Asks dispatch to claim again (an outcome written may have made work ready). */
  pump(): void;
}

/**
 * Writes outcomes. If the store cannot take them now (its thread is restarting, a
 * transaction was lost), they are kept, their leases kept alive, and written again,
 * with back-off, until the store takes them or refuses them (their lease is gone): an
 * attempt that ended is never run again only because the store was briefly down.
 */
export class OutcomeWriter {
  readonly #options: OutcomeWriterOptions;
  readonly #fault: FaultLog;
  /** Outcomes the store could not take yet, by job id. */
  readonly #unwritten = new Map<string, FinishItem>();
  #rewriteTimer: NodeJS.Timeout | null = null;
  /** Writes the rewrite timer started, which flush() waits for. */
  readonly #rewriting = new Set<Promise<void>>();
  /** flush() made its last try: no rewrite is scheduled after it. */
  #flushed = false;

  constructor(options: OutcomeWriterOptions) {
    this.#options = options;
    this.#fault = new FaultLog(options.log, { what: 'writing outcomes', random: options.random });
  }

  /** Outcomes waiting to be written again, by job id: their leases are kept alive meanwhile. */
  get unwritten(): ReadonlyMap<string, FinishItem> {
    return this.#unwritten;
  }

  async write(items: FinishItem[]): Promise<void> {
    let finished: Awaited<ReturnType<JobStore['finish']>>;
    try {
      finished = await this.#options.store.finish(items);
    } catch (error) {
      // After flush()'s last try (the store is closing) nothing is retried: like the
      // outcomes that try could not write, these stay running in the store, and the next
      // start, or another server's rescue, retries them as interrupted.
      if (this.#flushed) return;
      const waitMs = this.#fault.failed(error);
      for (const item of items) this.#unwritten.set(item.id, item);
      this.#rewriteTimer ??= setTimeout(() => {
        this.#rewriteTimer = null;
        const again = [...this.#unwritten.values()];
        this.#unwritten.clear();
        if (again.length === 0) return;
        const rewrite = this.write(again);
        this.#rewriting.add(rewrite);
        void rewrite.finally(() => this.#rewriting.delete(rewrite));
      }, waitMs);
      return;
    }
    this.#fault.succeeded();
    // A retry that is due at once, or dependents made ready, may be work for a free thread.
    if (finished.some((answer) => answer !== null && (answer.others > 0 || answer.status !== 'completed'))) {
      this.#options.pump();
    }
    const refused = items.filter((_, index) => finished[index] === null);
    if (refused.length > 0) void this.#reportRefused(refused);
  }

  /**
   * Writes the kept outcomes now, without waiting for the back-off (the store is back):
   * before this server claims or rescues anything. What the store still cannot take is
   * kept again.
   */
  async writeKept(): Promise<void> {
    while (this.#rewriting.size > 0) await Promise.allSettled([...this.#rewriting]);
    if (this.#unwritten.size === 0 || this.#flushed) return;
    if (this.#rewriteTimer !== null) clearTimeout(this.#rewriteTimer);
    this.#rewriteTimer = null;
    const again = [...this.#unwritten.values()];
    this.#unwritten.clear();
    const rewrite = this.write(again);
    this.#rewriting.add(rewrite);
    await rewrite.finally(() => this.#rewriting.delete(rewrite));
  }

  /**
   * At stop: outcomes still unwritten get one last try; if the store is still down they
   * stay running in the file and the next start retries them as interrupted.
   */
  async flush(): Promise<void> {
    // A rewrite under way may fail and keep its outcomes again: it ends first.
    while (this.#rewriting.size > 0) await Promise.allSettled([...this.#rewriting]);
    this.#flushed = true;
    if (this.#rewriteTimer !== null) clearTimeout(this.#rewriteTimer);
    this.#rewriteTimer = null;
    const unwritten = [...this.#unwritten.values()];
    this.#unwritten.clear();
    if (unwritten.length > 0) await this.#options.store.finish(unwritten).catch(() => undefined);
  }

  /**
   * An outcome the store's fence refused: the attempt was no longer this server's to end.
   * Rare by design (a cancel or a lost lease mid-attempt), so each is read back once to
   * say why, logged and counted.
   */
  async #reportRefused(items: FinishItem[]): Promise<void> {
    const jobs = await this.#options.store.getMany(items.map((item) => item.id)).catch(() => null);
    const byId = new Map((jobs ?? []).map((job) => [job.id, job]));
    for (const item of items) {
      const job = jobs === null ? undefined : (byId.get(item.id) ?? null);
      const reason = job === undefined ? 'unknown' : refusalReason(item.attempt, job);
      this.#options.metrics.outcomeRefused(reason);
      this.#options.log.warn(
        {
          job: item.id,
          attempt: item.attempt,
          outcome: item.outcome.kind,
          reason,
          status: job?.status ?? null,
          ...traceLogFields(readStoredTrace(job?.trace ?? null)),
        },
        `the outcome of attempt ${item.attempt} of job ${item.id} was refused (${reason}): the attempt was no longer this server's`,
      );
    }
  }
}
