import { randomUUID } from 'node:crypto';
// undici's own fetch with its own Agent: Node's global fetch is undici too, but of the
// version bundled with each Node release, and a dispatcher from another major version of
// the package is not guaranteed to fit it (Node 22 bundles 6, Node 24 bundles 7).
import { Agent, fetch } from 'undici';
import type { Backoff, Job } from '../contract/job.js';
import type { Batch } from '../contract/batch.js';
import { batchCallbackBody } from '../store/core/batches.js';
import type { DeliveriesFacet, DeliveryAttempt, DueDelivery, EventsFacet, StoreLifecycle } from '../store/store.js';
import { FAULT_BACKOFF, FaultLog, type FaultLogger, silentLog } from '../fault-log.js';
import { guardedLookup, urlProblemBeforeLookup } from './address-guard.js';
import { retryDelayMs } from '../jobs/backoff.js';
import { settleWithin } from '../time/settle-within.js';
import { signatureHeader } from './signature.js';
import type { DeliverySpan, Tracing } from '../tracing/tracing.js';
import { storedHeaders } from '../tracing/trace-context.js';

/** What the service needs of the store: its deliveries, its events and its clock. */
type DeliveryStore = DeliveriesFacet & Pick<EventsFacet, 'subscribe'> & Pick<StoreLifecycle, 'now'>;

export type DeliveryOutcome = DeliveryAttempt['outcome'];

export interface CallbackDeliveryOptions {
  store: DeliveryStore;
  /** KILN_CALLBACK_SECRET: the HMAC key of Kiln-Signature. */
  secret: string;
  /** KILN_CALLBACK_TIMEOUT_MS: one attempt, connection to answer. */
  timeoutMs: number;
  /** KILN_CALLBACK_MAX_ATTEMPTS: attempts before a delivery is `failed`. */
  maxAttempts: number;
  /** KILN_CALLBACK_ALLOW_PRIVATE: connect to any address. */
  allowPrivate: boolean;
  /** The job as the API renders it: the body of a job's delivery. */
  render: (job: Job) => unknown;
  /** The batch as the API renders it, for the body of a batch's delivery (`{ event, batch }`). */
  renderBatch: (batch: Batch) => unknown;
  /** The wait before attempt n+1 (default DELIVERY_BACKOFF). */
  backoff?: Backoff;
  /** Attempts in flight at most (default 16). */
  concurrency?: number;
  /** An idle service looks for due deliveries at least this often (another server's, a lost wake-up). */
  pollMs?: number;
  /** Sent as User-Agent. */
  userAgent?: string;
  onOutcome?: (outcome: DeliveryOutcome) => void;
  /** Where failing claims and records are logged (default: nowhere). */
  log?: FaultLogger;
  /** A stop waits for this many attempts in flight, up to `graceMs`. */
  onDraining?: (inFlight: number, graceMs: number) => void;
  /** A CLIENT span per attempt, its traceparent sent to the receiver (src/tracing/); absent or null: off. */
  tracing?: Tracing | null;
  random?: () => number;
}

/** 1 s, 4 s, 16 s, … up to an hour between attempts: eight attempts span about an hour and a half. */
const DELIVERY_BACKOFF: Backoff = { initialMs: 1000, factor: 4, maxMs: 3_600_000, jitter: 'equal' };
const DEFAULT_CONCURRENCY = 16;
const DEFAULT_POLL_MS = 5000;
const MIN_WAIT_MS = 5;

/**
 * Delivers callbacks: POSTs each due delivery's job (or batch) to its URL, signed, and records the
 * attempt. It runs beside dispatch on the main thread and never on its path: one timer
 * for the next due delivery, woken early by the store's `deliveries` event; at most
 * `concurrency` requests in flight, each a non-blocking fetch with its own timeout.
 *
 * A delivery is leased while its attempt runs (twice the timeout, and some), so two
 * servers of a shared store never make the same attempt at once, and a server that dies
 * mid-attempt leaves it to whichever server looks after the lease runs out (on SQLite:
 * to the next start, which frees every lease). At least once: an attempt whose answer
 * was not recorded is made again.
 *
 * States of a delivery: pending (due at `next_at`; leased while an attempt runs) →
 * delivered (a 2xx came) | pending again (retry after backoff) | failed (the last attempt
 * failed). Life cycle: start() → stop(), both safe to call twice.
 */
export class CallbackDeliveryService {
  readonly #options: CallbackDeliveryOptions;
  readonly #store: DeliveryStore;
  readonly #owner = `callbacks:${randomUUID()}`;
  readonly #inFlight = new Set<Promise<void>>();
  readonly #abort = new AbortController();
  readonly #recordedListeners = new Set<(attempt: DeliveryAttempt) => void>();
  #agent: Agent | null = null;
  #unsubscribe: (() => void) | null = null;
  #timer: NodeJS.Timeout | null = null;
  #started = false;
  #stopped = false;
  #claiming = false;
  /** A wake-up came while a claim was on its way: claim again after it. */
  #again = false;
  /** More may be due than the last claim could take (it filled the room, or there was none): claim as attempts end. */
  #backlog = false;
  /** When the timer fires (ms, the store's clock). */
  #timerAt = Infinity;
  readonly #claimFault: FaultLog;
  readonly #recordFault: FaultLog;

  constructor(options: CallbackDeliveryOptions) {
    this.#options = options;
    this.#store = options.store;
    const log = options.log ?? silentLog;
    // A failed claim is tried again sooner at first, and never later than the poll would.
    this.#claimFault = new FaultLog(log, {
      what: 'claiming callback deliveries',
      level: 'warn',
      backoff: { ...FAULT_BACKOFF, maxMs: Math.max(FAULT_BACKOFF.initialMs, this.#pollMs) },
      ...(options.random === undefined ? {} : { random: options.random }),
    });
    this.#recordFault = new FaultLog(log, { what: 'recording callback attempts', level: 'warn' });
  }

  start(): void {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    // Connections go only to addresses the guard checked as they were resolved.
    this.#agent = new Agent(this.#options.allowPrivate ? {} : { connect: { lookup: guardedLookup } });
    this.#unsubscribe = this.#store.subscribe((event) => {
      if (event.kind === 'deliveries') this.wake();
    });
    this.wake();
  }

  /**
   * Stops looking for deliveries. Attempts in flight have up to `graceMs` to be answered
   * and recorded; then they are abandoned (their leases run out, and they are made again).
   */
  async stop(graceMs = 0): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#unsubscribe?.();
    this.#unsubscribe = null;
    this.#clearTimer();
    if (graceMs > 0 && this.#inFlight.size > 0) {
      this.#options.onDraining?.(this.#inFlight.size, graceMs);
      await settleWithin(Promise.allSettled([...this.#inFlight]), graceMs);
    }
    this.#abort.abort();
    await Promise.allSettled([...this.#inFlight]);
    await this.#agent?.destroy().catch(() => undefined);
    this.#agent = null;
  }

  /** Look for due deliveries now. */
  wake(): void {
    if (!this.#started || this.#stopped) return;
    this.#clearTimer();
    this.#pump();
  }

  /** Hear of every attempt once it is recorded; answers the function that stops it. */
  onRecorded(listener: (attempt: DeliveryAttempt) => void): () => void {
    this.#recordedListeners.add(listener);
    return () => this.#recordedListeners.delete(listener);
  }

  /** Attempts in flight now. */
  get inFlight(): number {
    return this.#inFlight.size;
  }

  get #leaseMs(): number {
    return 2 * this.#options.timeoutMs + 10_000;
  }

  #pump(): void {
    if (this.#stopped) return;
    if (this.#claiming) {
      this.#again = true;
      return;
    }
    const room = (this.#options.concurrency ?? DEFAULT_CONCURRENCY) - this.#inFlight.size;
    // A full house: each attempt that ends pumps again.
    if (room <= 0) {
      this.#backlog = true;
      return;
    }
    this.#claiming = true;
    this.#again = false;
    this.#store.claimDeliveries(this.#owner, this.#leaseMs, room).then(
      (due) => {
        this.#claiming = false;
        this.#claimFault.succeeded();
        // Claimed as the service stopped: left to their leases.
        if (this.#stopped) return;
        for (const delivery of due) this.#track(this.#attempt(delivery));
        this.#backlog = due.length === room;
        if (this.#backlog || this.#again) this.#pump();
        else void this.#arm();
      },
      (error: unknown) => {
        this.#claiming = false;
        this.#armIn(this.#claimFault.failed(error));
      },
    );
  }

  get #pollMs(): number {
    return this.#options.pollMs ?? DEFAULT_POLL_MS;
  }

  /** One timer: the next due delivery, or the poll, whichever comes first. */
  async #arm(): Promise<void> {
    let next: number | null = null;
    try {
      next = await this.#store.nextDeliveryAt();
    } catch {
      // The store is away: look again after a poll period.
    }
    if (this.#stopped || this.#claiming) return;
    // At least a few ms: a store whose clock this process only estimates (PostgreSQL) may
    // not yet see as due what the estimate does, and the claim would find nothing again.
    const delay =
      next === null ? this.#pollMs : Math.min(this.#pollMs, Math.max(MIN_WAIT_MS, next - this.#store.now()));
    // A timer set meanwhile for sooner (a retry recorded after this read began) stands.
    if (this.#timer !== null && this.#timerAt <= this.#store.now() + delay) return;
    this.#armIn(delay);
  }

  #armIn(delayMs: number): void {
    if (this.#stopped) return;
    this.#clearTimer();
    this.#timerAt = this.#store.now() + delayMs;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#timerAt = Infinity;
      this.#pump();
    }, delayMs);
    this.#timer.unref();
  }

  #clearTimer(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    this.#timerAt = Infinity;
  }

  /**
   * An attempt ended: its slot goes to the next due delivery if the last claim left some
   * behind; otherwise the timer (the next due delivery, or the poll) and wake-ups cover
   * what comes, and an ended attempt costs no claim.
   */
  #track(attempt: Promise<void>): void {
    this.#inFlight.add(attempt);
    void attempt.finally(() => {
      this.#inFlight.delete(attempt);
      if (this.#backlog) this.#pump();
    });
  }

  async #attempt(delivery: DueDelivery): Promise<void> {
    // The job went away with its deliveries: nothing to send (the fence refuses any record).
    const body = delivery.body ?? this.#firstBody(delivery);
    if (body === null) return;
    const { httpStatus, error } = await this.#post(delivery, body);
    // Cut off by the end of a stop's grace: not the receiver's answer, nothing to record.
    if (this.#abort.signal.aborted) return;
    const delivered = httpStatus !== null && httpStatus >= 200 && httpStatus < 300;
    const outcome: DeliveryOutcome = delivered
      ? 'delivered'
      : delivery.attempt >= this.#options.maxAttempts
        ? 'failed'
        : 'retry';
    const retryInMs =
      outcome === 'retry'
        ? retryDelayMs(this.#options.backoff ?? DELIVERY_BACKOFF, delivery.attempt, this.#options.random)
        : 0;
    try {
      const attempt: DeliveryAttempt = {
        id: delivery.id,
        attempt: delivery.attempt,
        owner: this.#owner,
        body,
        httpStatus,
        error,
        outcome,
        retryInMs,
      };
      const recorded = await this.#store.recordDeliveryAttempt(attempt);
      this.#recordFault.succeeded();
      if (!recorded) return;
      // Its retry is due before the timer would look: look then.
      if (outcome === 'retry' && !this.#claiming && this.#store.now() + retryInMs < this.#timerAt) {
        this.#armIn(Math.max(MIN_WAIT_MS, retryInMs));
      }
      this.#options.onOutcome?.(outcome);
      for (const listener of this.#recordedListeners) listener(attempt);
    } catch (failure) {
      // Not recorded: the lease runs out and the attempt is made again (at least once).
      this.#recordFault.failed(failure);
    }
  }

  /** The body of a first attempt: the job, or the batch with its event; null when it went away. */
  #firstBody(delivery: DueDelivery): string | null {
    if (delivery.batch !== null) return batchCallbackBody(this.#options.renderBatch(delivery.batch));
    return delivery.job === null ? null : JSON.stringify(this.#options.render(delivery.job));
  }

  /** POSTs the body; answers the receiver's status, or why there was none. */
  async #post(delivery: DueDelivery, body: string): Promise<{ httpStatus: number | null; error: string | null }> {
    const before = urlProblemBeforeLookup(delivery.url, this.#options.allowPrivate);
    if (before.problem !== null) return { httpStatus: null, error: `callback.url ${before.problem}` };
    const timestamp = Math.floor(Date.now() / 1000);
    const timeout = AbortSignal.timeout(this.#options.timeoutMs);
    // The receiver joins the job's (or batch's) trace: this attempt's span, or with tracing off the submission's context.
    const stored = delivery.batch?.trace ?? delivery.job?.trace ?? null;
    const span = this.#span(delivery, stored);
    const headers =
      span === null ? storedHeaders(stored) : { traceparent: span.traceparent, tracestate: span.tracestate };
    const answer = await this.#send(delivery, body, timestamp, timeout, headers);
    span?.end(answer.httpStatus, answer.error);
    return answer;
  }

  /** The attempt's CLIENT span, child of its job's (or batch's) trace; null while tracing is off. */
  #span(delivery: DueDelivery, stored: string | null): DeliverySpan | null {
    const tracing = this.#options.tracing;
    if (tracing == null) return null;
    // The path and the query are left out: a callback URL may carry a secret in either.
    const url = new URL(delivery.url);
    return tracing.delivery(stored, {
      'url.full': url.pathname === '/' && url.search === '' ? `${url.origin}/` : `${url.origin}/REDACTED`,
      'server.address': url.hostname,
      ...(url.port === '' ? {} : { 'server.port': Number(url.port) }),
      'kiln.callback.event': delivery.event === 'batch.finished' ? delivery.event : `job.${delivery.event}`,
      'kiln.callback.delivery': delivery.id,
      'kiln.callback.attempt': delivery.attempt,
      [delivery.batch === null ? 'messaging.message.id' : 'kiln.batch.id']: delivery.jobId,
    });
  }

  async #send(
    delivery: DueDelivery,
    body: string,
    timestamp: number,
    timeout: AbortSignal,
    trace: { traceparent: string; tracestate: string | null } | null,
  ): Promise<{ httpStatus: number | null; error: string | null }> {
    try {
      const response = await fetch(delivery.url, {
        method: 'POST',
        body,
        headers: {
          'content-type': 'application/json',
          'user-agent': this.#options.userAgent ?? 'kiln',
          'kiln-event': delivery.event === 'batch.finished' ? delivery.event : `job.${delivery.event}`,
          'kiln-delivery': delivery.id,
          'kiln-signature': signatureHeader(this.#options.secret, timestamp, body),
          ...(trace === null ? {} : { traceparent: trace.traceparent }),
          ...(trace?.tracestate == null ? {} : { tracestate: trace.tracestate }),
        },
        redirect: 'manual',
        signal: AbortSignal.any([timeout, this.#abort.signal]),
        ...(this.#agent === null ? {} : { dispatcher: this.#agent }),
      });
      // The answer's body is not read: let the connection go.
      await response.body?.cancel().catch(() => undefined);
      const status = response.status;
      if (status >= 200 && status < 300) return { httpStatus: status, error: null };
      if (status >= 300 && status < 400) {
        return { httpStatus: status, error: `the receiver answered ${status}, a redirect, which is not followed` };
      }
      return { httpStatus: status, error: `the receiver answered ${status}` };
    } catch (failure) {
      if (timeout.aborted) return { httpStatus: null, error: `no answer within ${this.#options.timeoutMs} ms` };
      const cause = (failure as { cause?: unknown }).cause;
      const message =
        cause instanceof Error ? cause.message : failure instanceof Error ? failure.message : String(failure);
      return { httpStatus: null, error: message };
    }
  }
}
