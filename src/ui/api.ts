/**
 * Every call the dashboard makes to the Kiln API, in one module, so that the pages
 * never build a URL or read a response themselves. The calls go through the typed
 * client `kiln-queue/client` (served to the page from this server), pointed at the server
 * that serves the page (at <base>/ui/), so a Kiln behind a proxy under a prefix still
 * works.
 *
 * The bearer token, when the server asks for one, lives in sessionStorage: it lasts
 * as long as the browser tab and is never written to disk or shared with other tabs.
 */
import { JOB_STATUSES, KilnClient, KilnError, TERMINAL_STATUSES } from 'kiln-queue/client';
import type {
  Batch,
  CallbackDelivery,
  Group,
  Job,
  JobPage,
  JobStatus,
  JobSummary,
  KilnNode,
  LimitsOverride,
  Queue,
  Schedule,
  Stats,
  StatsFigures,
  Task,
} from 'kiln-queue/client';

export type {
  Batch,
  CallbackDelivery,
  Group,
  Job,
  JobPage,
  JobStatus,
  JobSummary,
  Schedule,
  Stats,
  StatsFigures,
  Task,
};
export { JOB_STATUSES, KilnError, TERMINAL_STATUSES };
export type QueueInfo = Queue;
export type NodeInfo = KilnNode;

/** A task's limits as GET /v1/tasks shows them. */
export type TaskLimits = Task['limits'];

export interface JobFilter {
  status?: JobStatus[];
  type?: string;
  group?: string;
  schedule?: string;
  batch?: string;
  limit?: number;
  cursor?: string;
}

const TOKEN_KEY = 'kiln.token';
const unauthorizedListeners = new Set<() => void>();

export function storedToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function saveToken(token: string): void {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function forgetToken(): void {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** Called whenever the server answers 401: the token is missing or wrong. */
export function onUnauthorized(listener: () => void): () => void {
  unauthorizedListeners.add(listener);
  return () => unauthorizedListeners.delete(listener);
}

/** A client of the server that serves this page, with the tab's token. No hidden retries: the pages poll. */
function client(): KilnClient {
  const token = storedToken();
  return new KilnClient({
    url: new URL('..', document.baseURI).toString(),
    ...(token === null ? {} : { token }),
    retry: { attempts: 1 },
  });
}

/** Runs a call; a 401 it fails with tells the token prompt. */
async function call<T>(run: (kiln: KilnClient) => Promise<T>): Promise<T> {
  try {
    return await run(client());
  } catch (error) {
    throw unauthorized(error);
  }
}

function unauthorized(error: unknown): unknown {
  if (error instanceof KilnError && error.status === 401) for (const listener of unauthorizedListeners) listener();
  return error;
}

/** What a page shows of a failure: the client's KilnError, or anything else as one without an answer. */
export function asProblem(failure: unknown): KilnError {
  return failure instanceof KilnError ? failure : new KilnError(0, 'error', String(failure), null);
}

export const api = {
  queue: () => call((kiln) => kiln.queue()),
  pause: () => call((kiln) => kiln.pause()),
  resume: () => call((kiln) => kiln.resume()),
  stats: (windowSeconds: number) => call((kiln) => kiln.stats({ windowSeconds })),
  jobs: (filter: JobFilter) =>
    call((kiln) =>
      // Fields left undefined are left out of the query.
      kiln.listPage({
        status: filter.status,
        type: filter.type,
        group: filter.group,
        schedule: filter.schedule,
        batch: filter.batch,
        pageSize: filter.limit,
        cursor: filter.cursor,
      }),
    ),
  job: (id: string) => call((kiln) => kiln.get(id)),
  cancel: (id: string) => call((kiln) => kiln.cancel(id)),
  retry: (id: string) => call((kiln) => kiln.retry(id)),
  remove: (id: string) => call((kiln) => kiln.remove(id)),
  callbacks: (id: string) => call((kiln) => kiln.callbacks(id)),
  batch: (id: string) => call((kiln) => kiln.batch(id)),
  cancelBatch: (id: string) => call((kiln) => kiln.cancelBatch(id)),
  tasks: () => call((kiln) => kiln.tasks()),
  setLimits: (task: string, limits: LimitsOverride) => call((kiln) => kiln.setTaskLimits(task, limits)),
  resetLimits: (task: string) => call((kiln) => kiln.clearTaskLimits(task)),
  groups: () => call((kiln) => kiln.groups()),
  setGroupLimits: (group: string, limits: LimitsOverride) => call((kiln) => kiln.setGroupLimits(group, limits)),
  resetGroupLimits: (group: string) => call((kiln) => kiln.clearGroupLimits(group)),
  schedules: () => call((kiln) => kiln.schedules()),
  pauseSchedule: (schedule: string) => call((kiln) => kiln.pauseSchedule(schedule)),
  resumeSchedule: (schedule: string) => call((kiln) => kiln.resumeSchedule(schedule)),
  triggerSchedule: (schedule: string) => call((kiln) => kiln.triggerSchedule(schedule)),
  nodes: () => call((kiln) => kiln.nodes()),
};

/**
 * The operation each action of the dashboard calls, as the OpenAPI document names it.
 * The scope it needs is not written here: it is read from the server's document.
 */
const OPERATIONS = {
  cancel: 'POST /v1/jobs/{id}/cancel',
  retry: 'POST /v1/jobs/{id}/retry',
  remove: 'DELETE /v1/jobs/{id}',
  cancelBatch: 'DELETE /v1/batches/{id}',
  pause: 'POST /v1/queue/pause',
  resume: 'POST /v1/queue/resume',
  setLimits: 'PUT /v1/tasks/{name}/limits',
  resetLimits: 'DELETE /v1/tasks/{name}/limits',
  setGroupLimits: 'PUT /v1/groups/{group}/limits',
  resetGroupLimits: 'DELETE /v1/groups/{group}/limits',
  pauseSchedule: 'POST /v1/schedules/{name}/pause',
  resumeSchedule: 'POST /v1/schedules/{name}/resume',
  triggerSchedule: 'POST /v1/schedules/{name}/trigger',
} as const;
export type Action = keyof typeof OPERATIONS;

/** What the tab's token may do: its name (null: the API is open) and the actions its scopes allow. */
export interface Permissions {
  token: string | null;
  scopes: readonly string[];
  may(action: Action): boolean;
}

/**
 * The token's scopes (GET /v1/token) against the scope each action's operation needs
 * (the OpenAPI document), where every operation under /v1 has one (the server does not
 * start otherwise). An operation the document does not list (an older server) is left to
 * the server to refuse.
 */
export async function loadPermissions(): Promise<Permissions> {
  const [token, needs] = await call((kiln) => Promise.all([kiln.token(), kiln.operationScopes()]));
  return {
    token: token.name,
    scopes: token.scopes,
    may: (action) => {
      const needed = needs.get(OPERATIONS[action]);
      return needed === undefined || token.scopes.includes(needed);
    },
  };
}

/**
 * Follows GET /v1/jobs/{id}/events until the job is finished or `signal` aborts,
 * calling `onJob` with each state and `onRetry` with the server's reconnection hint
 * (`retry:`). EventSource cannot send an Authorization header, so the client reads the
 * stream with fetch: the token stays in a header and never appears in a URL (where logs
 * and proxies would keep it).
 */
export async function watchJob(
  id: string,
  onJob: (job: Job) => void,
  signal: AbortSignal,
  onRetry?: (ms: number) => void,
): Promise<void> {
  try {
    for await (const job of client().events(id, { signal, onRetry })) onJob(job);
  } catch (error) {
    throw unauthorized(error);
  }
}
