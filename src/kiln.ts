import type { FastifyBaseLogger } from 'fastify';
import type { Backoff } from './contract/job.js';
import type { Clock } from './time/clock.js';
import type { Config } from './config.js';
import type { JobStore } from './store/store.js';
import type { MicroBatchOptions } from './scheduler/dispatch/micro-batch.js';
import { CallbackDeliveryService } from './callbacks/delivery-service.js';
import { KILN_VERSION } from './version.js';
import { Scheduler } from './scheduler/scheduler.js';
import { WorkerPool } from './workers/pool.js';
import { buildApp, type KilnApp } from './server/app.js';
import { callbackUrlProblem } from './callbacks/address-guard.js';
import { createLogger } from './logger.js';
import { loadTasks, type TaskRegistry } from './workers/registry.js';
import { openStore } from './store/open-store.js';
import { renderBatch, renderJob } from './server/render.js';
import { Tracing } from './tracing/tracing.js';
import { settleWithin } from './time/settle-within.js';

export interface Kiln {
  app: KilnApp;
  scheduler: Scheduler;
  store: JobStore;
  registry: TaskRegistry;
  logger: FastifyBaseLogger;
  /** Delivers callbacks; null without KILN_CALLBACK_SECRET. */
  callbacks: CallbackDeliveryService | null;
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
  /** The clock schedules tick by and GET /v1/stats buckets by (tests give a fake one they advance). */
  clock?: Clock;
  /** The wait between callback attempts (tests make it short). */
  callbackBackoff?: Backoff;
}

/** The composition root: config → store → pool → scheduler → server. */
export async function createKiln(config: Config, parts: KilnParts = {}): Promise<Kiln> {
  const log = parts.logger ?? createLogger(config);
  const tracing = config.tracing === null ? null : new Tracing(config.tracing, KILN_VERSION, log);
  const registry = await loadTasks(config.tasksDir === null ? {} : { tasksDir: config.tasksDir });
  const store =
    parts.store ??
    (await openStore(config.store, {
      capacity: config.maxQueued,
      sqliteSync: config.sqliteSync,
      sqliteCacheMb: config.sqliteCacheMb,
      pgPoolSize: config.pgPoolSize,
      pgSchema: config.pgSchema,
      threads: config.threads,
      leaseMs: config.leaseMs,
      nodeLeaseMs: config.nodeLeaseMs,
      version: KILN_VERSION,
      priorityAgingMs: config.priorityAgingMs,
      log,
    }));
  let scheduler: Scheduler | null = null;
  const pool = new WorkerPool({
    threads: config.threads,
    maxMemoryMb: config.threadMaxMemoryMb,
    nice: config.threadNice,
    registry,
    maxJobsPerThread: config.threadMaxJobs,
    maxResultBytes: config.maxResultBytes,
    onProgress: (message) => scheduler?.onThreadMessage(message),
    onThreadEnd: (end) => scheduler?.onThreadEnd(end),
  });
  scheduler = new Scheduler({
    store,
    pool,
    registry,
    capacity: config.maxQueued,
    threads: config.threads,
    leaseMs: config.leaseMs,
    nodeLeaseMs: config.nodeLeaseMs,
    maxSnoozes: config.maxSnoozes,
    maxInterruptions: config.maxInterruptions,
    retainCompletedMs: config.retainCompletedMs,
    retainFailedMs: config.retainFailedMs,
    logger: log,
    tracing,
    ...(parts.microBatch === undefined ? {} : { microBatch: parts.microBatch }),
    ...(parts.clock === undefined ? {} : { clock: parts.clock }),
    ...(config.callbackSecret === null
      ? {}
      : {
          callbacks: {
            urlProblem: (url: string) => callbackUrlProblem(url, { allowPrivate: config.callbackAllowPrivate }),
          },
        }),
  });
  const running = scheduler;
  const callbacks =
    config.callbackSecret === null
      ? null
      : new CallbackDeliveryService({
          store,
          secret: config.callbackSecret,
          timeoutMs: config.callbackTimeoutMs,
          maxAttempts: config.callbackMaxAttempts,
          allowPrivate: config.callbackAllowPrivate,
          render: renderJob,
          renderBatch,
          userAgent: `kiln/${KILN_VERSION}`,
          onOutcome: (outcome) => running.metrics.callbackDelivery(outcome),
          log,
          tracing,
          onDraining: (inFlight, graceMs) =>
            log.info({ inFlight, graceMs }, 'shutting down: waiting for callback deliveries in flight'),
          ...(parts.callbackBackoff === undefined ? {} : { backoff: parts.callbackBackoff }),
        });
  const app = await buildApp({
    scheduler: running,
    registry,
    apiTokens: config.apiTokens,
    maxBodyBytes: config.maxBodyBytes,
    requestTimeoutMs: config.requestTimeoutMs,
    storeHealthy: async () => {
      if (!store.available) return false;
      await store.counts();
      return true;
    },
    logger: log,
  });
  if (config.apiTokensWarning !== null) log.warn(config.apiTokensWarning);
  if (config.apiTokens.length === 0) {
    log.warn('no API tokens (KILN_API_TOKENS, KILN_API_TOKENS_FILE): the API is open to anyone who can reach it');
  }

  let stopping: Promise<void> | null = null;
  return {
    app,
    scheduler: running,
    store,
    registry,
    logger: log,
    callbacks,
    async listen() {
      pool.start();
      await running.start();
      callbacks?.start();
      return app.listen({ port: config.port, host: config.host });
    },
    stop() {
      stopping ??= (async () => {
        // Callback attempts in flight get the same grace as running jobs, at the same time.
        await Promise.all([running.stop(config.shutdownGraceMs), callbacks?.stop(config.shutdownGraceMs)]);
        await app.close();
        await store.close();
        // The spans of the last attempts and deliveries go out, within a bound a dead collector cannot stretch.
        if (tracing !== null) await settleWithin(tracing.shutdown(), 5000);
      })();
      return stopping;
    },
  };
}
