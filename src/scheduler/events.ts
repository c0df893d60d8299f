import type { Job } from '../jobs/model.js';

export type JobListener = (job: Job) => void;

/**
 * In-process fan-out of job changes to whoever watches one job (long polls, SSE
 * streams). Publishing a change nobody watches costs one map lookup.
 */
export class JobEvents {
  readonly #byId = new Map<string, Set<JobListener>>();

  /** Returns the function that unsubscribes. */
  subscribe(id: string, listener: JobListener): () => void {
    let listeners = this.#byId.get(id);
    if (listeners === undefined) {
      listeners = new Set();
      this.#byId.set(id, listeners);
    }
    listeners.add(listener);
    return () => {
      const current = this.#byId.get(id);
      if (current === undefined) return;
      current.delete(listener);
      if (current.size === 0) this.#byId.delete(id);
    };
  }

  /** Whether anyone watches this job. */
  watching(id: string): boolean {
    return this.#byId.has(id);
  }

  /** `job` builds the job object; it is called only when someone watches this one. */
  publish(id: string, job: () => Job): void {
    const listeners = this.#byId.get(id);
    if (listeners === undefined) return;
    const value = job();
    for (const listener of [...listeners]) listener(value);
  }
}
