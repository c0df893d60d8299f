import { z } from 'zod';
import { JITTER_MODES, JOB_ERROR_CODES, JOB_STATUSES, MAX_PRIORITY, MIN_PRIORITY } from '../jobs/model.js';

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
};

export const jobRequestSchema = z.object(jobFields).strict();
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

export const batchRequestSchema = z.object({ jobs: z.array(batchItemSchema).min(1).max(1000) }).strict();

export const idempotencyHeaderSchema = z
  .object({ 'idempotency-key': z.string().min(1).max(255).optional() })
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
    limit: z.coerce.number().int().min(1).max(500).default(50),
    cursor: z.string().min(1).max(200).optional(),
  })
  .strict();

// ── responses (documentation; the serializer writes plain JSON) ─────────────

const jobErrorSchema = z.object({ code: z.enum(JOB_ERROR_CODES), message: z.string(), attempt: z.int() });
const progressSchema = z.object({ percent: z.number(), message: z.string().nullable() });
const isoTime = z.string().describe('RFC 3339, UTC');

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
    runAt: isoTime.nullable(),
    createdAt: isoTime,
    startedAt: isoTime.nullable(),
    finishedAt: isoTime.nullable(),
  })
  .meta({ id: 'Job' });

export const jobSummarySchema = jobSchema.omit({ payload: true, result: true }).meta({ id: 'JobSummary' });

export const jobListSchema = z.object({ jobs: z.array(jobSummarySchema), nextCursor: z.string().nullable() });
export const jobBatchResponseSchema = z.object({ jobs: z.array(jobSchema) });

export const problemSchema = z
  .object({
    type: z.string(),
    title: z.string(),
    status: z.int(),
    code: z.string(),
    detail: z.string(),
    errors: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
  })
  .meta({ id: 'Problem' });

export const queueSchema = z.object({
  capacity: z.int(),
  pending: z.int(),
  byStatus: z.record(z.string(), z.int()),
  byPriority: z.record(z.string(), z.int()),
  threads: z.object({ size: z.int(), busy: z.int() }),
  paused: z.boolean(),
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
  });

export const taskParamsSchema = z.object({ name: z.string().min(1).max(100) }).strict();

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
