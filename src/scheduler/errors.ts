import { isStoreError } from '../store/errors.js';

/**
 * The errors the scheduler answers with. Each has a stable code; the HTTP layer maps
 * codes to statuses and problem documents in one place (src/server/problems.ts).
 */
export const KILN_ERROR_CODES = [
  'validation_error',
  'unknown_task_type',
  'unknown_dependency',
  'callbacks_disabled',
  'not_found',
  'idempotency_conflict',
  'invalid_state',
  'queue_full',
  'shutting_down',
  'store_unavailable',
] as const;
export type KilnErrorCode = (typeof KILN_ERROR_CODES)[number];

export interface FieldIssue {
  path: string;
  message: string;
}

export class KilnError extends Error {
  readonly code: KilnErrorCode;
  readonly issues: FieldIssue[];
  /** For queue_full, shutting_down and store_unavailable: when a client should try again, in seconds. */
  readonly retryAfterSeconds: number | null;

  constructor(
    code: KilnErrorCode,
    message: string,
    options: { issues?: FieldIssue[]; retryAfterSeconds?: number } = {},
  ) {
    super(message);
    this.name = 'KilnError';
    this.code = code;
    this.issues = options.issues ?? [];
    this.retryAfterSeconds = options.retryAfterSeconds ?? null;
  }
}

export function notFound(id: string): KilnError {
  return new KilnError('not_found', `no job has the id ${JSON.stringify(id)}`);
}

export function noSuchBatch(id: string): KilnError {
  return new KilnError('not_found', `no batch has the id ${JSON.stringify(id)}`);
}

export function noSuchTask(name: string): KilnError {
  return new KilnError('not_found', `no task is registered as ${JSON.stringify(name)}`);
}

export function validationError(issues: FieldIssue[]): KilnError {
  const detail = issues.map((issue) => `${issue.path}: ${issue.message}`).join('; ');
  return new KilnError('validation_error', detail, { issues });
}

/** A store that cannot write now answers 503 store_unavailable; anything else stays as it is. */
export function unavailable(error: unknown): never {
  if (isStoreError(error, 'store_unavailable') || isStoreError(error, 'store_closed')) {
    throw new KilnError('store_unavailable', `the job store cannot be reached: ${error.message}`, {
      retryAfterSeconds: 1,
    });
  }
  throw error;
}
