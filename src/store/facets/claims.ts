import type { Job, JobError, JobStatus, JobSummary, ParentResult, Progress } from '../../contract/job.js';
import type { TaskLimits } from '../../contract/limits.js';

/** The attempt path: claims under a lease, their heartbeats, starts, progress and fenced ends, and what dispatch and the rescuer wait for. */
export interface ClaimsFacet {
  /**
   * Claim ready jobs, best first (priority desc, then ready time asc, then id), as up
   * to `request.batches` micro-batches (one per free thread). Claimed jobs become
   * `running` under the owner's lease, `attempts` + 1. Resolves without waiting for
   * durability: a claim lost in a crash leaves the job queued, which at-least-once allows.
   */
  claim(request: ClaimRequest): Promise<ClaimedJob[][]>;

  /**
   * Extend the owner's leases on `ids` by `leaseMs` from now; answers the ids no longer
   * held. A shared store also records that the owner's server is alive (its node lease):
   * with no ids, that alone.
   */
  heartbeat(owner: string, ids: string[], leaseMs: number): Promise<string[]>;

  /**
   * Record that these attempts' handlers started (a claimed job may start well after its
   * claim): each job's `startedAt` becomes the time given, and a rescue of its lease
   * then counts the attempt. Fenced like a finish. Written with the store's next group
   * of writes, never on its own: callers need not wait (tests do, to know it is stored).
   */
  started(items: StartedAttempt[]): Promise<void>;

  /** Progress of a running attempt; published as an event, kept with the result. Never waits. */
  progress(id: string, attempt: number, owner: string, progress: Progress): void;

  /**
   * End attempts, each fenced on job id, attempt and owner (and, with `expired`, on the
   * lease having run out). Answers one entry per item: null when the fence refused it.
   * A rescue (`expired`) that lands counts one more interruption on the job
   * (`interruptions`) and records the attempt's owner among the servers it took down,
   * whatever its outcome (given back, retried, failed).
   * A `completed` outcome releases dependents whose dependencies are now all completed;
   * a terminal failure fails the dependents (dependency_failed), transitively.
   */
  finish(items: FinishItem[]): Promise<(Finished | null)[]>;

  /**
   * Give back claims whose attempts never started (a recalled claim, a thread that
   * died before it got to them): each job is `queued` again, first in line among its
   * priority, its attempt not counted. Fenced like a finish.
   */
  release(items: { id: string; attempt: number; owner: string }[]): Promise<void>;

  /** Attempts whose lease ran out (at most `limit`), for the rescuer. */
  expiredLeases(limit: number): Promise<ExpiredAttempt[]>;

  /** The earliest `runAt` of a `scheduled` or `retrying` job, or null (the dispatcher's one timer). */
  nextDueAt(): Promise<number | null>;
}

export interface ClaimRequest {
  owner: string;
  leaseMs: number;
  /** How many micro-batches (free threads). */
  batches: number;
  /**
   * Micro-batching: a batch whose first job's type is in `costs` (expected ms per
   * attempt) grows with the next-best jobs while they are of such types too, are not
   * in `solo`, the expected time of the jobs taken so far is under `budgetMs` (the
   * last one taken may carry it past) and its size is under `maxJobs`. It stops at the first job that does not qualify: that job stays
   * first in line. Null: one job per batch.
   */
  micro: { costs: ReadonlyMap<string, number>; budgetMs: number; maxJobs: number; solo: ReadonlySet<string> } | null;
  /**
   * Task limits as this server sees them: at most this many more jobs of each named type
   * in this claim (0: none now); types not named are not limited, and a limited type is
   * never micro-batched. A job held back holds back nothing else: the claim takes the
   * next-best job of another type, and the held job stays first of its type.
   */
  allowance?: ReadonlyMap<string, number> | null;
  /**
   * The limits themselves, for a store shared by several servers, which applies them
   * across all of them (running attempts of the type in the whole store, one rate
   * window for all); a store of one process has nothing to add to `allowance`.
   */
  limits?: ReadonlyMap<string, TaskLimits> | null;
  /** Every registered task type, with `limits`: a shared store claims type by type while some are limited. */
  types?: readonly string[];
  /** Hears of each type whose job the claim passed over because of its limit (kiln_task_limited_total). */
  passedOver?: (type: string) => void;
  /**
   * Group limits, as `allowance` and `limits` are for types: at most this many more jobs
   * of each named group in this claim; a job is taken only if both its type and its group
   * allow it, and a job of a limited group is never micro-batched. A held group's jobs
   * are passed over as a held type's are, and stay first of their group.
   */
  groupAllowance?: ReadonlyMap<string, number> | null;
  /** Group limits themselves, for a store shared by several servers (as `limits`). */
  groupLimits?: ReadonlyMap<string, TaskLimits> | null;
  /** Hears of each group whose job the claim passed over because of its limit. */
  groupPassedOver?: (group: string) => void;
}

export interface ClaimedJob extends JobSummary {
  /** The payload as JSON text, handed to the thread as it is stored. */
  payloadText: string;
  /** The completed dependencies, in `dependsOn` order. */
  parents: ParentResult[];
}

/** What the retry policy decided for an attempt. */
export type AttemptOutcome =
  /** `resultText`: the result as JSON text. */
  | { kind: 'completed'; resultText: string }
  /** `retryAt` null: the job fails for good; else it is `retrying` until then. */
  | { kind: 'failed'; error: JobError; retryAt: number | null }
  /** Give the job back without using up the attempt (shutdown, a batch that broke): `retrying` at `retryAt`. */
  | { kind: 'released'; error: JobError; retryAt: number }
  /**
   * The handler snoozed (`ctx.snooze`): the job is `scheduled` at `runAt`, its attempt
   * given back (not counted against maxAttempts) and its `snoozes` one more; it has not
   * finished, so its dependents keep waiting.
   */
  | { kind: 'snoozed'; runAt: number }
  /**
   * The attempt's handler never started (a claim rescued before its start was recorded):
   * the job is `queued` again as it was before the claim, its attempt not counted, no
   * error charged. Applies only while no start is recorded for the attempt.
   */
  | { kind: 'unstarted' };

export interface FinishItem {
  id: string;
  attempt: number;
  owner: string;
  outcome: AttemptOutcome;
  /** Rescue: applies only if the lease has run out by the store's clock. */
  expired?: boolean;
  /** When the attempt really started, if later than its claim (it waits in the work queue for a free thread). */
  startedAt?: number;
}

export interface Finished {
  status: JobStatus;
  /** Dependents that became ready or failed. */
  others: number;
}

/** An attempt whose handler started: the job, the attempt and the lease owner that claimed it. */
export interface StartedAttempt {
  id: string;
  attempt: number;
  owner: string;
  /** When the handler started (ms since the epoch). */
  startedAt: number;
}

/** An attempt whose lease ran out, as the rescuer needs it. */
export interface ExpiredAttempt {
  id: string;
  type: string;
  owner: string;
  attempt: number;
  /** Whether a start of its handler was recorded (`started`); if not, the attempt is given back. */
  started: boolean;
  maxAttempts: number;
  backoff: Job['backoff'];
  /** The job's rescues so far, this one not counted (`Job.interruptions`). */
  interruptions: number;
  /** The servers (lease owners) the attempts of those rescues ran on, oldest first. */
  interruptedBy: string[];
}
