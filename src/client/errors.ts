import type { Problem } from './types.js';

/** A field the server named in a problem document's `errors`. */
export interface ProblemIssue {
  path: string;
  message: string;
}

/**
 * What every failed call of the client throws: the server's problem document
 * (API.md "Errors") as fields. A request that got no HTTP answer (the server cannot
 * be reached, the connection broke) has `status` 0 and `code` `network_error`; an
 * answer that is not a problem document (a proxy's error page) has the code
 * `unexpected_response`.
 */
export class KilnError extends Error {
  override name = 'KilnError';
  /** The HTTP status; 0 when there was no answer. */
  readonly status: number;
  /** The problem's stable code (`validation_error`, `not_found`, …). */
  readonly code: string;
  /** The problem's text for people. */
  readonly detail: string;
  /** The fields at fault, for validation errors. */
  readonly errors: ProblemIssue[];
  /** The problem document as the server sent it (null when there was none). */
  readonly problem: Problem | null;

  constructor(status: number, code: string, detail: string, problem: Problem | null, options?: { cause?: unknown }) {
    super(detail, options);
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.errors = problem?.errors ?? [];
    this.problem = problem;
  }

  /** From an answer's status and body text (a problem document, or anything else). */
  static fromResponse(status: number, statusText: string, body: string): KilnError {
    const problem = parseProblem(body);
    if (problem !== null) return new KilnError(status, problem.code, problem.detail, problem);
    const text = body.trim().slice(0, 200);
    const detail = `the server answered ${status} ${statusText}`.trim() + (text === '' ? '' : `: ${text}`);
    return new KilnError(status, 'unexpected_response', detail, null);
  }

  static network(url: string, cause: unknown): KilnError {
    const reason = describeCause(cause);
    return new KilnError(0, 'network_error', `cannot reach ${url}: ${reason}`, null, { cause });
  }
}

function parseProblem(body: string): Problem | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return null;
  }
  if (typeof parsed !== 'object' || parsed === null) return null;
  const candidate = parsed as Partial<Problem>;
  if (typeof candidate.code !== 'string' || typeof candidate.detail !== 'string') return null;
  return candidate as Problem;
}

// fetch reports every failure as "fetch failed"; the reason (ECONNREFUSED, …) is its cause.
function describeCause(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = (error as { cause?: unknown }).cause;
  if (cause instanceof Error) {
    const code = (cause as { code?: unknown }).code;
    return typeof code === 'string' && !cause.message.includes(code) ? `${cause.message} (${code})` : cause.message;
  }
  return error.message;
}
