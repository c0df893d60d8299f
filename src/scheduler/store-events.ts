import type { Dispatcher } from './dispatch/dispatcher.js';
import type { JobEvents } from './events.js';
import type { FinishedAnswers } from './finished-answers.js';
import type { KilnMetrics } from './statistics/metrics.js';
import type { StoreEvent } from '../store/store.js';
import { isTerminal } from '../contract/job.js';

/** Who hears what the store announces. */
export interface StoreEventRouting {
  dispatcher: Dispatcher;
  events: JobEvents;
  metrics: KilnMetrics;
  /** A job reached a terminal status by this server's hand. */
  finished(): void;
  /**
   * A store of this process alone came back: reads the watched jobs again. Null on a
   * shared store, whose watchers are swept every second anyway.
   */
  sweepWatched: (() => void) | null;
  /** Answers to polls of finished jobs, forgotten when the store comes back. */
  answers: FinishedAnswers;
}

/** Routes one store event to dispatch, the watchers of the job and the metrics. */
export function routeStoreEvent(event: StoreEvent, routing: StoreEventRouting): void {
  const dispatcher = routing.dispatcher;
  if (event.kind === 'lost') {
    dispatcher.abandon(event.id, 'lease_lost');
    return;
  }
  if (event.kind === 'ready') {
    // The store is back (a new store thread, a rebuilt index), or another server made jobs ready.
    dispatcher.pump();
    // A store of this process alone: a write that committed as its thread died was never
    // announced, so what the watchers were told may be behind the file.
    routing.sweepWatched?.();
    // While its thread was down the file had no holder: another process may have written it.
    routing.answers.forgetAll();
    return;
  }
  if (event.kind === 'paused') {
    dispatcher.pausedElsewhere(event.paused);
    return;
  }
  // Callback deliveries are the delivery service's business.
  if (event.kind === 'deliveries') return;
  routing.events.publish(event.id, event.job);
  if (event.kind !== 'changed') return;
  // The job left `running` by another hand (cancelled here or elsewhere, rescued): its
  // attempt here is void. A cancel only drops the outcome of a micro-batch's job; any
  // other loss stops the thread, since the job may be handed out again at once.
  if (event.remote === true) {
    // Only news that can mean the attempt here is void (a cancel, a rescue); an older
    // status arriving late (the inserting server's `queued`) cannot.
    const void_ = event.status === 'cancelled' || event.status === 'failed' || event.status === 'retrying';
    if (void_ && dispatcher.runs(event.id)) dispatcher.checkLeases();
  } else if (event.status !== 'running' && dispatcher.runs(event.id)) {
    dispatcher.abandon(event.id, event.status === 'cancelled' ? 'cancel' : 'lease_lost');
  }
  if (isTerminal(event.status)) {
    dispatcher.forget(event.id);
    // Another server's change is counted in that server's metrics.
    if (event.remote === true) return;
    routing.metrics.finished(event.type, event.status as 'completed' | 'failed' | 'cancelled');
    routing.finished();
  }
}
