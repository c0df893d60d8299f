import { StoreError } from '../errors.js';
import type { Page } from '../store.js';
import { seenSummary, type SummaryRow } from './rows.js';

/**
 * Lists page newest first by id: a page asks for one row more than its limit, and that
 * row's presence is what says another page follows. The cursor is the last id shown, so
 * a page is stable while jobs are added or removed.
 */

export function encodeCursor(id: string): string {
  return Buffer.from(id, 'utf8').toString('base64url');
}

/** The id a cursor stands for; a cursor no page gave out is refused. */
export function decodeCursor(cursor: string): string {
  const id = Buffer.from(cursor, 'base64url').toString('utf8');
  if (id.length === 0 || encodeCursor(id) !== cursor) throw invalidCursor(cursor);
  return id;
}

export function invalidCursor(cursor: string): StoreError {
  return new StoreError('invalid_cursor', `cursor must be a value from a previous page's nextCursor, got "${cursor}"`);
}

/** How many jobs a page of `limit` holds; null: none (a limit below one, or not a number). */
export function pageSize(limit: number): number | null {
  const size = Math.floor(limit);
  return size > 0 ? size : null;
}

/** The page of `limit` jobs from rows read with a limit of `limit + 1`, newest first. */
export function pageOf(rows: readonly SummaryRow[], limit: number): Page {
  const page = rows.length > limit ? rows.slice(0, limit) : rows;
  const last = page[page.length - 1];
  return {
    jobs: page.map(seenSummary),
    nextCursor: rows.length > limit && last !== undefined ? encodeCursor(last.id) : null,
  };
}
