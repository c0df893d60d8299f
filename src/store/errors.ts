/**
 * Errors the store layer throws, each with a stable code. Expected outcomes of a
 * transition (queue full, idempotency conflict, invalid state) are results, not errors;
 * see store.ts.
 */
export const STORE_ERROR_CODES = [
  /** Another process holds the SQLite file. */
  'store_in_use',
  /** The store cannot write now (its thread is down, the disk is full, the database is unreachable). */
  'store_unavailable',
  /** A call after close(). */
  'store_closed',
  /** A list cursor that no page of this store handed out. */
  'invalid_cursor',
  /** KILN_STORE names no store that can be opened. */
  'invalid_store_url',
  /** The file was written by a newer schema than this build knows. */
  'unsupported_schema',
] as const;
export type StoreErrorCode = (typeof STORE_ERROR_CODES)[number];

export class StoreError extends Error {
  readonly code: StoreErrorCode;

  constructor(code: StoreErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StoreError';
    this.code = code;
  }
}

export function isStoreError(value: unknown, code?: StoreErrorCode): value is StoreError {
  return value instanceof StoreError && (code === undefined || value.code === code);
}
