import { availableParallelism } from 'node:os';
import { z } from 'zod';
import { type ApiToken, type LoadedApiTokens, loadApiTokens } from './api-tokens.js';
import { OTEL_VARS, type TracingConfig, tracingConfig } from './tracing/otel-config.js';

const DAY_MS = 86_400_000;

function integer(name: string, min: number, max: number, fallback: number) {
  return z
    .string()
    .optional()
    .transform((raw, ctx) => {
      if (raw === undefined || raw.trim() === '') return fallback;
      const value = Number(raw);
      if (!/^-?\d+$/.test(raw.trim()) || !Number.isSafeInteger(value) || value < min || value > max) {
        ctx.addIssue({
          code: 'custom',
          message: `${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(raw)}`,
        });
        return z.NEVER;
      }
      return value;
    });
}

function oneOf<const T extends readonly string[]>(name: string, values: T, fallback: T[number]) {
  return z
    .string()
    .optional()
    .transform((raw, ctx) => {
      if (raw === undefined || raw.trim() === '') return fallback;
      const value = raw.trim().toLowerCase();
      if (!values.includes(value)) {
        ctx.addIssue({
          code: 'custom',
          message: `${name} must be one of ${values.join(', ')}, got ${JSON.stringify(raw)}`,
        });
        return z.NEVER;
      }
      return value as T[number];
    });
}

const storeUrl = z
  .string()
  .optional()
  .transform((raw, ctx) => {
    const value = raw?.trim() || 'sqlite:./data/kiln.db';
    if (value === 'memory' || /^sqlite:.+/.test(value) || /^postgres(ql)?:\/\/.+/.test(value)) return value;
    ctx.addIssue({
      code: 'custom',
      message: `KILN_STORE must be "memory", "sqlite:<path>" or "postgres://...", got ${JSON.stringify(raw)}`,
    });
    return z.NEVER;
  });

const pgSchema = z
  .string()
  .optional()
  .transform((raw, ctx) => {
    const value = raw?.trim() || 'kiln';
    if (/^[a-z_][a-z0-9_]{0,55}$/.test(value)) return value;
    ctx.addIssue({
      code: 'custom',
      message: `KILN_PG_SCHEMA must be a lower-case identifier (letters, digits, _; at most 56), got ${JSON.stringify(raw)}`,
    });
    return z.NEVER;
  });

// Unset or empty: no tokens (an open API, logged as a warning). Set to something that
// holds no token (",", " , "): a mistake that must not open the API.
const tokens = z
  .string()
  .optional()
  .transform((raw, ctx) => {
    if (raw === undefined || raw === '') return [];
    // Trimmed, and checked, with the file's secrets (api-tokens.ts).
    const list = raw.split(',').filter((token) => token.trim().length > 0);
    if (list.length === 0) {
      ctx.addIssue({
        code: 'custom',
        message: `KILN_API_TOKENS must be comma-separated tokens (unset it for an open API), got ${JSON.stringify(raw)}`,
      });
      return z.NEVER;
    }
    return list;
  });

const optionalPath = z
  .string()
  .optional()
  .transform((raw) => (raw === undefined || raw.trim() === '' ? null : raw.trim()));

const secret = z
  .string()
  .optional()
  .transform((raw) => (raw === undefined || raw.length === 0 ? null : raw));

const flag = (name: string, fallback: boolean) =>
  z
    .string()
    .optional()
    .transform((raw, ctx) => {
      if (raw === undefined || raw.trim() === '') return fallback;
      const value = raw.trim().toLowerCase();
      if (value === 'true' || value === '1') return true;
      if (value === 'false' || value === '0') return false;
      ctx.addIssue({ code: 'custom', message: `${name} must be true or false, got ${JSON.stringify(raw)}` });
      return z.NEVER;
    });

const host = z
  .string()
  .optional()
  .transform((raw) => (raw === undefined || raw.trim() === '' ? '127.0.0.1' : raw.trim()));

/** The environment variables Kiln reads. */
export const ENV_VARS: readonly string[] = Object.keys(envSchema().shape);

/** Environment → Config. Defaults live here and nowhere else (DESIGN.md, "Configuration"). */
function envSchema() {
  return z.object({
    PORT: integer('PORT', 0, 65_535, 3000),
    HOST: host,
    KILN_STORE: storeUrl,
    KILN_THREADS: integer('KILN_THREADS', 1, 256, Math.min(256, availableParallelism())),
    KILN_MAX_QUEUED: integer('KILN_MAX_QUEUED', 1, 100_000_000, 100_000),
    KILN_THREAD_MAX_MEMORY_MB: integer('KILN_THREAD_MAX_MEMORY_MB', 16, 65_536, 512),
    KILN_THREAD_NICE: integer('KILN_THREAD_NICE', 0, 19, 10),
    KILN_THREAD_MAX_JOBS: integer('KILN_THREAD_MAX_JOBS', 0, 1_000_000_000, 0),
    KILN_MAX_RESULT_BYTES: integer('KILN_MAX_RESULT_BYTES', 1024, 268_435_456, 16_777_216),
    KILN_MAX_SNOOZES: integer('KILN_MAX_SNOOZES', 0, 1_000_000, 100),
    KILN_MAX_INTERRUPTIONS: integer('KILN_MAX_INTERRUPTIONS', 1, 1_000_000, 3),
    KILN_SQLITE_SYNC: oneOf('KILN_SQLITE_SYNC', ['full', 'normal'] as const, 'full'),
    KILN_SQLITE_CACHE_MB: integer('KILN_SQLITE_CACHE_MB', 1, 65_536, 8),
    KILN_PG_POOL_SIZE: integer('KILN_PG_POOL_SIZE', 1, 1000, 10),
    KILN_PG_SCHEMA: pgSchema,
    KILN_TASKS_DIR: optionalPath,
    KILN_API_TOKENS: tokens,
    KILN_API_TOKENS_FILE: optionalPath,
    KILN_MAX_BODY_BYTES: integer('KILN_MAX_BODY_BYTES', 1024, 1024 * 1024 * 1024, 1_048_576),
    KILN_REQUEST_TIMEOUT_MS: integer('KILN_REQUEST_TIMEOUT_MS', 1000, 3_600_000, 30_000),
    KILN_SHUTDOWN_GRACE_MS: integer('KILN_SHUTDOWN_GRACE_MS', 0, DAY_MS, 30_000),
    KILN_LEASE_MS: integer('KILN_LEASE_MS', 1000, DAY_MS, 30_000),
    KILN_NODE_LEASE_MS: integer('KILN_NODE_LEASE_MS', 1000, DAY_MS, 6_000),
    KILN_PRIORITY_AGING_MS: integer('KILN_PRIORITY_AGING_MS', 0, 365 * DAY_MS, 0),
    KILN_RETAIN_COMPLETED_MS: integer('KILN_RETAIN_COMPLETED_MS', 0, 3650 * DAY_MS, DAY_MS),
    KILN_RETAIN_FAILED_MS: integer('KILN_RETAIN_FAILED_MS', 0, 3650 * DAY_MS, 7 * DAY_MS),
    KILN_CALLBACK_SECRET: secret,
    KILN_CALLBACK_TIMEOUT_MS: integer('KILN_CALLBACK_TIMEOUT_MS', 100, 600_000, 10_000),
    KILN_CALLBACK_MAX_ATTEMPTS: integer('KILN_CALLBACK_MAX_ATTEMPTS', 1, 100, 8),
    KILN_CALLBACK_ALLOW_PRIVATE: flag('KILN_CALLBACK_ALLOW_PRIVATE', false),
    LOG_LEVEL: oneOf('LOG_LEVEL', ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const, 'info'),
    LOG_FORMAT: oneOf('LOG_FORMAT', ['auto', 'json', 'pretty'] as const, 'auto'),
    // Read and checked by tracingConfig (src/tracing/otel-config.ts).
    ...Object.fromEntries(OTEL_VARS.map((name) => [name, z.string().optional()])),
  });
}

export interface Config {
  port: number;
  host: string;
  store: string;
  threads: number;
  maxQueued: number;
  threadMaxMemoryMb: number;
  threadNice: number;
  /** Attempts a worker thread runs before it is replaced; null: never (KILN_THREAD_MAX_JOBS=0). */
  threadMaxJobs: number | null;
  /** The largest JSON result an attempt may return, in UTF-8 bytes. */
  maxResultBytes: number;
  /** Snoozes a job may make (`ctx.snooze`); the one after fails it with `snooze_limit`. */
  maxSnoozes: number;
  /** Rescues of a job's attempts (its server died with it) before it fails with `too_many_interruptions`. */
  maxInterruptions: number;
  sqliteSync: 'full' | 'normal';
  /** Page cache of the SQLite connection, MiB (PRAGMA cache_size). */
  sqliteCacheMb: number;
  /** Connections of the PostgreSQL store's pool (besides its listener and heartbeat connections). */
  pgPoolSize: number;
  pgSchema: string;
  tasksDir: string | null;
  /** The tokens the API accepts (none: an open API), from KILN_API_TOKENS and KILN_API_TOKENS_FILE. */
  apiTokens: ApiToken[];
  /** What to warn of at start about the tokens file (a file of clear secrets any user may read); null: nothing. */
  apiTokensWarning: string | null;
  maxBodyBytes: number;
  /** How long a request may take to arrive, headers and body (408 after); answers may take longer. */
  requestTimeoutMs: number;
  shutdownGraceMs: number;
  leaseMs: number;
  /**
   * How long a server's beat keeps it alive for the others on a shared store: a server
   * not heard of for this long is dead, and its running attempts are taken over.
   */
  nodeLeaseMs: number;
  /** A queued job's priority rises one level per this many ms waited (0: off). */
  priorityAgingMs: number;
  retainCompletedMs: number;
  retainFailedMs: number;
  /** Signs callback deliveries (HMAC-SHA256); null: callbacks are refused (400 callbacks_disabled). */
  callbackSecret: string | null;
  /** How long one delivery attempt may take. */
  callbackTimeoutMs: number;
  /** Attempts of one delivery before it is `failed`. */
  callbackMaxAttempts: number;
  /** Callback URLs may name loopback, private and link-local addresses (off: refused). */
  callbackAllowPrivate: boolean;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** `auto`: human-readable lines on a terminal, JSON lines otherwise. */
  logFormat: 'auto' | 'json' | 'pretty';
  /** Spans exported over OTLP, from the standard OTEL_* variables; null: tracing is off. */
  tracing: TracingConfig | null;
}

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** Reads the configuration; a bad value throws a ConfigError with a one-line reason. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const parsed = envSchema().safeParse(env);
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((issue) => issue.message).join('; '));
  }
  const e = parsed.data;
  let apiTokens: LoadedApiTokens;
  let tracing: TracingConfig | null;
  try {
    apiTokens = loadApiTokens(e.KILN_API_TOKENS, e.KILN_API_TOKENS_FILE);
    tracing = tracingConfig(env);
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
  return {
    port: e.PORT,
    host: e.HOST,
    store: e.KILN_STORE,
    threads: e.KILN_THREADS,
    maxQueued: e.KILN_MAX_QUEUED,
    threadMaxMemoryMb: e.KILN_THREAD_MAX_MEMORY_MB,
    threadNice: e.KILN_THREAD_NICE,
    threadMaxJobs: e.KILN_THREAD_MAX_JOBS === 0 ? null : e.KILN_THREAD_MAX_JOBS,
    maxResultBytes: e.KILN_MAX_RESULT_BYTES,
    maxSnoozes: e.KILN_MAX_SNOOZES,
    maxInterruptions: e.KILN_MAX_INTERRUPTIONS,
    sqliteSync: e.KILN_SQLITE_SYNC,
    sqliteCacheMb: e.KILN_SQLITE_CACHE_MB,
    pgPoolSize: e.KILN_PG_POOL_SIZE,
    pgSchema: e.KILN_PG_SCHEMA,
    tasksDir: e.KILN_TASKS_DIR,
    apiTokens: apiTokens.tokens,
    apiTokensWarning: apiTokens.warning,
    maxBodyBytes: e.KILN_MAX_BODY_BYTES,
    requestTimeoutMs: e.KILN_REQUEST_TIMEOUT_MS,
    shutdownGraceMs: e.KILN_SHUTDOWN_GRACE_MS,
    leaseMs: e.KILN_LEASE_MS,
    nodeLeaseMs: e.KILN_NODE_LEASE_MS,
    priorityAgingMs: e.KILN_PRIORITY_AGING_MS,
    retainCompletedMs: e.KILN_RETAIN_COMPLETED_MS,
    retainFailedMs: e.KILN_RETAIN_FAILED_MS,
    callbackSecret: e.KILN_CALLBACK_SECRET,
    callbackTimeoutMs: e.KILN_CALLBACK_TIMEOUT_MS,
    callbackMaxAttempts: e.KILN_CALLBACK_MAX_ATTEMPTS,
    callbackAllowPrivate: e.KILN_CALLBACK_ALLOW_PRIVATE,
    logLevel: e.LOG_LEVEL,
    logFormat: e.LOG_FORMAT,
    tracing,
  };
}
