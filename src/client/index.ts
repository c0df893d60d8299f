/** `kiln-queue/client`: the typed HTTP client, with nothing of the server in it. */
export { DEFAULT_URL, isFinished, JOB_STATUSES, KilnClient, retryAfterMs, TERMINAL_STATUSES } from './client.js';
export type {
  CallOptions,
  EventsOptions,
  KilnClientOptions,
  RetryOptions,
  TraceOptions,
  WaitOptions,
} from './client.js';
export { KilnError } from './errors.js';
export type { ProblemIssue } from './errors.js';
export type {
  Batch,
  BatchItem,
  CallbackDelivery,
  Group,
  Health,
  Job,
  JobPage,
  JobRequest,
  JobStatus,
  JobSummary,
  KilnNode,
  LimitsOverride,
  ListFilter,
  Problem,
  Queue,
  Schedule,
  Scope,
  ScheduleRequest,
  Stats,
  StatsBucket,
  StatsFigures,
  SubmittedBatch,
  Task,
  TokenInfo,
} from './types.js';
