/**
 * Child processes of a benchmark: the Kiln server, the raw baselines and the load
 * generators. Every child is tracked and killed when the benchmark ends, also on an
 * error or a signal; every wait is bounded.
 */
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const BENCH_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const ROOT_DIR = resolve(BENCH_DIR, '..');
export const KILN_MAIN = join(ROOT_DIR, 'dist', 'src', 'main.js');

// A Node global that not every linter configuration knows.
const { AbortSignal } = globalThis;
const children = new Set();

/** Kills every child still alive (SIGKILL: a benchmark's children hold nothing worth a graceful stop). */
export function killAllChildren() {
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
  children.clear();
}

process.on('exit', killAllChildren);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    killAllChildren();
    process.exit(130);
  });
}

let tasksetChecked = null;

/** Whether `taskset` exists and works here (it is Linux-only). */
export function hasTaskset() {
  if (tasksetChecked === null) {
    const probe = spawnSync('taskset', ['-c', '0', 'true'], { stdio: 'ignore' });
    tasksetChecked = probe.status === 0;
  }
  return tasksetChecked;
}

/**
 * The CPU lists to pin the load generator and the server to, when pinning is asked
 * for: the load generator gets core 0, the server the rest. Null when there are fewer
 * than 2 cores or no taskset, in which case nothing is pinned.
 */
export function pinning() {
  const cores = availableParallelism();
  if (cores < 2 || !hasTaskset()) return null;
  return { load: '0', server: cores === 2 ? '1' : `1-${cores - 1}` };
}

/** Spawns `node <nodeArgs> <script> <args>`, pinned to `cpus` when given and taskset exists. */
export function spawnNode(script, args = [], options = {}) {
  const { cpus = null, env = {}, nodeArgs = [], stdio = ['ignore', 'pipe', 'pipe'], cwd = ROOT_DIR } = options;
  const command = [process.execPath, ...nodeArgs, script, ...args];
  const [file, ...argv] = cpus !== null && hasTaskset() ? ['taskset', '-c', cpus, ...command] : command;
  const child = spawn(file, argv, { cwd, env: { ...process.env, ...env }, stdio });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

/** Resolves with the child's exit once it has exited, or kills it after `timeoutMs`. */
function waitForExit(child, timeoutMs) {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  }
  return new Promise((resolveExit) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      resolveExit({ code, signal });
    });
  });
}

/**
 * Runs a child script that prints one JSON document as the last line of its stdout and
 * exits 0; answers that document. Rejects (with the child's stderr) on any other exit
 * or after `timeoutMs`.
 */
export async function runNodeJson(script, input, options = {}) {
  const { timeoutMs = 300_000, ...spawnOptions } = options;
  const child = spawnNode(script, [JSON.stringify(input)], spawnOptions);
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk) => {
    stdout += chunk;
  });
  child.stderr.setEncoding('utf8').on('data', (chunk) => {
    stderr = (stderr + chunk).slice(-8000);
  });
  const { code, signal } = await waitForExit(child, timeoutMs);
  const name = script.slice(BENCH_DIR.length + 1);
  if (code !== 0) {
    throw new Error(
      `${name} ${signal === 'SIGKILL' ? `was killed (timeout ${timeoutMs} ms?)` : `exited with ${code ?? signal}`}\n${stderr.trim()}`,
    );
  }
  const last = stdout.trim().split('\n').at(-1) ?? '';
  try {
    return JSON.parse(last);
  } catch {
    throw new Error(`${name} printed no JSON result; stdout ends with: ${last.slice(0, 500)}\n${stderr.trim()}`);
  }
}

/**
 * Reads JSON lines from a child's stdout, one at a time: answers `next(timeoutMs)`, which
 * resolves with the next line parsed, and rejects when the child has exited without one
 * or stays silent for `timeoutMs`. `name` is how errors call the child.
 */
export function jsonLines(child, name) {
  const waiting = [];
  const lines = [];
  let buffer = '';
  let ended = false;
  child.stdout.setEncoding('utf8').on('data', (chunk) => {
    buffer += chunk;
    let newline = buffer.indexOf('\n');
    while (newline >= 0) {
      const line = buffer.slice(0, newline).trim();
      buffer = buffer.slice(newline + 1);
      if (line !== '') {
        const waiter = waiting.shift();
        if (waiter === undefined) lines.push(line);
        else waiter.resolve(line);
      }
      newline = buffer.indexOf('\n');
    }
  });
  // 'close', not 'exit': the last lines may still be in the pipe when the child exits.
  child.once('close', (code, signal) => {
    ended = true;
    for (const waiter of waiting.splice(0)) waiter.reject(new Error(`${name} exited with ${code ?? signal}`));
  });
  return (timeoutMs) => {
    const line = lines.shift();
    if (line !== undefined) return Promise.resolve(JSON.parse(line));
    if (ended) return Promise.reject(new Error(`${name} has exited`));
    return new Promise((resolve, reject) => {
      const waiter = {
        resolve: (text) => {
          clearTimeout(timer);
          resolve(JSON.parse(text));
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      };
      const timer = setTimeout(() => {
        waiting.splice(waiting.indexOf(waiter), 1);
        reject(new Error(`${name} was silent for ${timeoutMs} ms`));
      }, timeoutMs);
      waiting.push(waiter);
    });
  };
}

/** A TCP port that was free on 127.0.0.1 a moment ago. */
export function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Polls `url` until it answers 200, the child exits, or `timeoutMs` passes.
 * Answers nothing; throws with the reason otherwise.
 */
async function waitUntilServing(child, url, timeoutMs, describe) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${describe()} exited with ${child.exitCode ?? child.signalCode} before serving`);
    }
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(1000) });
      await response.arrayBuffer();
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    await sleep(50);
  }
  throw new Error(`${describe()} did not serve ${url} within ${timeoutMs} ms`);
}

/**
 * Starts a Kiln server (`node dist/src/main.js`) on a free 127.0.0.1 port with its own
 * temp directory (SQLite file, log file, CPU profiles) and waits until /health answers.
 *
 * `store`: 'sqlite' (a temp file, KILN_SQLITE_SYNC=full unless env says otherwise),
 * 'memory', or 'postgres' (`pg: { url, schema }`: KILN_STORE=url, KILN_PG_SCHEMA=schema,
 * which the server creates or migrates at start; several servers may share one).
 * `cpuProf`: a directory to write a `node --cpu-prof` profile to at exit. `nodeArgs`:
 * more node options. `dir`: a directory of the caller's to keep the SQLite file and the
 * log in (a restart on the same file), which stop() leaves in place; `port`: the port to
 * listen on (default: a free one). `main`: the server's entry point (default this
 * checkout's; another commit's, built by lib/baseline-checkout.mjs).
 * Answers `{ url, pid, dir, child, stop() }`; stop() is SIGTERM (graceful, so a profile is
 * written), then SIGKILL after 15 s, and removes the temp directory.
 */
export async function startKiln(options = {}) {
  const {
    store = 'sqlite',
    env = {},
    cpus = null,
    cpuProf = null,
    threads = availableParallelism(),
    pg = null,
    nodeArgs: extraNodeArgs = [],
    dir: ownDir = null,
    port: fixedPort = null,
    main = KILN_MAIN,
  } = options;
  if (store === 'postgres' && pg === null) throw new Error('startKiln: the postgres store needs pg: { url, schema }');
  const dir = ownDir ?? mkdtempSync(join(tmpdir(), 'kiln-bench-'));
  const port = fixedPort ?? (await freePort());
  const logPath = join(dir, 'kiln.log');
  const log = openSync(logPath, 'a');
  const nodeArgs = [...(cpuProf === null ? [] : ['--cpu-prof', `--cpu-prof-dir=${cpuProf}`]), ...extraNodeArgs];
  const child = spawnNode(main, [], {
    cpus,
    nodeArgs,
    stdio: ['ignore', log, log],
    env: {
      PORT: String(port),
      HOST: '127.0.0.1',
      KILN_STORE: store === 'memory' ? 'memory' : store === 'postgres' ? pg.url : `sqlite:${join(dir, 'kiln.db')}`,
      ...(store === 'postgres' ? { KILN_PG_SCHEMA: pg.schema } : {}),
      KILN_THREADS: String(threads),
      KILN_SQLITE_SYNC: 'full',
      KILN_SHUTDOWN_GRACE_MS: '2000',
      // Per-request access logs would dominate the small-request figures; the raw baselines log nothing either.
      LOG_LEVEL: 'warn',
      ...env,
    },
  });
  closeSync(log);
  const url = `http://127.0.0.1:${port}`;
  const logTail = () => {
    try {
      return readFileSync(logPath, 'utf8').trim().split('\n').slice(-15).join('\n');
    } catch {
      return '';
    }
  };
  const cleanup = () => {
    if (ownDir === null) rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitUntilServing(child, `${url}/health`, 30_000, () => `the Kiln server (${store})`);
  } catch (error) {
    child.kill('SIGKILL');
    await waitForExit(child, 5000);
    const tail = logTail();
    cleanup();
    throw new Error(`${error.message}${tail === '' ? '' : `\nits log ends:\n${tail}`}`, { cause: error });
  }
  let stopped = null;
  return {
    url,
    pid: child.pid,
    dir,
    child,
    logTail,
    stop() {
      stopped ??= (async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
        await waitForExit(child, 15_000);
        cleanup();
      })();
      return stopped;
    },
  };
}

/**
 * Starts a child server script that listens on `port` and answers 200 on `readyPath`.
 * `nodeArgs`: given to node before the script (`--cpu-prof` to profile a baseline).
 */
export async function startServerScript(script, input, options = {}) {
  const { cpus = null, readyPath = '/health', nodeArgs = [] } = options;
  const port = await freePort();
  const child = spawnNode(script, [JSON.stringify({ ...input, port })], {
    cpus,
    nodeArgs,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk) => {
    stderr = (stderr + chunk).slice(-8000);
  });
  const url = `http://127.0.0.1:${port}`;
  const name = script.slice(BENCH_DIR.length + 1);
  try {
    await waitUntilServing(child, `${url}${readyPath}`, 20_000, () => name);
  } catch (error) {
    child.kill('SIGKILL');
    throw new Error(`${error.message}\n${stderr.trim()}`, { cause: error });
  }
  return {
    url,
    pid: child.pid,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await waitForExit(child, 5000);
    },
  };
}
