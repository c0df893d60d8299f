/** The stable `code` of every problem document and the HTTP status it comes with (API.md, "Errors"). */
export const PROBLEM_CODES = {
  invalid_json: 400,
  validation_error: 400,
  unknown_task_type: 400,
  unknown_dependency: 400,
  callbacks_disabled: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  request_timeout: 408,
  idempotency_conflict: 409,
  invalid_state: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  expectation_failed: 417,
  queue_full: 429,
  headers_too_large: 431,
  shutting_down: 503,
  store_unavailable: 503,
  internal_error: 500,
} as const satisfies Record<string, number>;
export type ProblemCode = keyof typeof PROBLEM_CODES;
