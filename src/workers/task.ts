import type { Backoff, ParentResult } from '../contract/job.js';

/**
 * The task module contract (DESIGN.md, "Tasks"): a module whose default export is a
 * plain object of this shape. `schema` is any Standard Schema validator (zod 4,
 * valibot, arktype, ...); it validates the payload at submission.
 */
export interface TaskDefinition<P = unknown, R = unknown> {
  /** Unique; letters, digits, `.`, `_`, `-`. */
  name: string;
  description?: string;
  schema?: StandardSchemaV1<unknown, P>;
  defaults?: Partial<TaskDefaults>;
  /** At most this many running at once, per process. */
  concurrency?: number;
  /** Token bucket: at most `max` starts per `perMs`. */
  rateLimit?: { max: number; perMs: number };
  /**
   * Run each attempt on a thread that has run nothing before and is replaced after it
   * (default false): nothing another job left in the thread (globals, patched
   * prototypes, module state) reaches it, and nothing it leaves reaches another job.
   * Costs a thread start per attempt, and such attempts are never micro-batched.
   */
  isolate?: boolean;
  handler(payload: P, ctx: TaskContext): R | Promise<R>;
}

export interface TaskDefaults {
  priority: number;
  maxAttempts: number;
  timeoutMs: number;
  backoff: Backoff;
}

export interface TaskContext {
  jobId: string;
  /** 1-based. */
  attempt: number;
  /** Aborted on cancel or timeout, for handlers that await. */
  signal: AbortSignal;
  /** Report progress, 0..100; the latest report is stored on the job. */
  progress(percent: number, message?: string): void;
  /** The completed dependencies, in `dependsOn` order. */
  parents: ParentResult[];
  /**
   * `return ctx.snooze(ms)` (or throw it): the job cannot be worked on yet. The attempt ends
   * without counting against maxAttempts and the job is `scheduled` to run again in `ms`
   * (0 to 86,400,000); its `snoozes` grows by one. Past KILN_MAX_SNOOZES snoozes the job
   * fails instead (`snooze_limit`). Calling it alone does nothing: the handler must
   * return or throw what it answers.
   */
  snooze(ms: number): Snooze;
  /**
   * The W3C traceparent of this attempt (its CONSUMER span when Kiln exports traces; else
   * the one the job was submitted with), for the handler's own outgoing calls to join the
   * trace; null when the job has none.
   */
  traceparent: string | null;
  /** The W3C tracestate that goes with `traceparent`, or null. */
  tracestate: string | null;
}

/** What `ctx.snooze(ms)` answers, for the handler to return or throw. */
export interface Snooze {
  readonly snoozeMs: number;
}

/** Only adds types: `export default defineTask({ ... })`. */
export function defineTask<P, R>(task: TaskDefinition<P, R>): TaskDefinition<P, R> {
  return task;
}

/** An error a handler throws to fail the job at once, without further attempts. */
export class NonRetryableError extends Error {
  readonly retryable = false;
  constructor(message: string) {
    super(message);
    this.name = 'NonRetryableError';
  }
}

/** The Standard Schema v1 interface (standardschema.dev), which zod 4 implements. */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly '~standard': {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => StandardSchemaResult<Output> | Promise<StandardSchemaResult<Output>>;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
  };
}

export type StandardSchemaResult<Output> =
  { readonly value: Output; readonly issues?: undefined } | { readonly issues: ReadonlyArray<StandardSchemaIssue> };

export interface StandardSchemaIssue {
  readonly message: string;
  readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined;
}
