import type { FastifyBaseLogger } from 'fastify';
import pino from 'pino';
import type { Config } from './config.js';
import type { MicroBatchOptions } from './scheduler/micro-batch.js';
import { Scheduler } from './scheduler/scheduler.js';
import { buildApp, type KilnApp } from './server/app.js';
import { openStore } from './store/open-store.js';
import { KILN_VERSION } from './version.js';
import type { JobStore } from './store/store.js';
import { WorkerPool } from './workers/pool.js';
import { loadTasks, type TaskRegistry } from './workers/registry.js';

export interface Kiln {
  app: KilnApp;
  scheduler: Scheduler;
  store: JobStore;
  registry: TaskRegistry;
  logger: FastifyBaseLogger;
  /** Listen on config.host:config.port and start dispatching; answers the address. */
  listen(): Promise<string>;
  /**
   * Graceful stop: refuse submissions, let running attempts finish within the grace
   * period, release the rest, close HTTP, flush and close the store. Safe to call twice.
   */
  stop(): Promise<void>;
}

export interface KilnParts {
  logger?: FastifyBaseLogger;
  /** A store opened by the caller (tests that open it with options no variable sets); closed by stop(). */
  store?: JobStore;
  /** Micro-batch sizing (tests fix which types count as tiny instead of measuring the machine). */
  microBatch?: MicroBatchOptions;
}

/** The composition root: config → store → pool → scheduler → server. */
export async function createKiln(config: Config, parts: KilnParts = {}): Promise<Kiln> {
  const log = parts.logger ?? (pino({ level: config.logLevel }) as FastifyBaseLogger);
  const registry = await loadTasks(config.tasksDir === null ? {} : { tasksDir: config.tasksDir });
  const store =
    parts.store ??
    (await openStore(config.store, {
      capacity: config.maxQueued,
      sqliteSync: config.sqliteSync,
      pgPoolSize: config.pgPoolSize,
      pgSchema: config.pgSchema,
      threads: config.threads,
      leaseMs: config.leaseMs,
      version: KILN_VERSION,
      priorityAgingMs: config.priorityAgingMs,
    }));
  let scheduler: Scheduler | null = null;
  const pool = new WorkerPool({
    threads: config.threads,
    maxMemoryMb: config.threadMaxMemoryMb,
    nice: config.threadNice,
    registry,
    onProgress: (message) => scheduler?.onThreadMessage(message),
    onThreadError: (error) =>
      log.error({ err: error }, 'a worker thread died outside an attempt; the pool replaces it'),
  });
  scheduler = new Scheduler({
    store,
    pool,
    registry,
    capacity: config.maxQueued,
    threads: config.threads,
    leaseMs: config.leaseMs,
    retainCompletedMs: config.retainCompletedMs,
    retainFailedMs: config.retainFailedMs,
    logger: log,
    ...(parts.microBatch === undefined ? {} : { microBatch: parts.microBatch }),
  });
  const running = scheduler;
  const app = await buildApp({
    scheduler: running,
    registry,
    apiTokens: config.apiTokens,
    maxBodyBytes: config.maxBodyBytes,
    storeHealthy: async () => {
      if (!store.available) return false;
      await store.counts();
      return true;
    },
    logger: log,
  });
  if (config.apiTokens.length === 0) {
    log.warn('KILN_API_TOKENS is not set: the API is open to anyone who can reach it');
  }

  let stopping: Promise<void> | null = null;
  return {
    app,
    scheduler: running,
    store,
    registry,
    logger: log,
    async listen() {
      pool.start();
      await running.start();
      return app.listen({ port: config.port, host: config.host });
    },
    stop() {
      stopping ??= (async () => {
        await running.stop(config.shutdownGraceMs);
        await app.close();
        await store.close();
      })();
      return stopping;
    },
  };
}
