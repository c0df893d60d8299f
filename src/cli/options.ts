import { InvalidArgumentError } from 'commander';
import type { JobRequest, ScheduleRequest } from '../client/index.js';

/** The command line's values turned into requests and numbers, and the error a wrong one is. */

/** A mistake in the command line found after commander parsed it (a payload that is not JSON, …). */
export class UsageError extends Error {
  override name = 'UsageError';
}

export interface SubmitOptions {
  priority?: number;
  wait?: boolean;
  group?: string;
  delay?: number;
  runAt?: string;
  idempotencyKey?: string;
  maxAttempts?: number;
  timeout?: number;
  dependsOn?: string;
  metadata?: string;
  dedupe?: string | true;
  reuse?: number;
  callback?: string;
}

export interface ScheduleOptions {
  cron?: string;
  timezone?: string;
  type?: string;
  payload?: string;
  overlap?: 'allow' | 'skip';
  catchUp?: 'none' | 'last';
  paused?: boolean;
}

export async function submitFields(options: SubmitOptions): Promise<Omit<JobRequest, 'type'>> {
  if (options.reuse !== undefined && options.dedupe === undefined) throw new UsageError('--reuse needs --dedupe');
  const dedupe =
    options.dedupe === undefined
      ? undefined
      : options.dedupe === true && options.reuse === undefined
        ? true
        : {
            ...(options.dedupe === true ? {} : { key: options.dedupe }),
            ...(options.reuse === undefined ? {} : { reuseMs: options.reuse }),
          };
  // Fields left undefined are left out of the JSON body.
  return {
    priority: options.priority,
    group: options.group,
    delayMs: options.delay,
    runAt: options.runAt,
    idempotencyKey: options.idempotencyKey,
    maxAttempts: options.maxAttempts,
    timeoutMs: options.timeout,
    ...(options.dependsOn === undefined ? {} : { dependsOn: options.dependsOn.split(',').filter((id) => id !== '') }),
    ...(options.metadata === undefined
      ? {}
      : { metadata: parseJson(options.metadata, '--metadata') as Record<string, unknown> }),
    ...(dedupe === undefined ? {} : { dedupe }),
    ...(options.callback === undefined ? {} : { callback: { url: options.callback } }),
  };
}

export function scheduleRequest(base: unknown, options: ScheduleOptions): ScheduleRequest {
  if (typeof base !== 'object' || base === null || Array.isArray(base))
    throw new UsageError('BODY must be a JSON object');
  const body = { ...(base as Partial<ScheduleRequest>) };
  if (options.cron !== undefined) body.cron = options.cron;
  if (options.timezone !== undefined) body.timezone = options.timezone;
  if (options.overlap !== undefined) body.overlap = options.overlap;
  if (options.catchUp !== undefined) body.catchUp = options.catchUp;
  if (options.paused === true) body.paused = true;
  if (options.type !== undefined || options.payload !== undefined) {
    const type = options.type ?? body.job?.type;
    if (type === undefined) throw new UsageError('--payload needs --type (or a job in BODY)');
    body.job = {
      ...body.job,
      type,
      ...(options.payload === undefined ? {} : { payload: parseJson(options.payload, '--payload') }),
    };
  }
  if (body.cron === undefined || body.job === undefined) {
    throw new UsageError('a schedule needs a cron expression and a job: give --cron and --type, or BODY');
  }
  return body as ScheduleRequest;
}

export function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new UsageError(`${what} is not JSON: ${error instanceof Error ? error.message : String(error)}`);
  }
}

export function integer(min: number, max = Number.MAX_SAFE_INTEGER): (value: string) => number {
  return (value) => {
    const number = Number(value);
    if (!/^-?\d+$/.test(value.trim()) || number < min || number > max) {
      throw new InvalidArgumentError(
        max === Number.MAX_SAFE_INTEGER ? `must be an integer ≥ ${min}` : `must be an integer from ${min} to ${max}`,
      );
    }
    return number;
  };
}

// commander turns a parser's null into '', so "none" stays a word until the action reads it.
export function limitValue(value: string): number | 'none' {
  return value === 'none' ? 'none' : integer(1)(value);
}

export function rateValue(value: string): { max: number; perMs: number } | 'none' {
  if (value === 'none') return 'none';
  const match = /^(\d+)\/(\d+)$/.exec(value.trim());
  if (match === null) throw new InvalidArgumentError('must be MAX/PER_MS (e.g. 10/1000) or none');
  return { max: Number(match[1]), perMs: Number(match[2]) };
}
