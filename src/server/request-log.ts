import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify';
import type { Scheduler } from '../scheduler/scheduler.js';
import { operationOf, scopeOf } from './auth.js';
import { parseTraceparent, traceLogFields } from '../tracing/trace-context.js';

/** Routes polled by probes and scrapers: their lines go to the debug level, not info. */
const PROBE_ROUTES = new Set(['/health', '/ready', '/metrics']);

/** What a query parameter's value is logged as when the route does not declare it. */
const REDACTED = '***';

/**
 * When the answer has gone out (or the client went away): the request's line in the log
 * (naming the token it came with, never its secret), its HTTP metrics by route pattern,
 * and for an action that needs `admin` an audit line: who, what, on which job or
 * setting (the route's parameters), and how it was answered. Hooked on the response's
 * close rather than on fastify's onResponse, which a hijacked reply (an event stream)
 * never reaches. A client that goes away closes the response too, before any answer.
 */
export function observeAnswer(request: FastifyRequest, reply: FastifyReply, scheduler: Scheduler): void {
  const started = process.hrtime.bigint();
  reply.raw.once('close', () => {
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    const route = request.routeOptions.url ?? 'unmatched';
    const status = reply.raw.statusCode;
    scheduler.metrics.httpRequest(request.method, route, status, seconds);
    const level = PROBE_ROUTES.has(route) && status < 400 ? 'debug' : 'info';
    const token = request.apiToken?.name ?? null;
    // The line is built only for a logger that writes it (LOG_LEVEL=warn, as under load, does not).
    if (writes(request.log, level)) {
      const ms = Math.round(seconds * 10_000) / 10;
      const url = loggedUrl(request);
      request.log[level](
        {
          http: { method: request.method, url, status, ms },
          ...(token === null ? {} : { token }),
          ...traceLogFields(parseTraceparent(request.headers.traceparent)),
        },
        `${request.method} ${url} ${status} ${ms} ms${token === null ? '' : ` token=${token}`}`,
      );
    }
    // A request the token check turned away (401) has no one to name: its request line tells of it.
    if (scopeOf(request) === 'admin' && status !== 401)
      audit(request, token, reply.raw.writableFinished ? status : null);
  });
}

/**
 * The audit line of an admin action, at `info` on a logger of its own level, so that
 * LOG_LEVEL (warn under load, even error) never hides it; only `silent` does. `status`
 * is null when the client went away before the answer was written: the line then says
 * `aborted` rather than claim an answer nobody saw.
 */
function audit(request: FastifyRequest, token: string | null, status: number | null): void {
  const log = request.log.level === 'silent' ? request.log : request.log.child({}, { level: 'info' });
  const action = operationOf(request);
  const target = { ...(request.params as Record<string, string> | undefined) };
  const on = Object.values(target).join(' ');
  log.info(
    { audit: { token, action, target, status, ...(status === null ? { aborted: true } : {}) } },
    `audit: ${token ?? 'no token'} ${action}${on === '' ? '' : ` ${on}`} ${status ?? 'aborted'}`,
  );
}

/** Whether the logger writes lines of `level` (pino says so; a logger that cannot tell is asked to write). */
function writes(log: FastifyBaseLogger, level: 'debug' | 'info'): boolean {
  const withCheck = log as FastifyBaseLogger & { isLevelEnabled?: (level: string) => boolean };
  return withCheck.isLevelEnabled?.(level) ?? true;
}

const declaredByRoute = new WeakMap<object, ReadonlySet<string>>();

/**
 * The query parameters the matched route declares (its zod querystring schema's keys).
 * A client may put anything else in a query string, a token among them, so only these
 * are logged with their values.
 */
function declaredParameters(request: FastifyRequest): ReadonlySet<string> {
  const schema = request.routeOptions.schema?.querystring as { shape?: Record<string, unknown> } | undefined;
  if (schema === undefined || schema === null || typeof schema !== 'object') return new Set();
  let declared = declaredByRoute.get(schema);
  if (declared === undefined) {
    declared = new Set(Object.keys(schema.shape ?? {}));
    declaredByRoute.set(schema, declared);
  }
  return declared;
}

/** The request's URL with the value of every query parameter its route does not declare replaced. */
function loggedUrl(request: FastifyRequest): string {
  const url = request.url;
  const question = url.indexOf('?');
  if (question === -1) return url;
  const declared = declaredParameters(request);
  const query = url
    .slice(question + 1)
    .split('&')
    .map((pair) => {
      const equals = pair.indexOf('=');
      const name = equals === -1 ? pair : pair.slice(0, equals);
      if (declared.has(decoded(name))) return pair;
      // A bare word may be a credential on its own.
      return equals === -1 ? (pair === '' ? pair : REDACTED) : `${name}=${REDACTED}`;
    })
    .join('&');
  return `${url.slice(0, question)}?${query}`;
}

function decoded(name: string): string {
  try {
    return decodeURIComponent(name.replaceAll('+', ' '));
  } catch {
    return name;
  }
}
