import type { z } from 'zod';
import type {
  deliveriesSchema,
  groupEntrySchema,
  jobListSchema,
  jobRequestSchema,
  jobSchema,
  jobSummarySchema,
  limitsOverrideSchema,
  nodesSchema,
  problemSchema,
  queueSchema,
  batchItemSchema,
  batchSchema,
  jobBatchResponseSchema,
  statsSchema,
  taskSchema,
  tokenSchema,
} from '../contract/schemas.js';
import type { scheduleRequestSchema, scheduleSchema } from '../contract/schedule-schemas.js';
import type { Scope } from '../contract/scopes.js';
import type { JobStatus } from '../contract/job.js';

/**
 * The client's view of the HTTP contract (docs/API.md). Wherever the server has a zod
 * schema, the type is inferred from it (type imports only: nothing of zod or of the
 * server reaches the client's JavaScript).
 */

export type { JobStatus, Scope };

export type JobRequest = z.input<typeof jobRequestSchema>;
export type BatchItem = z.input<typeof batchItemSchema>;
export type Job = z.output<typeof jobSchema>;
export type JobSummary = z.output<typeof jobSummarySchema>;
export type JobPage = z.output<typeof jobListSchema>;
/** POST /v1/jobs/batch: the batch's id and the jobs in request order. */
export type SubmittedBatch = z.output<typeof jobBatchResponseSchema>;
/** GET /v1/batches/{id}. */
export type Batch = z.output<typeof batchSchema>;

export type Problem = z.output<typeof problemSchema>;
export type Queue = z.output<typeof queueSchema>;
export type Task = z.output<typeof taskSchema>;
export type LimitsOverride = z.input<typeof limitsOverrideSchema>;
/** A group in GET /v1/groups: its limits (null: none), running attempts and queued jobs. */
export type Group = z.output<typeof groupEntrySchema>;
export type KilnNode = z.output<typeof nodesSchema>['nodes'][number];
/** GET /v1/token: the token's name (null: the API has no tokens) and every scope it holds. */
export type TokenInfo = z.output<typeof tokenSchema>;

export interface ListFilter {
  /** One status or several (any of them). */
  status?: JobStatus | JobStatus[];
  type?: string;
  group?: string;
  schedule?: string;
  /** Jobs created in the batch of this id. */
  batch?: string;
  /** Jobs per page (1–500, the server's default 50). */
  pageSize?: number;
  /** Start after this cursor (a page's `nextCursor`). */
  cursor?: string;
}

/** A callback delivery attempt (GET /v1/jobs/{id}/callbacks). */
export type CallbackDelivery = z.output<typeof deliveriesSchema>['deliveries'][number];

/** The body of PUT /v1/schedules/{name}. */
export type ScheduleRequest = z.input<typeof scheduleRequestSchema>;
export type Schedule = z.output<typeof scheduleSchema>;

/** GET /v1/stats: the window's 10-second buckets (oldest first) and its totals. */
export type Stats = z.output<typeof statsSchema>;
/** The figures of one 10-second bucket, with its start (RFC 3339). */
export type StatsBucket = Stats['buckets'][number];
/** The figures of the whole window. */
export type StatsFigures = Stats['totals'];

/** GET /health and GET /ready: `ok` is false when /ready answers 503. */
export interface Health {
  ok: boolean;
  status: string;
  reason?: string;
}
