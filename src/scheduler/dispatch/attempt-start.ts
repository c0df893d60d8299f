import type { JobStore, StartedAttempt } from '../../store/store.js';
import type { AttemptSlots } from '../../workers/slots.js';
import type { Batch } from './batch.js';

export interface AttemptStartsOptions {
  store: JobStore;
  slots: AttemptSlots;
  owner: string;
  /** Whether the batch still waits on or runs in its thread (neither settled nor recalled). */
  live(batch: Batch): boolean;
  /** The batch ran longer than its timeout: its thread is to be stopped. */
  timedOut(batch: Batch): void;
}

/**
 * What follows from a thread starting a message, which the message's slot word tells
 * (workers/slots.ts): the start is recorded, so its attempts count whatever becomes of
 * this server, and its timeout counts from then.
 */
export class AttemptStarts {
  readonly #options: AttemptStartsOptions;

  constructor(options: AttemptStartsOptions) {
    this.#options = options;
  }

  /**
   * Threads started these messages (seen on one drain of the pool): their attempts count
   * from now, whatever becomes of this server. One write for all of them.
   */
  record(batches: readonly Batch[]): void {
    const owner = this.#options.owner;
    const items: StartedAttempt[] = [];
    for (const batch of batches) {
      // A settled batch's finish records its start itself (and its slot may serve another message by now).
      if (!this.#options.live(batch)) continue;
      const startedAt = this.#options.slots.startedAt(batch.slot);
      if (startedAt === null) continue;
      for (const job of batch.jobs) {
        if (!batch.dropped.has(job.id)) items.push({ id: job.id, attempt: job.attempts, owner, startedAt });
      }
    }
    if (items.length === 0) return;
    // A start the store could not take leaves the attempt to be given back should this
    // server die before it ends; the store's failure is reported by the writes that wait.
    this.#options.store.started(items).catch(() => undefined);
  }

  /**
   * The attempt's one timer, counted from when its thread started it: a claimed message
   * waits in the work queue for a free thread, so until it starts the timer only re-arms itself.
   */
  timeout(batch: () => Batch, delayMs: number, timeoutMs: number): NodeJS.Timeout {
    return setTimeout(
      () => {
        const current = batch();
        if (!this.#options.live(current)) return;
        const started = this.#options.slots.startedAt(current.slot);
        const left = started === null ? timeoutMs : started + timeoutMs - Date.now();
        if (left <= 0) this.#options.timedOut(current);
        else current.timer = this.timeout(batch, left, timeoutMs);
      },
      // setTimeout's range ends at 2^31-1 ms; timeoutMs is at most a day.
      Math.min(Math.max(delayMs, 1), 2 ** 31 - 1),
    );
  }
}
