import { availableParallelism } from 'node:os';
import { z } from 'zod';

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

const tokens = z
  .string()
  .optional()
  .transform((raw) =>
    (raw ?? '')
      .split(',')
      .map((token) => token.trim())
      .filter((token) => token.length > 0),
  );

const optionalPath = z
  .string()
  .optional()
  .transform((raw) => (raw === undefined || raw.trim() === '' ? null : raw.trim()));

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
    KILN_SQLITE_SYNC: oneOf('KILN_SQLITE_SYNC', ['full', 'normal'] as const, 'full'),
    KILN_PG_POOL_SIZE: integer('KILN_PG_POOL_SIZE', 1, 1000, 10),
    KILN_PG_SCHEMA: pgSchema,
    KILN_TASKS_DIR: optionalPath,
    KILN_API_TOKENS: tokens,
    KILN_MAX_BODY_BYTES: integer('KILN_MAX_BODY_BYTES', 1024, 1024 * 1024 * 1024, 1_048_576),
    KILN_SHUTDOWN_GRACE_MS: integer('KILN_SHUTDOWN_GRACE_MS', 0, DAY_MS, 30_000),
    KILN_LEASE_MS: integer('KILN_LEASE_MS', 1000, DAY_MS, 30_000),
    KILN_PRIORITY_AGING_MS: integer('KILN_PRIORITY_AGING_MS', 0, 365 * DAY_MS, 0),
    KILN_RETAIN_COMPLETED_MS: integer('KILN_RETAIN_COMPLETED_MS', 0, 3650 * DAY_MS, DAY_MS),
    KILN_RETAIN_FAILED_MS: integer('KILN_RETAIN_FAILED_MS', 0, 3650 * DAY_MS, 7 * DAY_MS),
    LOG_LEVEL: oneOf('LOG_LEVEL', ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const, 'info'),
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
  sqliteSync: 'full' | 'normal';
  /** Connections of the PostgreSQL store's pool (besides its listener and heartbeat connections). */
  pgPoolSize: number;
  pgSchema: string;
  tasksDir: string | null;
  apiTokens: string[];
  maxBodyBytes: number;
  shutdownGraceMs: number;
  leaseMs: number;
  /** A queued job's priority rises one level per this many ms waited (0: off). */
  priorityAgingMs: number;
  retainCompletedMs: number;
  retainFailedMs: number;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
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
  return {
    port: e.PORT,
    host: e.HOST,
    store: e.KILN_STORE,
    threads: e.KILN_THREADS,
    maxQueued: e.KILN_MAX_QUEUED,
    threadMaxMemoryMb: e.KILN_THREAD_MAX_MEMORY_MB,
    threadNice: e.KILN_THREAD_NICE,
    sqliteSync: e.KILN_SQLITE_SYNC,
    pgPoolSize: e.KILN_PG_POOL_SIZE,
    pgSchema: e.KILN_PG_SCHEMA,
    tasksDir: e.KILN_TASKS_DIR,
    apiTokens: e.KILN_API_TOKENS,
    maxBodyBytes: e.KILN_MAX_BODY_BYTES,
    shutdownGraceMs: e.KILN_SHUTDOWN_GRACE_MS,
    leaseMs: e.KILN_LEASE_MS,
    priorityAgingMs: e.KILN_PRIORITY_AGING_MS,
    retainCompletedMs: e.KILN_RETAIN_COMPLETED_MS,
    retainFailedMs: e.KILN_RETAIN_FAILED_MS,
    logLevel: e.LOG_LEVEL,
  };
}
