import { KilnError } from './errors.js';
import { readServerSentEvents } from './sse.js';
import type {
  Batch,
  BatchItem,
  CallbackDelivery,
  Health,
  Job,
  JobPage,
  JobRequest,
  JobStatus,
  JobSummary,
  KilnNode,
  Group,
  LimitsOverride,
  ListFilter,
  Queue,
  Schedule,
  ScheduleRequest,
  Scope,
  Stats,
  SubmittedBatch,
  Task,
  TokenInfo,
} from './types.js';

/**
 * A typed client of the Kiln HTTP API (docs/API.md). It uses only the platform's
 * fetch, so it runs in Node.js and in browsers alike.
 *
 * Answers 429 (queue_full) and 503 (shutting_down, store_unavailable) are retried:
 * nothing was stored or changed, and the server says in `Retry-After` when to come
 * back. Any other failure is thrown at once as a KilnError.
 */

export const DEFAULT_URL = 'http://127.0.0.1:3000';

export interface RetryOptions {
  /** Attempts of one request in all, the first included (default 4; 1 turns retrying off). */
  attempts?: number;
  /** The wait when an answer has no Retry-After, doubled on each retry (default 1000 ms). */
  initialDelayMs?: number;
  /** No single wait is longer than this, whatever Retry-After says (default 30 000 ms). */
  maxDelayMs?: number;
  /** How to wait; tests give one that records the delay and returns at once. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

export interface KilnClientOptions {
  /** Where Kiln serves (default http://127.0.0.1:3000). */
  url?: string;
  /** A bearer token (KILN_API_TOKENS on the server). */
  token?: string;
  retry?: RetryOptions;
  /** The fetch to use (default the global one). */
  fetch?: typeof fetch;
}

export interface CallOptions {
  signal?: AbortSignal;
}

export interface EventsOptions extends CallOptions {
  /**
   * Hears the stream's `retry:` hint, the ms the server asks a client to wait before it
   * follows the job again once the stream has ended early (a draining server ends them).
   */
  onRetry?: (ms: number) => void;
}

export interface WaitOptions extends CallOptions {
  /** Give up after this long in all and answer the job as it is then (default: wait as long as it takes). */
  timeoutMs?: number;
  /** The longest single long poll, in seconds (0–60, default 30). */
  pollSeconds?: number;
}

/** Each status a job can have, once: the compiler refuses a status the server lacks, or one left out. */
const EVERY_STATUS: Record<JobStatus, 'pending' | 'running' | 'finished'> = {
  waiting: 'pending',
  scheduled: 'pending',
  queued: 'pending',
  running: 'running',
  retrying: 'pending',
  completed: 'finished',
  failed: 'finished',
  cancelled: 'finished',
};
/** Every job status, in the order a job passes through them. */
export const JOB_STATUSES: readonly JobStatus[] = Object.keys(EVERY_STATUS) as JobStatus[];
/** The statuses a job ends in: nothing changes it after one of these (but a retry or a delete). */
export const TERMINAL_STATUSES: readonly JobStatus[] = JOB_STATUSES.filter((s) => EVERY_STATUS[s] === 'finished');
const MAX_WAIT_SECONDS = 60;

export function isFinished(job: Pick<Job, 'status'>): boolean {
  return EVERY_STATUS[job.status] === 'finished';
}

/** The W3C trace context a submission carries (API.md "Traces"). */
export interface TraceOptions {
  traceparent?: string;
  tracestate?: string;
}

function traceHeaders(options: TraceOptions): Record<string, string> {
  const headers: Record<string, string> = {};
  if (options.traceparent !== undefined) headers.traceparent = options.traceparent;
  if (options.tracestate !== undefined) headers.tracestate = options.tracestate;
  return headers;
}

interface RequestSpec extends CallOptions {
  method?: 'GET' | 'POST' | 'PUT' | 'DELETE';
  path: string;
  query?: Record<string, string | number | undefined>;
  body?: unknown;
  headers?: Record<string, string>;
  /** Answers with these statuses are returned, not thrown (e.g. /ready's 503). */
  accept?: number[];
}

export class KilnClient {
  readonly url: string;
  #token: string | undefined;
  #fetch: typeof fetch;
  #attempts: number;
  #initialDelayMs: number;
  #maxDelayMs: number;
  #sleep: (ms: number, signal?: AbortSignal) => Promise<void>;

  constructor(options: KilnClientOptions = {}) {
    this.url = (options.url ?? DEFAULT_URL).replace(/\/+$/, '');
    this.#token = options.token;
    this.#fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.#attempts = Math.max(1, options.retry?.attempts ?? 4);
    this.#initialDelayMs = options.retry?.initialDelayMs ?? 1000;
    this.#maxDelayMs = options.retry?.maxDelayMs ?? 30_000;
    this.#sleep = options.retry?.sleep ?? sleep;
  }

  // ── jobs ─────────────────────────────────────────────────────────────────

  /**
   * POST /v1/jobs. An idempotency key given here is sent as the Idempotency-Key header; a
   * `traceparent` (and `tracestate`) as the W3C headers: the job joins that trace.
   */
  async submit(
    request: JobRequest,
    options: CallOptions & TraceOptions & { idempotencyKey?: string } = {},
  ): Promise<Job> {
    const headers = traceHeaders(options);
    if (options.idempotencyKey !== undefined) headers['idempotency-key'] = options.idempotencyKey;
    return this.#json<Job>({ method: 'POST', path: '/v1/jobs', body: request, headers, ...signalOf(options) });
  }

  /** POST /v1/jobs/batch: all or nothing; the batch's id and the jobs in request order. */
  async submitBatch(items: BatchItem[], options: CallOptions & TraceOptions = {}): Promise<SubmittedBatch> {
    return this.#json<SubmittedBatch>({
      method: 'POST',
      path: '/v1/jobs/batch',
      body: { jobs: items },
      headers: traceHeaders(options),
      ...signalOf(options),
    });
  }

  /** GET /v1/batches/{id}: the batch's jobs counted by status, and whether all are finished. */
  async batch(id: string, options: CallOptions = {}): Promise<Batch> {
    return this.#json<Batch>({ path: batchPath(id), ...signalOf(options) });
  }

  /** DELETE /v1/batches/{id}: cancels every unfinished job of the batch; answers the batch. */
  async cancelBatch(id: string, options: CallOptions = {}): Promise<Batch> {
    return this.#json<Batch>({ method: 'DELETE', path: batchPath(id), ...signalOf(options) });
  }

  /** GET /v1/jobs/{id}; with `wait` (seconds, 0–60) the server holds the answer until the job is finished. */
  async get(id: string, options: CallOptions & { wait?: number } = {}): Promise<Job> {
    return this.#json<Job>({ path: jobPath(id), query: { wait: options.wait }, ...signalOf(options) });
  }

  /** Long-polls the job until it is finished, or until `timeoutMs` has passed; answers the job as last seen. */
  async wait(id: string, options: WaitOptions = {}): Promise<Job> {
    const pollSeconds = Math.min(MAX_WAIT_SECONDS, Math.max(0, options.pollSeconds ?? 30));
    const deadline = options.timeoutMs === undefined ? Infinity : Date.now() + options.timeoutMs;
    for (;;) {
      const leftSeconds = (deadline - Date.now()) / 1000;
      const wait = Math.max(0, Math.min(pollSeconds, Math.ceil(leftSeconds)));
      const job = await this.get(id, { wait, ...signalOf(options) });
      if (isFinished(job) || Date.now() >= deadline) return job;
    }
  }

  /**
   * GET /v1/jobs/{id}/events: the job now, then at every change of status or progress.
   * The iteration ends after the job's terminal state, or when the server ends the
   * stream (a draining server does); leaving the loop early closes the connection.
   */
  async *events(id: string, options: EventsOptions = {}): AsyncGenerator<Job> {
    const response = await this.#send({
      path: `${jobPath(id)}/events`,
      headers: { accept: 'text/event-stream' },
      ...signalOf(options),
    });
    if (response.body === null) return;
    for await (const event of readServerSentEvents(response.body, { onRetry: options.onRetry })) {
      if (event.event !== 'job') continue;
      const job = JSON.parse(event.data) as Job;
      yield job;
      if (isFinished(job)) return;
    }
  }

  /** GET /v1/jobs: one page, newest first. */
  async listPage(filter: ListFilter = {}, options: CallOptions = {}): Promise<JobPage> {
    const status = Array.isArray(filter.status) ? filter.status.join(',') : filter.status;
    return this.#json<JobPage>({
      path: '/v1/jobs',
      query: {
        status: status === '' ? undefined : status,
        type: filter.type,
        group: filter.group,
        schedule: filter.schedule,
        batch: filter.batch,
        limit: filter.pageSize,
        cursor: filter.cursor,
      },
      ...signalOf(options),
    });
  }

  /** Every job that fits the filter, newest first, fetched page by page as the loop goes on. */
  async *list(filter: ListFilter = {}, options: CallOptions = {}): AsyncGenerator<JobSummary> {
    let cursor = filter.cursor;
    do {
      const page = await this.listPage({ ...filter, ...(cursor === undefined ? {} : { cursor }) }, options);
      yield* page.jobs;
      cursor = page.nextCursor ?? undefined;
    } while (cursor !== undefined);
  }

  async cancel(id: string, options: CallOptions = {}): Promise<Job> {
    return this.#json<Job>({ method: 'POST', path: `${jobPath(id)}/cancel`, ...signalOf(options) });
  }

  async retry(id: string, options: CallOptions = {}): Promise<Job> {
    return this.#json<Job>({ method: 'POST', path: `${jobPath(id)}/retry`, ...signalOf(options) });
  }

  /** DELETE /v1/jobs/{id}: removes a finished job's record. */
  async remove(id: string, options: CallOptions = {}): Promise<void> {
    await this.#send({ method: 'DELETE', path: jobPath(id), ...signalOf(options) });
  }

  /** GET /v1/jobs/{id}/callbacks: the job's callback deliveries. */
  async callbacks(id: string, options: CallOptions = {}): Promise<CallbackDelivery[]> {
    const answer = await this.#json<{ deliveries: CallbackDelivery[] }>({
      path: `${jobPath(id)}/callbacks`,
      ...signalOf(options),
    });
    return answer.deliveries;
  }

  // ── queue, tasks, nodes ──────────────────────────────────────────────────

  async queue(options: CallOptions = {}): Promise<Queue> {
    return this.#json<Queue>({ path: '/v1/queue', ...signalOf(options) });
  }

  async pause(options: CallOptions = {}): Promise<Queue> {
    return this.#json<Queue>({ method: 'POST', path: '/v1/queue/pause', ...signalOf(options) });
  }

  async resume(options: CallOptions = {}): Promise<Queue> {
    return this.#json<Queue>({ method: 'POST', path: '/v1/queue/resume', ...signalOf(options) });
  }

  async tasks(options: CallOptions = {}): Promise<Task[]> {
    return (await this.#json<{ tasks: Task[] }>({ path: '/v1/tasks', ...signalOf(options) })).tasks;
  }

  /** PUT /v1/tasks/{name}/limits replaces the override: `null` removes a limit, a field left out is the module's own. */
  async setTaskLimits(name: string, limits: LimitsOverride, options: CallOptions = {}): Promise<Task> {
    return this.#json<Task>({ method: 'PUT', path: taskLimitsPath(name), body: limits, ...signalOf(options) });
  }

  /** DELETE /v1/tasks/{name}/limits: back to the module's own limits. */
  async clearTaskLimits(name: string, options: CallOptions = {}): Promise<Task> {
    return this.#json<Task>({ method: 'DELETE', path: taskLimitsPath(name), ...signalOf(options) });
  }

  /** GET /v1/groups: every group with queued or running jobs or limits, by name. */
  async groups(options: CallOptions = {}): Promise<Group[]> {
    return (await this.#json<{ groups: Group[] }>({ path: '/v1/groups', ...signalOf(options) })).groups;
  }

  /** PUT /v1/groups/{group}/limits sets the group's limits: a field left out or `null` is no such limit. */
  async setGroupLimits(group: string, limits: LimitsOverride, options: CallOptions = {}): Promise<Group> {
    return this.#json<Group>({ method: 'PUT', path: groupLimitsPath(group), body: limits, ...signalOf(options) });
  }

  /** DELETE /v1/groups/{group}/limits: the group runs without limits again. */
  async clearGroupLimits(group: string, options: CallOptions = {}): Promise<void> {
    await this.#send({ method: 'DELETE', path: groupLimitsPath(group), ...signalOf(options) });
  }

  async nodes(options: CallOptions = {}): Promise<KilnNode[]> {
    return (await this.#json<{ nodes: KilnNode[] }>({ path: '/v1/nodes', ...signalOf(options) })).nodes;
  }

  /** GET /v1/stats: 10-second buckets over the last `windowSeconds` (60–3600, default 900). */
  async stats(options: CallOptions & { windowSeconds?: number } = {}): Promise<Stats> {
    return this.#json<Stats>({ path: '/v1/stats', query: { window: options.windowSeconds }, ...signalOf(options) });
  }

  // ── schedules ────────────────────────────────────────────────────────────

  async schedules(options: CallOptions = {}): Promise<Schedule[]> {
    return (await this.#json<{ schedules: Schedule[] }>({ path: '/v1/schedules', ...signalOf(options) })).schedules;
  }

  async schedule(name: string, options: CallOptions = {}): Promise<Schedule> {
    return this.#json<Schedule>({ path: schedulePath(name), ...signalOf(options) });
  }

  /** PUT /v1/schedules/{name}: creates (`created` true) or replaces the schedule. */
  async putSchedule(
    name: string,
    schedule: ScheduleRequest,
    options: CallOptions = {},
  ): Promise<{ schedule: Schedule; created: boolean }> {
    const response = await this.#send({
      method: 'PUT',
      path: schedulePath(name),
      body: schedule,
      ...signalOf(options),
    });
    return { schedule: (await response.json()) as Schedule, created: response.status === 201 };
  }

  async removeSchedule(name: string, options: CallOptions = {}): Promise<void> {
    await this.#send({ method: 'DELETE', path: schedulePath(name), ...signalOf(options) });
  }

  async pauseSchedule(name: string, options: CallOptions = {}): Promise<Schedule> {
    return this.#json<Schedule>({ method: 'POST', path: `${schedulePath(name)}/pause`, ...signalOf(options) });
  }

  async resumeSchedule(name: string, options: CallOptions = {}): Promise<Schedule> {
    return this.#json<Schedule>({ method: 'POST', path: `${schedulePath(name)}/resume`, ...signalOf(options) });
  }

  /** POST /v1/schedules/{name}/trigger: one job now, whatever the timetable says. */
  async triggerSchedule(name: string, options: CallOptions = {}): Promise<Job> {
    return this.#json<Job>({ method: 'POST', path: `${schedulePath(name)}/trigger`, ...signalOf(options) });
  }

  // ── tokens ───────────────────────────────────────────────────────────────

  /** GET /v1/token: the name of the token this client sends and every scope it holds. */
  async token(options: CallOptions = {}): Promise<TokenInfo> {
    return this.#json<TokenInfo>({ path: '/v1/token', ...signalOf(options) });
  }

  /**
   * The scope each operation needs, as the server's OpenAPI document declares it, by
   * `METHOD /path` as the document writes it: `'POST /v1/jobs/{id}/cancel'` → `'admin'`.
   * A token may take an operation when its scopes (`token()`) hold that one.
   */
  async operationScopes(options: CallOptions = {}): Promise<Map<string, Scope>> {
    const document = await this.#json<{ paths?: Record<string, Record<string, { 'x-kiln-scope'?: Scope }>> }>({
      path: '/openapi.json',
      ...signalOf(options),
    });
    const scopes = new Map<string, Scope>();
    for (const [path, operations] of Object.entries(document.paths ?? {})) {
      for (const [method, operation] of Object.entries(operations)) {
        const scope = operation['x-kiln-scope'];
        if (scope !== undefined) scopes.set(`${method.toUpperCase()} ${path}`, scope);
      }
    }
    return scopes;
  }

  // ── system ───────────────────────────────────────────────────────────────

  /** GET /health: the process serves. */
  async health(options: CallOptions = {}): Promise<Health> {
    return this.#health('/health', options);
  }

  /** GET /ready: `ok` false with the reason while the server cannot take work (not thrown, not retried). */
  async ready(options: CallOptions = {}): Promise<Health> {
    return this.#health('/ready', options);
  }

  /** GET /metrics: the Prometheus text exposition. */
  async metrics(options: CallOptions = {}): Promise<string> {
    return (await this.#send({ path: '/metrics', ...signalOf(options) })).text();
  }

  // ── the wire ─────────────────────────────────────────────────────────────

  async #health(path: string, options: CallOptions): Promise<Health> {
    const response = await this.#send({ path, accept: [503], ...signalOf(options) }, 1);
    const body = (await response.json()) as { status: string; reason?: string };
    return { ok: response.ok, ...body };
  }

  async #json<T>(spec: RequestSpec): Promise<T> {
    return (await (await this.#send(spec)).json()) as T;
  }

  /** Sends the request, retrying 429 and 503 as Retry-After says; throws a KilnError for any other failure. */
  async #send(spec: RequestSpec, attempts = this.#attempts): Promise<Response> {
    const url = this.url + spec.path + queryString(spec.query);
    const headers: Record<string, string> = { accept: 'application/json', ...spec.headers };
    if (this.#token !== undefined) headers.authorization = `Bearer ${this.#token}`;
    const init: RequestInit = { method: spec.method ?? 'GET', headers };
    if (spec.body !== undefined) {
      headers['content-type'] = 'application/json';
      init.body = JSON.stringify(spec.body);
    }
    if (spec.signal !== undefined) init.signal = spec.signal;
    for (let attempt = 1; ; attempt++) {
      let response: Response;
      try {
        response = await this.#fetch(url, init);
      } catch (error) {
        if (spec.signal?.aborted) throw error;
        throw KilnError.network(this.url, error);
      }
      if (response.ok || spec.accept?.includes(response.status)) return response;
      const retryable = response.status === 429 || response.status === 503;
      if (!retryable || attempt >= attempts) {
        throw KilnError.fromResponse(response.status, response.statusText, await response.text());
      }
      await response.body?.cancel();
      await this.#sleep(this.#retryDelayMs(response.headers.get('retry-after'), attempt), spec.signal);
    }
  }

  #retryDelayMs(retryAfter: string | null, attempt: number): number {
    const fallback = this.#initialDelayMs * 2 ** (attempt - 1);
    return Math.min(this.#maxDelayMs, retryAfterMs(retryAfter) ?? fallback);
  }
}

/** Retry-After as delay-seconds or as an HTTP date (RFC 9110 §10.2.3); null when absent or unreadable. */
export function retryAfterMs(value: string | null, now = Date.now()): number | null {
  if (value === null) return null;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const date = Date.parse(trimmed);
  return Number.isNaN(date) ? null : Math.max(0, date - now);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function signalOf(options: CallOptions): { signal?: AbortSignal } {
  return options.signal === undefined ? {} : { signal: options.signal };
}

function queryString(query: RequestSpec['query']): string {
  if (query === undefined) return '';
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) if (value !== undefined) params.set(key, String(value));
  const text = params.toString();
  return text === '' ? '' : `?${text}`;
}

const jobPath = (id: string) => `/v1/jobs/${encodeURIComponent(id)}`;
const batchPath = (id: string) => `/v1/batches/${encodeURIComponent(id)}`;
const taskLimitsPath = (name: string) => `/v1/tasks/${encodeURIComponent(name)}/limits`;
const groupLimitsPath = (group: string) => `/v1/groups/${encodeURIComponent(group)}/limits`;
const schedulePath = (name: string) => `/v1/schedules/${encodeURIComponent(name)}`;
