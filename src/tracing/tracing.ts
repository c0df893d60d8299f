import {
  type Attributes,
  type Context,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TimeInput,
  trace,
  type Tracer,
} from '@opentelemetry/api';
import { type ExportResult, ExportResultCode, TraceState } from '@opentelemetry/core';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  type ReadableSpan,
  type Sampler,
  type SpanExporter,
  TraceIdRatioBasedSampler,
} from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import type { TracingConfig } from './otel-config.js';
import { FaultLog, type FaultLogger } from '../fault-log.js';
import { readStoredTrace, storedTrace, type TraceParent } from './trace-context.js';

/**
 * Traces across the queue, by the OpenTelemetry messaging conventions
 * (opentelemetry.io/docs/specs/semconv/messaging/), `messaging.system` = `kiln`:
 *
 * - a PRODUCER span per submitted job (`send <type>`; in a request of several jobs, one
 *   `create <type>` each under one CLIENT `send` span), child of the request's
 *   `traceparent` if it had one; its context is stored with the job (`Job.trace`), so
 *   the job's attempts belong to the same trace on any server, after any restart;
 * - per attempt, an INTERNAL `wait <type>` span from when the job became ready (it was
 *   submitted, its dependencies completed, its retry or snooze came due) to its claim
 *   and a CONSUMER `process <type>` span (from the claim to the outcome), both children
 *   of the job's PRODUCER span, so every attempt of a job sits side by side under it;
 *   a failed attempt's span has status ERROR and `error.type`, and says when the retry
 *   comes (event `retry`); the handler sees the attempt span's traceparent;
 * - a CLIENT span per callback delivery, child of the job's (or batch's) PRODUCER span,
 *   whose traceparent the receiver gets;
 * - a schedule's tick starts a trace of its own: the job's PRODUCER span is its root.
 *
 * Spans go out in batches (the SDK's BatchSpanProcessor) over OTLP/HTTP. With tracing
 * off there is no Tracing object at all: the callers' `tracing === null` is the whole
 * cost, and a request's own traceparent is still stored and handed to the handler.
 */
export class Tracing {
  readonly #provider: BasicTracerProvider;
  readonly #tracer: Tracer;
  /** PRODUCER spans of schedule ticks not fired yet, by their job (a job dropped takes its span with it). */
  readonly #ticks = new WeakMap<TracedJob, Span>();

  constructor(config: TracingConfig, version: string, log: FaultLogger) {
    const options = { url: config.url, headers: config.headers, timeoutMillis: config.timeoutMs };
    const spanExporter = new FaultLoggingExporter(
      config.protocol === 'http/json' ? new JsonExporter(options) : new ProtobufExporter(options),
      new FaultLog(log, { what: `exporting spans to ${new URL(config.url).origin}`, level: 'warn' }),
    );
    this.#provider = new BasicTracerProvider({
      resource: resourceFromAttributes({
        ...config.resource,
        'service.name': config.serviceName,
        'service.version': version,
      }),
      sampler: samplerOf(config),
      spanProcessors: [
        new BatchSpanProcessor(spanExporter, {
          scheduledDelayMillis: config.batch.scheduledDelayMs,
          exportTimeoutMillis: config.batch.exportTimeoutMs,
          maxQueueSize: config.batch.maxQueueSize,
          maxExportBatchSize: Math.min(config.batch.maxExportBatchSize, config.batch.maxQueueSize),
        }),
      ],
    });
    this.#tracer = this.#provider.getTracer('kiln', version);
  }

  /**
   * The PRODUCER spans of a submission, started now: each job (and the batch) gets its
   * context in `trace`. End them with the store's answer.
   */
  submitting(jobs: TracedJob[], parent: TraceParent | null, batch: { id: string; trace?: string | null } | null) {
    const context = contextOf(parent);
    const several = jobs.length > 1 || batch !== null;
    const send = several
      ? this.#tracer.startSpan(
          'send',
          {
            kind: SpanKind.CLIENT,
            attributes: {
              ...messaging('send'),
              'messaging.batch.message_count': jobs.length,
              ...(batch === null ? {} : { 'kiln.batch.id': batch.id }),
            },
          },
          context,
        )
      : null;
    const under = send === null ? context : trace.setSpan(context, send);
    const spans = jobs.map((job) => {
      const span = this.#tracer.startSpan(
        several ? `create ${job.type}` : `send ${job.type}`,
        { kind: SpanKind.PRODUCER, attributes: { ...messaging(several ? 'create' : 'send'), ...jobAttributes(job) } },
        under,
      );
      job.trace = storedTrace(parentOf(span));
      return span;
    });
    if (batch !== null && send !== null) batch.trace = storedTrace(parentOf(send));
    return {
      /** The store's answer: each job created or answered by another (its id); or the refusal's code. */
      end(answers: { created: boolean; id: string }[] | null, errorType?: string): void {
        for (const [index, span] of spans.entries()) {
          const answer = answers?.[index];
          if (answer !== undefined && !answer.created) {
            span.setAttributes({ 'kiln.job.created': false, 'kiln.job.answered_by': answer.id });
          }
          if (answers === null) failed(span, errorType ?? 'refused');
          span.end();
        }
        if (send !== null) {
          if (answers === null) failed(send, errorType ?? 'refused');
          send.end();
        }
      },
    };
  }

  /**
   * A schedule's tick prepared a job: the PRODUCER span at the root of its trace, started
   * now and ended by `scheduleFired` once this server fired the tick. A tick another
   * server fired first is never ended, so never exported: the span is dropped with the job.
   */
  scheduled(job: TracedJob, schedule: string): void {
    const span = this.#tracer.startSpan(
      `send ${job.type}`,
      {
        kind: SpanKind.PRODUCER,
        root: true,
        attributes: { ...messaging('send'), ...jobAttributes(job), 'kiln.schedule': schedule },
      },
      ROOT_CONTEXT,
    );
    job.trace = storedTrace(parentOf(span));
    this.#ticks.set(job, span);
  }

  /** The tick of a job `scheduled` prepared was fired here: what inserting it answered (null: no job, an overlap). */
  scheduleFired(
    job: TracedJob,
    insert: { ok: true; outcomes: { created: boolean; job: { id: string } }[] } | { ok: false; reason: string } | null,
  ): void {
    const span = this.#ticks.get(job);
    if (span === undefined) return;
    this.#ticks.delete(job);
    if (insert === null) span.setAttribute('kiln.job.created', false);
    else if (!insert.ok) failed(span, insert.reason);
    else {
      const [answer] = insert.outcomes;
      if (answer !== undefined && !answer.created) {
        span.setAttributes({ 'kiln.job.created': false, 'kiln.job.answered_by': answer.job.id });
      }
    }
    span.end();
  }

  /**
   * An attempt handed to a thread at `claimedAt`: its `wait` span, ended now, and its
   * `process` span, ended by `end` with the outcome.
   */
  attempt(job: ClaimedForTrace, claimedAt: number): AttemptSpan {
    const stored = readStoredTrace(job.trace);
    const attributes: Attributes = {
      ...messaging('process'),
      ...jobAttributes(job),
      'kiln.attempt': job.attempts,
    };
    // The store's clock may run a little ahead of this process's (PostgreSQL's is the database's).
    const readyAt = job.readyAt === null ? null : Math.min(job.readyAt, claimedAt);
    if (readyAt !== null) attributes['kiln.wait_ms'] = claimedAt - readyAt;
    // A job stored without a context (submitted while tracing was off) has no PRODUCER span: its
    // attempt is the root, from when the job became ready, and its wait is inside it.
    const span = this.#tracer.startSpan(
      `process ${job.type}`,
      { kind: SpanKind.CONSUMER, startTime: stored === null ? (readyAt ?? claimedAt) : claimedAt, attributes },
      contextOf(stored),
    );
    if (readyAt !== null) {
      // Beside the attempt, under the job's PRODUCER span.
      const parent = stored === null ? trace.setSpan(ROOT_CONTEXT, span) : contextOf(stored);
      this.#tracer
        .startSpan(
          `wait ${job.type}`,
          {
            kind: SpanKind.INTERNAL,
            startTime: readyAt,
            attributes: {
              'messaging.system': 'kiln',
              'messaging.destination.name': job.type,
              'messaging.message.id': job.id,
              'kiln.attempt': job.attempts,
              ...(job.snoozes > 0 ? { 'kiln.snoozes': job.snoozes } : {}),
            },
          },
          parent,
        )
        .end(claimedAt);
    }
    return new AttemptSpan(span);
  }

  /** A callback delivery about to be POSTed: its CLIENT span, child of the job's or batch's context. */
  delivery(stored: string | null, attributes: Attributes): DeliverySpan {
    const span = this.#tracer.startSpan(
      'POST',
      { kind: SpanKind.CLIENT, attributes: { 'http.request.method': 'POST', ...attributes } },
      contextOf(readStoredTrace(stored)),
    );
    return new DeliverySpan(span);
  }

  /** Exports what is still buffered; after it, spans are dropped. Safe to call twice. */
  async shutdown(): Promise<void> {
    await this.#provider.shutdown();
  }

  /** Exports what is buffered now (tests and a graceful stop). */
  async flush(): Promise<void> {
    await this.#provider.forceFlush();
  }
}

/**
 * An exporter whose failures are logged as one fault (when it starts, changes and ends),
 * not once per batch of spans; the spans of a failed export are dropped, as the SDK does.
 */
class FaultLoggingExporter implements SpanExporter {
  readonly #inner: SpanExporter;
  readonly #fault: FaultLog;

  constructor(inner: SpanExporter, fault: FaultLog) {
    this.#inner = inner;
    this.#fault = fault;
  }

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.#inner.export(spans, (result) => {
      if (result.code === ExportResultCode.SUCCESS) this.#fault.succeeded();
      else this.#fault.failed(result.error ?? new Error('the collector refused the spans'));
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.#inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.#inner.forceFlush?.() ?? Promise.resolve();
  }
}

/** The fields of a job its spans are named and attributed by; `trace` is set by submitting(). */
export interface TracedJob {
  id: string;
  type: string;
  priority: number;
  group?: string | null;
  batch?: string | null;
  trace?: string | null;
}

/** What an attempt's spans read of the claimed job. */
export interface ClaimedForTrace extends TracedJob {
  attempts: number;
  snoozes: number;
  readyAt: number | null;
  trace: string | null;
}

/** How an attempt ended, as its span tells it. */
export type AttemptEnding =
  | { kind: 'completed' }
  | { kind: 'failed'; errorType: string; message: string; retryAt: number | null }
  | { kind: 'snoozed'; runAt: number }
  | { kind: 'released'; errorType: string }
  | { kind: 'cancelled' };

/** A span whose context is handed on: to a handler, or to a callback's receiver. */
class HandedOnSpan {
  protected readonly span: Span;

  constructor(span: Span) {
    this.span = span;
  }

  /** This span as the W3C traceparent header. */
  get traceparent(): string {
    return storedTrace({ ...parentOf(this.span), state: null });
  }

  /** Its tracestate header, or null. */
  get tracestate(): string | null {
    return this.span.spanContext().traceState?.serialize() || null;
  }
}

/** The CONSUMER span of one attempt; its context is the handler's. */
export class AttemptSpan extends HandedOnSpan {
  /** Ends the span with the attempt's outcome; `startedAt`: when its thread started it, if it did. */
  end(ending: AttemptEnding, startedAt: number | null, at: TimeInput = Date.now()): void {
    const span = this.span;
    if (startedAt !== null) span.addEvent('started', startedAt);
    switch (ending.kind) {
      case 'completed':
        span.setAttribute('kiln.outcome', 'completed');
        break;
      case 'failed':
        span.setAttributes({
          'kiln.outcome': ending.retryAt === null ? 'failed' : 'retrying',
          'error.type': ending.errorType,
        });
        if (ending.retryAt !== null) {
          span.addEvent('retry', { 'kiln.retry_at': new Date(ending.retryAt).toISOString() }, at);
        }
        span.setStatus({ code: SpanStatusCode.ERROR, message: ending.message });
        break;
      case 'snoozed':
        span.setAttribute('kiln.outcome', 'snoozed');
        span.addEvent('snooze', { 'kiln.run_at': new Date(ending.runAt).toISOString() }, at);
        break;
      case 'released':
        span.setAttributes({ 'kiln.outcome': 'released', 'kiln.release_reason': ending.errorType });
        break;
      case 'cancelled':
        span.setAttribute('kiln.outcome', 'cancelled');
        break;
    }
    span.end(at);
  }
}

/** The CLIENT span of one callback delivery attempt; its context is the receiver's. */
export class DeliverySpan extends HandedOnSpan {
  end(httpStatus: number | null, error: string | null): void {
    if (httpStatus !== null) this.span.setAttribute('http.response.status_code', httpStatus);
    if (error !== null) failed(this.span, httpStatus === null ? 'delivery_error' : String(httpStatus), error);
    this.span.end();
  }
}

function messaging(operation: 'send' | 'create' | 'process'): Attributes {
  return { 'messaging.system': 'kiln', 'messaging.operation.type': operation, 'messaging.operation.name': operation };
}

function jobAttributes(job: TracedJob): Attributes {
  const attributes: Attributes = {
    'messaging.destination.name': job.type,
    'messaging.message.id': job.id,
    'kiln.job.priority': job.priority,
  };
  if (job.group != null) attributes['kiln.job.group'] = job.group;
  if (job.batch != null) attributes['kiln.batch.id'] = job.batch;
  return attributes;
}

function failed(span: Span, errorType: string, message?: string): void {
  span.setAttribute('error.type', errorType);
  span.setStatus({ code: SpanStatusCode.ERROR, ...(message === undefined ? {} : { message }) });
}

/** A span's own context, as a job stores it. */
function parentOf(span: Span): TraceParent {
  const context = span.spanContext();
  return {
    traceId: context.traceId,
    spanId: context.spanId,
    flags: context.traceFlags,
    state: context.traceState?.serialize() || null,
  };
}

/** The context spans are started in: the remote parent, or none (a new trace). */
function contextOf(parent: TraceParent | null): Context {
  if (parent === null) return ROOT_CONTEXT;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId: parent.traceId,
    spanId: parent.spanId,
    traceFlags: parent.flags,
    isRemote: true,
    ...(parent.state === null ? {} : { traceState: new TraceState(parent.state) }),
  });
}

function samplerOf(config: TracingConfig): Sampler {
  const ratio = new TraceIdRatioBasedSampler(config.ratio);
  switch (config.sampler) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return ratio;
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio });
  }
}
