/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/) as Kiln carries it: the
 * `traceparent` and `tracestate` headers of a request, and the one text a job or a batch
 * stores them as (`Job.trace`): the traceparent, then a space and the tracestate if any.
 * A traceparent has no space, so the first one divides them.
 */

/** version-traceid-parentid-flags; a version after 00 may carry more fields after a dash. */
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
const ZERO_TRACE = '0'.repeat(32);
const ZERO_SPAN = '0'.repeat(16);
/** The W3C limit on tracestate: 32 members; we keep what is at most 512 characters of them. */
const MAX_TRACESTATE = 512;

/** A span's place in a trace, as the headers carry it. */
export interface TraceParent {
  traceId: string;
  spanId: string;
  /** Bit 0: sampled. */
  flags: number;
  /** The tracestate header, or null. */
  state: string | null;
}

/**
 * The context of a `traceparent` header (and `tracestate`), or null when there is none or
 * it is not valid: per the specification, an invalid traceparent is ignored and the work
 * starts a trace of its own, so a bad header never refuses a request.
 */
export function parseTraceparent(header: unknown, state?: unknown): TraceParent | null {
  if (typeof header !== 'string') return null;
  const match = TRACEPARENT.exec(header.trim().toLowerCase());
  if (match === null) return null;
  const [, version, traceId, spanId, flags, rest] = match as unknown as [
    string,
    string,
    string,
    string,
    string,
    string?,
  ];
  // Version ff is forbidden; version 00 has exactly four fields.
  if (version === 'ff' || (version === '00' && rest !== undefined)) return null;
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return null;
  return { traceId, spanId, flags: Number.parseInt(flags, 16), state: tracestateOf(state) };
}

/** A tracestate header as it is kept: trimmed, null when empty, too long or not one line. */
function tracestateOf(state: unknown): string | null {
  const value = Array.isArray(state) ? state.join(',') : state;
  if (typeof value !== 'string') return null;
  const trimmed = value.trim();
  if (trimmed === '' || trimmed.length > MAX_TRACESTATE || /[\r\n]/.test(trimmed)) return null;
  return trimmed;
}

/** The traceparent header of a context (version 00). */
export function formatTraceparent(context: TraceParent): string {
  return `00-${context.traceId}-${context.spanId}-${context.flags.toString(16).padStart(2, '0')}`;
}

/** The text a job or batch stores its context as (`Job.trace`). */
export function storedTrace(context: TraceParent): string {
  const parent = formatTraceparent(context);
  return context.state === null ? parent : `${parent} ${context.state}`;
}

/** A stored context (`Job.trace`) read back; null for none or a text that is not one. */
export function readStoredTrace(stored: string | null): TraceParent | null {
  const headers = storedHeaders(stored);
  return headers === null ? null : parseTraceparent(headers.traceparent, headers.tracestate);
}

/** A stored context as the two headers that carry it on, without parsing them again; null for none. */
export function storedHeaders(stored: string | null): { traceparent: string; tracestate: string | null } | null {
  if (stored === null) return null;
  const space = stored.indexOf(' ');
  return space < 0
    ? { traceparent: stored, tracestate: null }
    : { traceparent: stored.slice(0, space), tracestate: stored.slice(space + 1) };
}

/** What log lines about a job carry of its context: `trace_id` and `span_id`, or nothing. */
export function traceLogFields(context: TraceParent | null): { trace_id?: string; span_id?: string } {
  return context === null ? {} : { trace_id: context.traceId, span_id: context.spanId };
}
