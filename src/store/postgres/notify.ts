/**
 * NOTIFY/LISTEN: the news of the PostgreSQL store, told to this process's listeners and
 * announced to the other servers. Changes are announced at most once per 10 ms per
 * server, after the data committed; the other servers wake, update their paused flag
 * and due timer, stop attempts that were cancelled, and read the jobs someone watches.
 * A one-second poll with jitter stands in for lost notifications.
 */
import { hostname } from 'node:os';
import type pg from 'pg';
import type { Changes, StoreEvent, StoreListener, SubscribeOptions } from '../store.js';
import type { Job, JobStatus, Progress } from '../../contract/job.js';
import type { PgConnection } from './connection.js';
import { jobFromWire, type JobRow, type JobWire, toWire } from '../core/rows.js';
import { prepared } from './sql.js';

type Change = [id: string, status: JobStatus];

interface Announcement {
  /** The announcing store. */
  n: string;
  c?: Change[];
  /** Progress: id, attempt, percent, message. */
  p?: [string, number, number, string | null][];
  /** The earliest due time among the changes. */
  d?: number;
  /** Dispatch paused or resumed. */
  x?: boolean;
  /** Callback deliveries were stored (sent by the database's trigger, `n` "db"). */
  k?: 1;
}

/** What the news depends on elsewhere in the store. */
export interface NewsSources {
  /** Whether this process runs an attempt of the job. */
  runsHere(id: string): boolean;
  /** A job is due at `at`. */
  lowerDue(at: number): void;
  readJobs(ids: string[]): Promise<JobRow[]>;
  readPaused(): Promise<boolean>;
}

const NOTIFY_EVERY_MS = 10;
const NOTIFY = prepared('SELECT pg_notify($1, $2)');
const NOTIFY_MAX_BYTES = 7900;
/** Characters of a progress message that travel in a notification (the whole one is in the row). */
const PROGRESS_MESSAGE_CHARS = 200;

export class StoreNews {
  readonly #db: PgConnection;
  readonly #sources: NewsSources;
  readonly #channel: string;
  readonly #tag = `${hostname()}:${process.pid}:${Math.random().toString(16).slice(2, 10)}`;
  /** How this store's announcements start (`n` is their first key). */
  readonly #ownPrefix = `{"n":${JSON.stringify(this.#tag)}`;
  readonly #listeners = new Map<StoreListener, SubscribeOptions | undefined>();
  #listener: pg.Client | null = null;
  #listenerRetry: NodeJS.Timeout | null = null;
  #outbox: Change[] = [];
  #outboxProgress: NonNullable<Announcement['p']> = [];
  #outboxDue: number | null = null;
  #outboxPaused: boolean | null = null;
  #notifyTimer: NodeJS.Timeout | null = null;
  #pollTimer: NodeJS.Timeout | null = null;
  /** The pause flag as the listeners were last told it (null: never told; the dispatcher reads it at start). */
  #pausedTold: boolean | null = null;
  #remote: Promise<void> = Promise.resolve();

  constructor(db: PgConnection, sources: NewsSources) {
    this.#db = db;
    this.#sources = sources;
    this.#channel = `${db.schema}_events`;
  }

  /** Listens to the other servers, and polls every `pollMs` (with jitter) in case a notification is lost. */
  async start(pollMs: number): Promise<void> {
    await this.#listen();
    const tick = () => {
      this.#pollTimer = setTimeout(tick, pollMs * (0.8 + Math.random() * 0.4));
      this.#pollTimer.unref();
      this.emit({ kind: 'ready' });
      void this.#recheckPaused();
    };
    this.#pollTimer = setTimeout(tick, pollMs);
    this.#pollTimer.unref();
  }

  /** Stops the timers (the store closes). */
  stopTimers(): void {
    for (const timer of [this.#pollTimer, this.#notifyTimer, this.#listenerRetry]) {
      if (timer !== null) clearTimeout(timer);
    }
  }

  /** Sends what is left to announce. */
  flush(): Promise<void> {
    return this.#notify();
  }

  /** Stops listening (once the store is closed). */
  async endListener(): Promise<void> {
    const listener = this.#listener;
    this.#listener = null;
    await listener?.end().catch(() => undefined);
  }

  subscribe(listener: StoreListener, options?: SubscribeOptions): () => void {
    this.#listeners.set(listener, options);
    return () => this.#listeners.delete(listener);
  }

  emit(event: StoreEvent): void {
    for (const [listener] of this.#listeners) listener(event);
  }

  anyListener(): boolean {
    return this.#listeners.size > 0;
  }

  /** Publishes a change here and queues it for the other servers. */
  changed(
    id: string,
    type: string,
    status: JobStatus,
    job: (() => Job) | null,
    dueAt: number | null = null,
    publishHere = true,
  ): void {
    // A job this server claimed meanwhile (on another connection, whose answer came first)
    // has moved past `queued`: news that it became ready is stale and would void the claim.
    if ((status === 'queued' || status === 'scheduled' || status === 'waiting') && this.#sources.runsHere(id)) return;
    this.#outbox.push([id, status]);
    if (dueAt !== null) this.#outboxDue = this.#outboxDue === null ? dueAt : Math.min(this.#outboxDue, dueAt);
    this.#scheduleNotify();
    if (this.#listeners.size === 0 || !publishHere) return;
    const thunk = job ?? (() => stubJob(id, type, status));
    this.emit({ kind: 'changed', id, type, status, job: thunk });
  }

  /** Publishes a job and the others a request changed; answers them. */
  applyChanges(job: JobWire, others: JobWire[]): Changes {
    this.changed(job.id, job.type, job.status, () => jobFromWire(job));
    for (const other of others) this.changed(other.id, other.type, other.status, () => jobFromWire(other));
    if (job.status === 'queued' || others.some((other) => other.status === 'queued')) this.emit({ kind: 'ready' });
    return { job: jobFromWire(job), others: others.map(jobFromWire) };
  }

  /** Publishes progress of an attempt here and queues it for the other servers. */
  progress(id: string, attempt: number, progress: Progress, job: () => Job): void {
    this.#outboxProgress.push([id, attempt, progress.percent, progress.message]);
    this.#scheduleNotify();
    for (const [listener] of this.#listeners) listener({ kind: 'progress', id, attempt, progress, job });
  }

  /** Dispatch was paused or resumed here. */
  announcePaused(paused: boolean): void {
    this.#pausedTold = paused;
    this.#outboxPaused = paused;
    this.#scheduleNotify();
  }

  #watched(id: string): boolean {
    for (const [, options] of this.#listeners) if (options?.watching?.(id) === true) return true;
    return false;
  }

  #scheduleNotify(): void {
    if (this.#notifyTimer !== null || this.#db.closed) return;
    this.#notifyTimer = setTimeout(() => {
      this.#notifyTimer = null;
      void this.#notify();
    }, NOTIFY_EVERY_MS);
  }

  /** Sends what changed since the last notification, split under PostgreSQL's payload limit. */
  async #notify(): Promise<void> {
    const changes = this.#outbox;
    const progress = this.#outboxProgress;
    const due = this.#outboxDue;
    const paused = this.#outboxPaused;
    this.#outbox = [];
    this.#outboxProgress = [];
    this.#outboxDue = null;
    this.#outboxPaused = null;
    if (changes.length === 0 && progress.length === 0 && paused === null) return;
    const payloads: string[] = [];
    let current: Announcement = { n: this.#tag };
    let size = Buffer.byteLength(JSON.stringify(current)) + 64;
    const push = () => {
      payloads.push(JSON.stringify(current));
      current = { n: this.#tag };
      size = Buffer.byteLength(JSON.stringify(current)) + 64;
    };
    if (due !== null) current.d = due;
    if (paused !== null) current.x = paused;
    for (const change of changes) {
      const bytes = Buffer.byteLength(JSON.stringify(change)) + 1;
      if (size + bytes > NOTIFY_MAX_BYTES) push();
      (current.c ??= []).push(change);
      size += bytes;
    }
    // The latest report per job, its message cut short: a notification holds at most 8000 bytes.
    const latest = new Map<string, NonNullable<Announcement['p']>[number]>();
    for (const entry of progress) {
      const message = entry[3] === null ? null : entry[3].slice(0, PROGRESS_MESSAGE_CHARS);
      latest.set(entry[0], [entry[0], entry[1], entry[2], message]);
    }
    for (const entry of latest.values()) {
      const bytes = Buffer.byteLength(JSON.stringify(entry)) + 1;
      if (size + bytes > NOTIFY_MAX_BYTES) push();
      (current.p ??= []).push(entry);
      size += bytes;
    }
    push();
    for (const payload of payloads) {
      try {
        await this.#db.poolQuery(NOTIFY, [this.#channel, payload]);
      } catch {
        // Lost notifications are covered by the other servers' polling.
      }
    }
  }

  async #listen(): Promise<void> {
    const client = this.#db.newClient();
    client.on('error', () => this.#relisten(client));
    client.on('end', () => this.#relisten(client));
    client.on('notification', (message) => {
      if (message.channel !== this.#channel || message.payload === undefined) return;
      // This server's own announcements come back too: known by their first bytes, never parsed.
      if (message.payload.startsWith(this.#ownPrefix)) return;
      let announcement: Announcement;
      try {
        announcement = JSON.parse(message.payload) as Announcement;
      } catch {
        return;
      }
      if (announcement.n === this.#tag) return;
      this.#remote = this.#remote.then(() => this.#onAnnouncement(announcement)).catch(() => undefined);
    });
    await client.connect();
    await client.query(`LISTEN "${this.#channel}"`);
    if (this.#db.closed) {
      await client.end().catch(() => undefined);
      return;
    }
    this.#listener = client;
  }

  /**
   * The pause flag as the database has it, told to the listeners when it differs from
   * what they were last told: a pause or resume whose notification was lost (or arrived
   * out of order) is noticed within a poll.
   */
  async #recheckPaused(): Promise<void> {
    if (!this.#db.available) return;
    const paused = await this.#sources.readPaused().catch(() => null);
    if (paused === null || paused === this.#pausedTold) return;
    this.#pausedTold = paused;
    this.emit({ kind: 'paused', paused });
  }

  #relisten(client: pg.Client): void {
    if (this.#listener !== client || this.#db.closed) return;
    this.#listener = null;
    client.end().catch(() => undefined);
    const again = (delay: number) => {
      if (this.#db.closed) return;
      this.#listenerRetry = setTimeout(() => {
        this.#listenerRetry = null;
        this.#listen().then(
          // Whatever happened while nobody listened: look again.
          () => {
            this.emit({ kind: 'ready' });
            void this.#recheckPaused();
          },
          () => again(Math.min(delay * 2, 5000)),
        );
      }, delay);
      this.#listenerRetry.unref();
    };
    again(100);
  }

  async #onAnnouncement(announcement: Announcement): Promise<void> {
    if (announcement.k !== undefined) this.emit({ kind: 'deliveries' });
    // A hint only: the flag is read from the database, so announcements that cross are harmless.
    if (announcement.x !== undefined) await this.#recheckPaused();
    if (announcement.d !== undefined) this.#sources.lowerDue(announcement.d);
    const changes = announcement.c ?? [];
    const progress = announcement.p ?? [];
    if (this.#listeners.size === 0) return;
    // The watched jobs are read in one query, and read again if someone started watching meanwhile.
    const read = new Map<string, Job>();
    for (let round = 0; round < 3; round++) {
      const wanted = [
        ...new Set(
          [...changes.map((change) => change[0]), ...progress.map((entry) => entry[0])].filter(
            (id) => !read.has(id) && this.#watched(id),
          ),
        ),
      ];
      if (wanted.length === 0) break;
      const rows = await this.#sources.readJobs(wanted).catch(() => null);
      if (rows === null) break;
      for (const row of rows) read.set(row.id, jobFromWire(toWire(row)));
    }
    let ready = false;
    for (const [id, status] of changes) {
      if (status === 'queued') ready = true;
      const job = read.get(id);
      const type = job?.type ?? '';
      this.emit({ kind: 'changed', id, type, status, remote: true, job: () => job ?? stubJob(id, type, status) });
    }
    for (const [id, attempt, percent, message] of progress) {
      const job = read.get(id);
      const value = { percent, message };
      if (job !== undefined) job.progress = value;
      this.emit({ kind: 'progress', id, attempt, progress: value, job: () => job ?? stubJob(id, '', 'running') });
    }
    if (ready) this.emit({ kind: 'ready' });
  }
}

/** What a change says of a job nobody here watches (its listeners only look at id and status). */
function stubJob(id: string, type: string, status: JobStatus): Job {
  return {
    id,
    type,
    status,
    priority: 0,
    payload: null,
    result: null,
    error: null,
    attempts: 0,
    maxAttempts: 0,
    snoozes: 0,
    interruptions: 0,
    timeoutMs: 0,
    backoff: { initialMs: 0, factor: 1, maxMs: 0, jitter: 'none' },
    progress: null,
    idempotencyKey: null,
    dependsOn: [],
    metadata: {},
    group: null,
    callback: null,
    runAt: null,
    createdAt: 0,
    startedAt: null,
    finishedAt: null,
    readyAt: null,
    schedule: null,
    batch: null,
    trace: null,
  };
}
