import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { inheritedEnv } from './kiln-process.js';
import { repoRoot } from './paths.js';

/**
 * The `kiln` command as a user runs it: the file package.json names as its "bin", run
 * by node in a child process, configured only by the environment a test gives it.
 */

const packageJson = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { bin: { kiln: string } };
export const cliScript = join(repoRoot, packageJson.bin.kiln);

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface CliOptions {
  env?: Record<string, string>;
  /** Written to the command's stdin, which is then closed. */
  input?: string;
}

/** The environment of a `kiln` child: the test's own without KILN_*, plus `env`. */
export function cliEnv(env: Record<string, string> = {}): Record<string, string> {
  return { ...inheritedEnv(), ...env };
}

export function runKiln(args: string[], options: CliOptions = {}): Promise<CliRun> {
  const child = spawn(process.execPath, [cliScript, ...args], {
    cwd: repoRoot,
    env: cliEnv(options.env),
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const run = collect(child);
  child.stdin?.end(options.input ?? '');
  return run;
}

/** Everything a child writes, and its exit code once it has exited. */
export function collect(child: ChildProcess): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/**
 * Watches what a child writes on stdout: `until(test)` settles once the output so far
 * passes `test`, and fails if the child exits first.
 */
export function watchOutput(child: ChildProcess): {
  text(): string;
  until(test: (text: string) => boolean): Promise<void>;
  /** The first match of `pattern` in the output (as `view` shows it) once there is one. */
  match(pattern: RegExp, view?: (text: string) => string): Promise<RegExpExecArray>;
} {
  let text = '';
  let closed = false;
  const waiters: Array<{ test: (text: string) => boolean; resolve: () => void; reject: (error: Error) => void }> = [];
  const check = () => {
    for (const waiter of [...waiters]) {
      if (waiter.test(text)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve();
      }
    }
  };
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    text += chunk;
    check();
  });
  child.once('close', () => {
    closed = true;
    for (const waiter of waiters.splice(0)) {
      waiter.reject(new Error(`the command exited before the expected output; it wrote: ${JSON.stringify(text)}`));
    }
  });
  const until = (test: (text: string) => boolean): Promise<void> => {
    if (test(text)) return Promise.resolve();
    if (closed) return Promise.reject(new Error(`the command has exited; it wrote: ${JSON.stringify(text)}`));
    return new Promise((resolve, reject) => waiters.push({ test, resolve, reject }));
  };
  return {
    text: () => text,
    until,
    async match(pattern, view = (whole) => whole) {
      // Each look searches the whole output from its start, whatever flags the pattern has.
      const fresh = new RegExp(pattern.source, pattern.flags.replace(/[gy]/g, ''));
      let found: RegExpExecArray | null = null;
      await until((whole) => (found = fresh.exec(view(whole))) !== null);
      return found as unknown as RegExpExecArray;
    },
  };
}
