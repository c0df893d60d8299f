import type { Job, JobStatus } from '../contract/job.js';

/** A watched job changed; null: it no longer exists. */
export type JobListener = (job: Job | null) => void;

/** Reads the jobs with these ids; an id missing from the answer has no job. */
export type ReadJobs = (ids: string[]) => Promise<Job[]>;

interface Watch {
  listeners: Set<JobListener>;
  /** Changes published since the watch began: a sweep's read that saw news arrive is dropped. */
  news: number;
  /** What the last change published said (null before any). */
  last: { status: JobStatus; attempts: number } | null;
}

/**
 * In-process fan-out of job changes to whoever watches one job (long polls, SSE
 * streams). Publishing a change nobody watches costs one map lookup.
 *
 * On a store shared between servers, the news of another server's change travels as a
 * notification, and one can be lost (a dropped connection). `sweep` reads every watched
 * job in one store call and publishes what the watchers have not heard: a job whose
 * status or attempt differs from the last change published, or that is gone. A read
 * during which news of the job arrived may be older than that news, and is dropped.
 * Progress alone is not compared: a stored progress may be older than the last report
 * heard, and a lost report is made good by the next one.
 */
export class JobEvents {
  readonly #byId = new Map<string, Watch>();
  #sweeping = false;

  /** Returns the function that unsubscribes. */
  subscribe(id: string, listener: JobListener): () => void {
    let watch = this.#byId.get(id);
    if (watch === undefined) {
      watch = { listeners: new Set(), news: 0, last: null };
      this.#byId.set(id, watch);
    }
    watch.listeners.add(listener);
    return () => {
      const current = this.#byId.get(id);
      if (current === undefined) return;
      current.listeners.delete(listener);
      if (current.listeners.size === 0) this.#byId.delete(id);
    };
  }

  /** Whether anyone watches this job. */
  watching(id: string): boolean {
    return this.#byId.has(id);
  }

  /** `job` builds the job object; it is called only when someone watches this one. */
  publish(id: string, job: () => Job): void {
    const watch = this.#byId.get(id);
    if (watch === undefined) return;
    const value = job();
    this.#heard(watch, value);
    for (const listener of [...watch.listeners]) listener(value);
  }

  /**
   * A watcher read the job itself and shows what it read: that counts as news, so a
   * sweep's read that started before it (and may be older) is not published after it.
   */
  note(job: Job): void {
    const watch = this.#byId.get(job.id);
    if (watch !== undefined) this.#heard(watch, job);
  }

  #heard(watch: Watch, job: Job): void {
    watch.news += 1;
    watch.last = { status: job.status, attempts: job.attempts };
  }

  /**
   * Reads every watched job with `read` and publishes the changes whose news did not
   * come. One sweep at a time: a call while one runs does nothing. A failed read
   * publishes nothing (the next sweep reads again).
   */
  async sweep(read: ReadJobs): Promise<void> {
    if (this.#sweeping || this.#byId.size === 0) return;
    this.#sweeping = true;
    try {
      const before = new Map<string, { watch: Watch; news: number }>();
      for (const [id, watch] of this.#byId) before.set(id, { watch, news: watch.news });
      let jobs: Job[];
      try {
        jobs = await read([...before.keys()]);
      } catch {
        return;
      }
      const found = new Map(jobs.map((job) => [job.id, job]));
      for (const [id, { watch, news }] of before) {
        // Unwatched meanwhile (or watched anew), or news came during the read (which may be older than it).
        if (this.#byId.get(id) !== watch || watch.news !== news) continue;
        const job = found.get(id) ?? null;
        if (job !== null && watch.last !== null && watch.last.status === job.status) {
          if (watch.last.attempts === job.attempts) continue;
        }
        if (job === null) {
          this.#byId.delete(id);
          for (const listener of [...watch.listeners]) listener(null);
          continue;
        }
        this.#heard(watch, job);
        for (const listener of [...watch.listeners]) listener(job);
      }
    } finally {
      this.#sweeping = false;
    }
  }
}
