// The schemas run in the server (Buffer below); the client and the dashboard read only their types.
/// <reference types="node" />
import { z } from 'zod';
import { CALLBACK_EVENTS, JITTER_MODES, JOB_ERROR_CODES, JOB_STATUSES, MAX_PRIORITY, MIN_PRIORITY } from './job.js';
import { SCOPES } from './scopes.js';
import { BATCH_CALLBACK_EVENTS } from './batch.js';
import { PROBLEM_CODES, type ProblemCode } from './problem-codes.js';
import { STATS_BUCKET_MS, STATS_MAX_WINDOW_SECONDS, STATS_MIN_WINDOW_SECONDS } from './stats.js';

/**
 * The HTTP contract as zod schemas (API.md). They validate requests and generate
 * the OpenAPI document; request objects are strict, so unknown fields are refused.
 */

const MAX_METADATA_BYTES = 4096;
// Ids are at most 64 characters; a longer one is accepted here and simply names no job (404).
const JOB_ID = /^[A-Za-z0-9_-]{1,200}$/;

export const jobIdSchema = z.string().regex(JOB_ID, 'must be a job id (letters, digits, - and _)');

const backoffSchema = z
  .object({
    initialMs: z.int().min(0).max(86_400_000),
    factor: z.number().min(1).max(100),
    maxMs: z.int().min(0).max(86_400_000),
    jitter: z.enum(JITTER_MODES),
  })
  .strict()
  .refine((b) => b.maxMs >= b.initialMs, { message: 'maxMs must be at least initialMs', path: ['maxMs'] });

const metadataSchema = z
  .record(z.string(), z.unknown())
  .refine((value) => Buffer.byteLength(JSON.stringify(value)) <= MAX_METADATA_BYTES, {
    message: `must be at most ${MAX_METADATA_BYTES} bytes serialized`,
  });

export const groupSchema = z.string().regex(/^[A-Za-z0-9._:-]{1,128}$/, 'must be 1–128 letters, digits, ., _, : or -');
const MAX_CALLBACK_URL_CHARS = 2048;

const callbackSchema = z
  .object({
    url: z
      .string()
      .min(1)
      .max(MAX_CALLBACK_URL_CHARS)
      .refine((raw) => URL.canParse(raw), { message: 'must be an absolute http: or https: URL' })
      .describe('http: or https:; a host that is or resolves to a private address is refused.'),
    events: z
      .array(z.enum(CALLBACK_EVENTS))
      .min(1)
      .max(CALLBACK_EVENTS.length)
      .refine((events) => new Set(events).size === events.length, { message: 'lists an event twice' })
      .optional()
      .describe('Default: all three.'),
  })
  .strict();

const jobFields = {
  type: z.string().min(1).max(100).describe('A registered task name.'),
  payload: z.unknown().optional().describe("Validated by the task's schema; default {}."),
  priority: z.int().min(MIN_PRIORITY).max(MAX_PRIORITY).optional().describe('0–9, higher runs first.'),
  maxAttempts: z.int().min(1).max(100).optional(),
  timeoutMs: z.int().min(1).max(86_400_000).optional().describe('Per attempt; on expiry the thread is terminated.'),
  backoff: backoffSchema.optional(),
  runAt: z.iso.datetime({ offset: true }).optional().describe('Not before this time (RFC 3339).'),
  delayMs: z
    .int()
    .min(0)
    .max(365 * 86_400_000)
    .optional(),
  idempotencyKey: z.string().min(1).max(255).optional(),
  dependsOn: z.array(z.string().min(1).max(100)).max(100).optional(),
  metadata: metadataSchema.optional(),
  group: groupSchema
    .optional()
    .describe(
      'Who the job is for (a tenant, a customer). Ready jobs of one priority are taken round-robin across groups, FIFO inside a group; jobs without a group form one group of their own.',
    ),
  dedupe: z
    .union([
      z.literal(true),
      z
        .object({
          key: z.string().min(1).max(255).optional(),
          reuseMs: z.int().min(0).max(2_592_000_000).optional(),
        })
        .strict(),
    ])
    .optional()
    .describe(
      'Coalesce identical work: a job of the same key that is not finished (or, with reuseMs, completed that recently) is answered instead of a new one. The key is `key`, else the SHA-256 of the type and the canonical JSON of the validated payload.',
    ),
  callback: callbackSchema
    .optional()
    .describe('A signed POST of the job to `url` when it reaches one of `events` (needs KILN_CALLBACK_SECRET).'),
};

// Examples are what /docs fills in: each must succeed when sent as is (a test sends them).
export const jobRequestSchema = z
  .object(jobFields)
  .strict()
  .meta({ examples: [{ type: 'hash.sha256', payload: { data: 'hello' }, priority: 5 }] });
export type JobRequest = z.infer<typeof jobRequestSchema>;

export const batchItemSchema = z
  .object({
    ...jobFields,
    ref: z
      .string()
      .regex(/^[A-Za-z0-9._-]{1,100}$/, 'must be 1–100 letters, digits, ., _ or -')
      .optional(),
  })
  .strict();
export type BatchItem = z.infer<typeof batchItemSchema>;

const batchCallbackSchema = z
  .object({
    url: callbackSchema.shape.url,
    events: z
      .array(z.enum(BATCH_CALLBACK_EVENTS))
      .min(1)
      .max(BATCH_CALLBACK_EVENTS.length)
      .refine((events) => new Set(events).size === events.length, { message: 'lists an event twice' })
      .optional()
      .describe('Default and only value: ["batch.finished"].'),
  })
  .strict();

export const batchRequestSchema = z
  .object({
    jobs: z.array(batchItemSchema).min(1).max(1000),
    callback: batchCallbackSchema
      .optional()
      .describe(
        'A signed POST of `{ "event": "batch.finished", "batch": <batch> }` to `url` once every job the request created is terminal, exactly once (needs KILN_CALLBACK_SECRET).',
      ),
  })
  .strict()
  .meta({
    examples: [
      {
        jobs: [
          { ref: 'a', type: 'compress.gzip', payload: { data: 'hello hello hello' } },
          { type: 'noop', payload: { echo: 'compressed' }, dependsOn: ['ref:a'] },
        ],
      },
    ],
  });

/** The W3C trace context of a submission (API.md "Traces"): one that is not valid is ignored, never refused. */
const traceHeaders = {
  traceparent: z.string().optional().describe('W3C traceparent: the jobs continue this trace (API.md "Traces")'),
  tracestate: z.string().optional().describe('W3C tracestate, kept with the traceparent'),
};

export const traceHeadersSchema = z.object(traceHeaders).passthrough();

export const idempotencyHeaderSchema = z
  .object({ 'idempotency-key': z.string().min(1).max(255).optional(), ...traceHeaders })
  .passthrough();

export const jobParamsSchema = z.object({ id: jobIdSchema }).strict();

export const waitQuerySchema = z
  .object({ wait: z.coerce.number().min(0).max(60).optional().describe('Seconds to hold the request (0–60).') })
  .strict();

export const listQuerySchema = z
  .object({
    status: z
      .string()
      .optional()
      .transform((raw, ctx) => {
        if (raw === undefined || raw === '') return undefined;
        const statuses = raw.split(',').map((s) => s.trim());
        for (const status of statuses) {
          if (!(JOB_STATUSES as readonly string[]).includes(status)) {
            ctx.addIssue({ code: 'custom', message: `unknown status "${status}"; one of ${JOB_STATUSES.join(', ')}` });
            return z.NEVER;
          }
        }
        return statuses as (typeof JOB_STATUSES)[number][];
      })
      .describe('Comma-separated statuses.'),
    type: z.string().min(1).max(100).optional(),
    group: groupSchema.optional(),
    schedule: z.string().min(1).max(128).optional().describe('Jobs made by the schedule of this name.'),
    batch: jobIdSchema.optional().describe('Jobs created in the batch of this id.'),
    limit: z.coerce.number().int().min(1).max(500).default(50),
    cursor: z.string().min(1).max(200).optional(),
  })
  .strict();

// ── responses (documentation; the serializer writes plain JSON) ─────────────

type StatusCounts = Record<(typeof JOB_STATUSES)[number], z.ZodInt>;

const jobErrorSchema = z.object({ code: z.enum(JOB_ERROR_CODES), message: z.string(), attempt: z.int() });
const progressSchema = z.object({ percent: z.number(), message: z.string().nullable() });
export const isoTime = z.iso.datetime().describe('RFC 3339, UTC');

export const jobSchema = z
  .object({
    id: z.string(),
    type: z.string(),
    status: z.enum(JOB_STATUSES),
    priority: z.int(),
    payload: z.unknown(),
    result: z.unknown(),
    error: jobErrorSchema.nullable(),
    attempts: z.int(),
    maxAttempts: z.int(),
    snoozes: z
      .int()
      .min(0)
      .describe(
        'How many times a handler snoozed the job (`ctx.snooze`); snoozed attempts are not counted in `attempts`.',
      ),
    interruptions: z
      .int()
      .min(0)
      .describe(
        'How many times an attempt of the job was rescued because its server died or stopped answering (counted or given back); at KILN_MAX_INTERRUPTIONS the job fails with `too_many_interruptions`.',
      ),
    timeoutMs: z.int(),
    backoff: z.object({
      initialMs: z.number(),
      factor: z.number(),
      maxMs: z.number(),
      jitter: z.enum(JITTER_MODES),
    }),
    progress: progressSchema.nullable(),
    idempotencyKey: z.string().nullable(),
    dependsOn: z.array(z.string()),
    metadata: z.record(z.string(), z.unknown()),
    group: z.string().nullable(),
    schedule: z.string().nullable().describe('The name of the schedule that created the job, else null.'),
    callback: z.object({ url: z.string(), events: z.array(z.enum(CALLBACK_EVENTS)).optional() }).nullable(),
    batch: z.string().nullable().describe('The batch the job was created in (POST /v1/jobs/batch), else null.'),
    runAt: isoTime.nullable(),
    createdAt: isoTime,
    startedAt: isoTime.nullable(),
    finishedAt: isoTime.nullable(),
  })
  .meta({ id: 'Job' });

export const jobSummarySchema = jobSchema.omit({ payload: true, result: true }).meta({ id: 'JobSummary' });

export const jobListSchema = z.object({ jobs: z.array(jobSummarySchema), nextCursor: z.string().nullable() });
export const jobBatchResponseSchema = z.object({
  batch: z.string().describe('The batch of the jobs this request created: GET /v1/batches/{id}.'),
  jobs: z.array(jobSchema),
});

export const batchParamsSchema = z.object({ id: jobIdSchema.describe('A batch id.') }).strict();

export const batchSchema = z
  .object({
    id: z.string(),
    total: z.int().describe('The jobs the request created (items answered by an existing job are not counted).'),
    counts: z
      .object(Object.fromEntries(JOB_STATUSES.map((status) => [status, z.int()])) as StatusCounts)
      .describe("The batch's jobs by status, every status listed; a removed job is no longer counted."),
    createdAt: isoTime,
    finishedAt: isoTime.nullable().describe('When the last of its jobs became terminal; null while one is not.'),
    callback: z
      .object({ url: z.string(), events: z.array(z.enum(BATCH_CALLBACK_EVENTS)).optional() })
      .nullable()
      .describe('The callback of the request as it was given, else null.'),
  })
  .meta({ id: 'Batch' });

export const deliveriesSchema = z.object({
  deliveries: z.array(
    z.object({
      id: z.string().describe('Kiln-Delivery: the same for every attempt of one delivery.'),
      event: z.enum(['job.completed', 'job.failed', 'job.cancelled']),
      attempt: z.int().describe('1-based.'),
      status: z
        .enum(['pending', 'delivered', 'failed'])
        .describe('delivered or failed: how this attempt went; pending: the next attempt, not made yet.'),
      httpStatus: z.int().nullable().describe("The receiver's status code; null when none came."),
      error: z.string().nullable().describe('Why the attempt failed; null when it did not.'),
      at: isoTime.describe('When the attempt was made; for a pending one, when it is due.'),
    }),
  ),
});

export const problemSchema = z
  .object({
    type: z.string(),
    title: z.string(),
    status: z.int().min(400).max(599),
    code: z.enum(Object.keys(PROBLEM_CODES) as [ProblemCode, ...ProblemCode[]]).describe('Stable, for programs.'),
    detail: z.string(),
    errors: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
  })
  .meta({ id: 'Problem' });

export const queueSchema = z.object({
  capacity: z.int(),
  pending: z.int(),
  byStatus: z.object(Object.fromEntries(JOB_STATUSES.map((status) => [status, z.int()])) as StatusCounts),
  byPriority: z.record(z.string(), z.int()),
  threads: z.object({ size: z.int(), busy: z.int() }),
  paused: z.boolean(),
});

/** GET /v1/token: the token the request carries. */
export const tokenSchema = z.object({
  name: z.string().nullable().describe('How logs name the token; null when the API has no tokens.'),
  scopes: z
    .array(z.enum(SCOPES))
    .describe(
      'Every scope the token holds, those its given scopes include too: read; submit (read and submit jobs); admin (everything).',
    ),
});

export const nodesSchema = z.object({
  nodes: z.array(
    z.object({
      id: z.string(),
      host: z.string(),
      pid: z.int(),
      version: z.string(),
      threads: z.int(),
      busy: z.int(),
      startedAt: z.int(),
      lastSeenAt: z.int(),
    }),
  ),
});

const rateLimitSchema = z.object({ max: z.int().min(1), perMs: z.int().min(1) }).strict();

/** Limits in force or declared: null where there is no such limit. */
const limitsSchema = z.object({ concurrency: z.int().nullable(), rateLimit: rateLimitSchema.nullable() });

export const limitsOverrideSchema = z
  .object({
    concurrency: z
      .int()
      .min(1)
      .max(1_000_000)
      .nullable()
      .optional()
      .describe('At most this many attempts at once; null: none.'),
    rateLimit: z
      .object({ max: z.int().min(1).max(1_000_000), perMs: z.int().min(1).max(86_400_000) })
      .strict()
      .nullable()
      .optional()
      .describe('At most `max` attempts started in any window of `perMs`; null: none.'),
  })
  .strict()
  .refine((body) => body.concurrency !== undefined || body.rateLimit !== undefined, {
    message: 'give concurrency, rateLimit or both (null removes a limit)',
  })
  .meta({ examples: [{ concurrency: 2, rateLimit: { max: 10, perMs: 1000 } }] });

// ── groups ─────────────────────────────────────────────────────────────────

export const groupParamsSchema = z
  .object({ group: groupSchema.describe('The group (as given at submit).').meta({ examples: ['tenant-a'] }) })
  .strict();

export const groupEntrySchema = z.object({
  name: z.string(),
  limits: limitsSchema.nullable().describe('Set with PUT /v1/groups/{group}/limits; null when none is.'),
  running: z.int().describe("Running attempts of the group's jobs, on every server."),
  queued: z.int().describe('Queued jobs of the group.'),
});

export const groupsSchema = z.object({
  groups: z.array(groupEntrySchema).describe('Every group with queued or running jobs or limits, by name.'),
});

export const taskParamsSchema = z
  .object({
    name: z
      .string()
      .min(1)
      .max(100)
      .meta({ examples: ['noop'] }),
  })
  .strict();

export const taskSchema = z.object({
  name: z.string(),
  description: z.string(),
  payloadSchema: z.unknown(),
  defaults: z.object({
    priority: z.int(),
    maxAttempts: z.int(),
    timeoutMs: z.int(),
    backoff: z.unknown(),
  }),
  concurrency: z.int().nullable().describe("The module's own limit."),
  rateLimit: rateLimitSchema.nullable().describe("The module's own limit."),
  override: z
    .object({ concurrency: z.int().nullable().optional(), rateLimit: rateLimitSchema.nullable().optional() })
    .nullable()
    .describe('Set with PUT /v1/tasks/{name}/limits; null when none.'),
  limits: limitsSchema.describe('What dispatch applies: the module’s limits with the override on top.'),
  running: z.int().describe('Attempts of the task this server runs now.'),
  tokens: z.int().nullable().describe('Starts the rate limit allows now; null without a rate limit.'),
});

export const tasksSchema = z.object({ tasks: z.array(taskSchema) });

export const statsQuerySchema = z
  .object({
    window: z.coerce
      .number()
      .int()
      .min(STATS_MIN_WINDOW_SECONDS)
      .max(STATS_MAX_WINDOW_SECONDS)
      .default(900)
      .describe(
        `Seconds to look back (${STATS_MIN_WINDOW_SECONDS}–${STATS_MAX_WINDOW_SECONDS}), in whole ${STATS_BUCKET_MS / 1000}-second buckets.`,
      ),
  })
  .strict();

const statsFigures = {
  submitted: z.int().describe('Jobs accepted by this server.'),
  completed: z.int().describe('Jobs that completed on this server.'),
  failed: z.int().describe('Jobs that failed on this server.'),
  waitMsP50: z.number().nullable().describe('Median wait from ready to started, ms; null without samples.'),
  waitMsP99: z.number().nullable(),
  runMsP50: z.number().nullable().describe('Median attempt run time, ms; null without samples.'),
  runMsP99: z.number().nullable(),
};

export const statsSchema = z
  .object({
    window: z.int().describe('The window asked for, in seconds.'),
    bucketSeconds: z.int().describe('Width of a bucket: 10.'),
    buckets: z
      .array(z.object({ at: isoTime.describe('Start of the bucket, RFC 3339'), ...statsFigures }))
      .describe('Oldest first; the last is the bucket in progress. Buckets without activity are included.'),
    totals: z.object(statsFigures).describe('The whole window: sums, and percentiles over all its samples.'),
  })
  .meta({ id: 'Stats' });
