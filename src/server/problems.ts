import { STATUS_CODES } from 'node:http';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { PROBLEM_CODES, type ProblemCode } from '../contract/problem-codes.js';
import { type FieldIssue, KilnError } from '../scheduler/errors.js';

/**
 * Every 4xx and 5xx answer is an RFC 9457 problem document with a stable `code`
 * (API.md, "Errors"). This module is the one place that maps errors to them.
 */

export interface Problem {
  type: string;
  title: string;
  status: number;
  code: ProblemCode;
  detail: string;
  errors?: FieldIssue[];
}

/** A refusal of the HTTP layer's own (the request, not the job, is at fault). */
export class ProblemError extends Error {
  readonly code: ProblemCode;

  constructor(code: ProblemCode, message: string) {
    super(message);
    this.name = 'ProblemError';
    this.code = code;
  }
}

export function problem(code: ProblemCode, detail: string, errors?: FieldIssue[]): Problem {
  const status = PROBLEM_CODES[code];
  const body: Problem = { type: 'about:blank', title: STATUS_CODES[status] ?? 'Error', status, code, detail };
  if (errors !== undefined && errors.length > 0) body.errors = errors;
  return body;
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json; charset=utf-8';

export function sendProblem(reply: FastifyReply, body: Problem, headers: Record<string, string> = {}): FastifyReply {
  return reply.code(body.status).headers(headers).type(PROBLEM_CONTENT_TYPE).send(body);
}

interface ValidationItem {
  instancePath?: string;
  message?: string;
  keyword?: string;
  params?: { keys?: unknown };
}

function issuesFromValidation(error: FastifyError): FieldIssue[] {
  const items = (error.validation ?? []) as ValidationItem[];
  return items.flatMap((item) => {
    const path = (item.instancePath ?? '').replace(/^\//, '').split('/').filter(Boolean).join('.');
    // An unknown field is named in the path, so a client can point at it.
    const keys = item.keyword === 'unrecognized_keys' ? item.params?.keys : undefined;
    if (Array.isArray(keys) && keys.length > 0) {
      return keys.map((key) => ({
        path: path === '' ? String(key) : `${path}.${String(key)}`,
        message: 'is not a known field',
      }));
    }
    return [{ path: path === '' ? (error.validationContext ?? 'body') : path, message: item.message ?? 'is invalid' }];
  });
}

/** Fastify's own error codes that are the client's fault, and what they mean here. */
const FRAMEWORK_CODES: Record<string, ProblemCode> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_BODY_TOO_LARGE: 'payload_too_large',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'invalid_json',
  FST_ERR_CTP_INVALID_JSON_BODY: 'invalid_json',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'validation_error',
  FST_ERR_CTP_INVALID_TYPE: 'unsupported_media_type',
  FST_ERR_BAD_URL: 'validation_error',
  // Job ids are at most 64 characters, so a longer path segment names no job.
  FST_ERR_MAX_PARAM_LENGTH: 'not_found',
  FST_ERR_ASYNC_CONSTRAINT: 'validation_error',
};

/** Turns any error into a problem document; never leaks a stack trace. */
export function problemFromError(
  error: unknown,
  request: FastifyRequest,
): { body: Problem; headers: Record<string, string> } {
  if (error instanceof KilnError) {
    const headers: Record<string, string> = {};
    if (error.retryAfterSeconds !== null) headers['retry-after'] = String(error.retryAfterSeconds);
    return { body: problem(error.code, error.message, error.issues), headers };
  }
  if (error instanceof ProblemError) return { body: problem(error.code, error.message), headers: {} };
  const fastifyError = error as FastifyError;
  if (Array.isArray(fastifyError.validation)) {
    const issues = issuesFromValidation(fastifyError);
    const detail = issues.map((issue) => `${issue.path}: ${issue.message}`).join('; ');
    return { body: problem('validation_error', detail, issues), headers: {} };
  }
  const mapped = fastifyError.code === undefined ? undefined : FRAMEWORK_CODES[fastifyError.code];
  if (mapped !== undefined) return { body: problem(mapped, describeFrameworkError(mapped, fastifyError)), headers: {} };
  if (error instanceof SyntaxError || (fastifyError.statusCode === 400 && /JSON/i.test(fastifyError.message))) {
    return { body: problem('invalid_json', `the body is not valid JSON: ${fastifyError.message}`), headers: {} };
  }
  const status = fastifyError.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    const code: ProblemCode =
      status === 413
        ? 'payload_too_large'
        : status === 415
          ? 'unsupported_media_type'
          : status === 404
            ? 'not_found'
            : 'validation_error';
    return {
      body: { ...problem(code, fastifyError.message), status, title: STATUS_CODES[status] ?? 'Error' },
      headers: {},
    };
  }
  request.log.error({ err: error }, 'unhandled error');
  return { body: problem('internal_error', 'an internal error occurred; it has been logged'), headers: {} };
}

function describeFrameworkError(code: ProblemCode, error: FastifyError): string {
  switch (code) {
    case 'unsupported_media_type':
      return 'the body must be application/json';
    case 'payload_too_large':
      return `the body is larger than the limit: ${error.message}`;
    case 'invalid_json':
      return `the body is not valid JSON: ${error.message}`;
    default:
      return error.message;
  }
}
