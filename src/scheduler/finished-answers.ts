/** How much answer text is kept, in UTF-16 code units (at most twice as many bytes). */
export const FINISHED_ANSWERS_BUDGET = 4 * 1024 * 1024;
/** A longer answer (a large result) is not kept: it would push out hundreds of others. */
export const FINISHED_ANSWER_MAX = 64 * 1024;

/**
 * The answers to `GET /v1/jobs/{id}` of finished jobs, kept as the text that was sent,
 * newest use last, within FINISHED_ANSWERS_BUDGET. A poll of a job kept here is answered
 * without a read of the store, without parsing the job's payload and result and without
 * rendering them again.
 *
 * Only where this process is the store's one writer (a store of one process:
 * `JobStore.cluster` is null): a finished job then changes only through this scheduler
 * (a retry, a removal, the retention purge), and each of those forgets what it may have
 * changed once the store has answered (`forget`, `forgetAll`). A read that was in flight
 * across such a change may carry what the store held before it: `keep` takes an answer
 * only if nothing was forgotten since its read began (`epoch()` taken before the read).
 * On a store shared by several servers, another server changes jobs without this one
 * knowing at once, so nothing is kept.
 */
export class FinishedAnswers {
  readonly enabled: boolean;
  readonly #budget: number;
  /** Insertion order is use order: the first entry is the least recently used. */
  readonly #answers = new Map<string, string>();
  #size = 0;
  #epoch = 0;

  constructor(enabled: boolean, budget = FINISHED_ANSWERS_BUDGET) {
    this.enabled = enabled;
    this.#budget = budget;
  }

  /** The answer kept for the job `id`, if any (it becomes the most recently used). */
  get(id: string): string | undefined {
    const text = this.#answers.get(id);
    if (text !== undefined) {
      this.#answers.delete(id);
      this.#answers.set(id, text);
    }
    return text;
  }

  /** Taken before a read whose answer may be kept. */
  epoch(): number {
    return this.#epoch;
  }

  /** Keep a finished job's answer, read after `epoch` was taken; refused if anything was forgotten since. */
  keep(id: string, text: string, epoch: number): void {
    if (!this.enabled || epoch !== this.#epoch || text.length > FINISHED_ANSWER_MAX) return;
    this.#drop(id);
    this.#answers.set(id, text);
    this.#size += text.length;
    for (const [oldest, answer] of this.#answers) {
      if (this.#size <= this.#budget) break;
      this.#answers.delete(oldest);
      this.#size -= answer.length;
    }
  }

  /** The job `id` changed, or may have (its retry or removal has been answered). */
  forget(id: string): void {
    this.#epoch++;
    this.#drop(id);
  }

  /** Jobs were deleted (a retention purge): which ones is not known here. */
  forgetAll(): void {
    this.#epoch++;
    this.#answers.clear();
    this.#size = 0;
  }

  /** How many answers are kept. */
  get size(): number {
    return this.#answers.size;
  }

  #drop(id: string): void {
    const text = this.#answers.get(id);
    if (text === undefined) return;
    this.#answers.delete(id);
    this.#size -= text.length;
  }
}
