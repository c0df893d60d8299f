import { pollUntil } from './poll.js';
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { followJobEvents, requestJson, type TestResponse } from './http.js';
import { fixtureTasksDir, repoRoot } from './paths.js';

/**
 * Kiln as its users run it: `node dist/src/main.js` in a child process, configured by
 * environment, logging JSON lines on stdout. For tests that need real signals and a
 * real process death (SIGTERM, SIGINT, SIGKILL), which an in-process server cannot give.
 */

export const mainScript = join(repoRoot, 'dist', 'src', 'main.js');

export interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface KilnProcess {
  child: ChildProcess;
  /** `http://127.0.0.1:<port>`, from the `kiln is serving` line. */
  url: string;
  /** Every JSON line logged so far. */
  logs: LogLine[];
  /** What the process wrote on stderr so far. */
  stderr(): string;
  /** Settles when the process has exited. */
  exited: Promise<Exit>;
  request(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<TestResponse>;
  /** Resolves with the first line (already logged or still to come) whose `msg` is `msg` (or matches it). */
  waitForLog(msg: string | RegExp): Promise<LogLine>;
  /** Long-polls GET /v1/jobs/{id}?wait= until the job is terminal; at most `rounds` polls. */
  waitForJob(id: string, rounds?: number): Promise<any>;
  /** Follows the job's event stream until it shows `status`; resolves with that job. */
  waitForStatus(id: string, status: string): Promise<any>;
  /** Follows the job's event stream until it shows progress (test.steps reports 0 % as its handler starts). */
  waitForProgress(id: string): Promise<any>;
  /** Polls /metrics until `n` attempts of `type` are claimed and wait for a thread (kiln_task_claimed). */
  waitForClaimed(type: string, n: number): Promise<void>;
}

const live = new Set<ChildProcess>();

/**
 * The test's environment without what configures Kiln (KILN_*, PORT, HOST, LOG_LEVEL)
 * or the test runner, for a child process that only the test's own settings configure.
 */
export function inheritedEnv(): Record<string, string> {
  const inherited: Record<string, string> = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (value === undefined || key.startsWith('KILN_') || key.startsWith('NODE_TEST')) continue;
    if (['PORT', 'HOST', 'LOG_LEVEL'].includes(key)) continue;
    inherited[key] = value;
  }
  return inherited;
}

/**
 * The environment of a Kiln process a test starts: nothing of the test's own KILN_*
 * variables, a free port on 127.0.0.1, info logs, then `env`.
 */
export function kilnProcessEnv(env: Record<string, string>): Record<string, string> {
  return { ...inheritedEnv(), PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...env };
}

/**
 * Starts Kiln on a free port (PORT=0; the bound address is read from the log) and
 * resolves once it serves. The process inherits nothing of the test's own KILN_*
 * environment: only `env` configures it.
 */
export async function spawnKiln(env: Record<string, string>): Promise<KilnProcess> {
  const child = spawn(process.execPath, [mainScript], {
    cwd: repoRoot,
    env: kilnProcessEnv({ KILN_THREADS: '2', KILN_TASKS_DIR: fixtureTasksDir, ...env }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  const exited = new Promise<Exit>((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child);
      resolve({ code, signal });
    });
  });

  const logs: LogLine[] = [];
  const logWaiters: Array<{ msg: string | RegExp; resolve: (line: LogLine) => void }> = [];
  const fits = (line: LogLine, msg: string | RegExp) =>
    typeof msg === 'string' ? line.msg === msg : msg.test(line.msg);
  let stderr = '';
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (chunk: string) => {
    stderr += chunk;
  });
  createInterface({ input: child.stdout! }).on('line', (text) => {
    let line: LogLine;
    try {
      line = JSON.parse(text);
    } catch {
      line = { level: 0, msg: text };
    }
    logs.push(line);
    for (const waiter of logWaiters.filter((w) => fits(line, w.msg))) {
      logWaiters.splice(logWaiters.indexOf(waiter), 1);
      waiter.resolve(line);
    }
  });

  const waitForLog = (msg: string | RegExp): Promise<LogLine> => {
    const seen = logs.find((line) => fits(line, msg));
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      logWaiters.push({ msg, resolve });
      exited.then((exit) => {
        // stdout may still hold the line when 'exit' fires; give readline its turn.
        setImmediate(() => {
          const late = logs.find((line) => fits(line, msg));
          if (late !== undefined) resolve(late);
          else
            reject(
              new Error(`kiln exited (${JSON.stringify(exit)}) before logging "${String(msg)}"; stderr: ${stderr}`),
            );
        });
      });
    });
  };

  const serving = await waitForLog('kiln is serving');
  const url = String(serving.address);

  const request = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
    requestJson(url, method, path, body, headers);

  return {
    child,
    url,
    logs,
    stderr: () => stderr,
    exited,
    request,
    waitForLog,
    async waitForJob(id, rounds = 4) {
      let last: TestResponse | null = null;
      for (let round = 0; round < rounds; round++) {
        last = await request('GET', `/v1/jobs/${id}?wait=30`);
        if (last.status !== 200) throw new Error(`GET /v1/jobs/${id}: ${last.status} ${last.text}`);
        if (['completed', 'failed', 'cancelled'].includes(last.body.status)) return last.body;
      }
      throw new Error(`job ${id} is not finished after ${rounds} long polls: ${last?.text}`);
    },
    async waitForStatus(id, status) {
      let found: any;
      const stream = followJobEvents(url, id, (job) => {
        if (found !== undefined || job.status !== status) return;
        found = job;
        stream.stop();
      });
      const shown = await stream.ended;
      if (found === undefined) {
        throw new Error(`job ${id} never showed ${status}; it went ${shown.map((job) => job.status).join(' → ')}`);
      }
      return found;
    },
    async waitForClaimed(type, n) {
      const series = `kiln_task_claimed{type="${type}"} ${n}`;
      await pollUntil(
        async () => (await request('GET', '/metrics')).text,
        (text) => text.split('\n').includes(series),
        { what: `${n} claimed attempts of ${type}` },
      );
    },
    async waitForProgress(id) {
      let found: any;
      const stream = followJobEvents(url, id, (job) => {
        if (found !== undefined || job.progress === null) return;
        found = job;
        stream.stop();
      });
      const shown = await stream.ended;
      if (found === undefined) {
        throw new Error(`job ${id} never reported progress; it went ${shown.map((job) => job.status).join(' → ')}`);
      }
      return found;
    },
  };
}

/** SIGKILLs every Kiln this module started that still runs, and waits for each to exit. */
export async function killAllKilns(): Promise<void> {
  const exits: Promise<unknown>[] = [];
  for (const child of live) {
    if (child.exitCode !== null || child.signalCode !== null) continue;
    exits.push(once(child, 'exit'));
    child.kill('SIGKILL');
  }
  await Promise.all(exits);
}

/** Runs `work` over `items` with at most `limit` at once; answers the results in order. */
export async function mapLimit<T, R>(items: readonly T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await work(items[index] as T);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return results;
}
