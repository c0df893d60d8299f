import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, it } from 'node:test';
import { collect } from '../support/cli.js';
import { inheritedEnv } from '../support/kiln-process.js';
import { repoRoot } from '../support/paths.js';

/**
 * Kiln as a team adopts it: `npm pack`, then, in an empty project, `npm install <tarball>`, a
 * task in TypeScript beside the project's own code, `npx kiln serve` on that tasks directory,
 * and a job submitted and read back through `kiln-queue/client` by a script of the project,
 * type-checked against the types that come with the package.
 */

const packageJson = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as {
  name: string;
  version: string;
};

/** Runs npm, npx or node with this process's Node.js first on PATH; rejects on a non-zero exit. */
async function run(command: string, args: string[], cwd: string, env: Record<string, string> = {}): Promise<string> {
  const child = spawn(command, args, { cwd, env: { ...projectEnv(), ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const result = await collect(child);
  assert.equal(result.code, 0, `${command} ${args.join(' ')} in ${cwd}:\n${result.stdout}\n${result.stderr}`);
  return result.stdout;
}

function projectEnv(): Record<string, string> {
  const env = inheritedEnv();
  // `npm test` exports its own package's settings (npm_package_*, npm_lifecycle_*); the project is another package.
  for (const key of Object.keys(env)) if (/^npm_(package|lifecycle)_/.test(key)) delete env[key];
  return { ...env, PATH: [dirname(process.execPath), env.PATH ?? ''].join(delimiter) };
}

interface PackResult {
  filename: string;
  size: number;
  unpackedSize: number;
  entryCount: number;
  files: { path: string }[];
}

const TASK = `// A task of the project, in TypeScript, loaded by Kiln as it is.
import { defineTask, NonRetryableError } from '${packageJson.name}';
import { z } from 'zod';
import { title } from '../src/title.ts';

export default defineTask({
  name: 'project.title',
  schema: z.object({ text: z.string(), suffix: z.string().default('!') }).strict(),
  handler(payload, ctx) {
    // @ts-expect-error the schema has no field "missing": the package's types reach the handler
    void payload.missing;
    if (payload.text === '') throw new NonRetryableError('empty text');
    ctx.progress(100);
    return { title: title(payload.text) + payload.suffix, attempt: ctx.attempt };
  },
});
`;

const TITLE = `export function title(text: string): string {
  return text.replace(/\\b\\p{L}/gu, (letter: string) => letter.toUpperCase());
}
`;

const SUBMIT = `// A script of the project: submits a job and reads its result back.
import { KilnClient, KilnError, type Job } from '${packageJson.name}/client';

const kiln = new KilnClient({ url: process.argv[2] ?? 'http://127.0.0.1:3000' });
const job: Job = await kiln.submit({ type: 'project.title', payload: { text: 'kiln from a tarball' } });
const done = await kiln.wait(job.id, { timeoutMs: 60_000 });
try {
  await kiln.submit({ type: 'project.title', payload: { text: 1 } });
} catch (error) {
  if (!(error instanceof KilnError)) throw error;
  console.log(JSON.stringify({ refused: error.code }));
}
console.log(JSON.stringify({ status: done.status, result: done.result }));
`;

const TSCONFIG = {
  compilerOptions: {
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    lib: ['ES2023', 'DOM'],
    // Node.js's types, from this repository's @types/node (the project would install its own).
    typeRoots: [join(repoRoot, 'node_modules', '@types')],
    types: ['node'],
    strict: true,
    noEmit: true,
    allowImportingTsExtensions: true,
    erasableSyntaxOnly: true,
    skipLibCheck: true,
  },
  include: ['tasks', 'src', 'scripts'],
};

describe('the npm package, installed in an empty project', { timeout: 900_000 }, () => {
  let work: string;
  let project: string;
  let pack: PackResult;
  let server: ChildProcess | undefined;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'kiln-package-'));
    project = join(work, 'project');
    // dist/ is built by `npm test` before the tests run; --ignore-scripts skips prepack's second build.
    const out = await run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], repoRoot);
    pack = (JSON.parse(out) as PackResult[])[0]!;
  });
  after(() => {
    // npx runs kiln in a process group of its own: end the group.
    if (server?.pid !== undefined && server.exitCode === null) process.kill(-server.pid, 'SIGKILL');
    rmSync(work, { recursive: true, force: true });
  });

  it('packs dist/src and what it needs at run time, nothing of test/, bench/ or the sources', (t) => {
    t.diagnostic(
      `${pack.filename}: ${(pack.size / 1024).toFixed(0)} KiB packed, ` +
        `${(pack.unpackedSize / 1024).toFixed(0)} KiB unpacked, ${pack.entryCount} files`,
    );
    const paths = pack.files.map((file) => file.path);
    assert.equal(pack.entryCount, paths.length);
    const outside = paths.filter((path) => !path.startsWith('dist/src/'));
    assert.deepEqual(outside.sort(), ['README.md', 'package.json']);
    assert.deepEqual(
      paths.filter((path) => /^(test|bench|src|docs|dist\/test)\//.test(path) || path.endsWith('.map')),
      [],
    );
    for (const needed of [
      'dist/src/index.js',
      'dist/src/index.d.ts',
      'dist/src/client/index.js',
      'dist/src/client/index.d.ts',
      'dist/src/cli/main.js',
      'dist/src/main.js',
      'dist/src/workers/thread.js',
      'dist/src/store/sqlite/thread.js',
      'dist/src/ui/main.js',
      'dist/src/ui/static/style.css',
    ]) {
      assert.ok(paths.includes(needed), `the tarball holds ${needed}`);
    }
  });

  it('installs, serves a TypeScript task with npx kiln serve and answers a script through its client', async (t) => {
    mkdirSync(join(project, 'tasks'), { recursive: true });
    mkdirSync(join(project, 'src'));
    mkdirSync(join(project, 'scripts'));
    writeFileSync(
      join(project, 'package.json'),
      `${JSON.stringify(
        // No install script needs allowing: better-sqlite3 13 brings its Node-API binary in its package.
        { name: 'project', private: true, type: 'module' },
        null,
        2,
      )}\n`,
    );
    writeFileSync(join(project, 'tasks', 'title.ts'), TASK);
    writeFileSync(join(project, 'src', 'title.ts'), TITLE);
    writeFileSync(join(project, 'scripts', 'submit.ts'), SUBMIT);
    writeFileSync(join(project, 'tsconfig.json'), `${JSON.stringify(TSCONFIG, null, 2)}\n`);

    await run('npm', ['install', '--no-audit', '--no-fund', join(work, pack.filename), 'zod@^4'], project);
    const installed = JSON.parse(
      readFileSync(join(project, 'node_modules', packageJson.name, 'package.json'), 'utf8'),
    ) as { version: string };
    assert.equal(installed.version, packageJson.version);

    // The package's types: the task's payload and the client's answers type-check (tsc of this repository).
    await run(process.execPath, [join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', project], project);

    server = spawn('npx', ['--no-install', 'kiln', 'serve'], {
      cwd: project,
      env: {
        ...projectEnv(),
        PORT: '0',
        HOST: '127.0.0.1',
        KILN_STORE: `sqlite:${join(project, 'data', 'kiln.db')}`,
        KILN_TASKS_DIR: 'tasks',
        KILN_THREADS: '2',
        LOG_FORMAT: 'json',
        LOG_LEVEL: 'info',
      },
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    server.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const messages: string[] = [];
    const log = createInterface({ input: server.stdout! });
    const url = await new Promise<string>((resolve, reject) => {
      log.on('line', (line) => {
        try {
          const entry = JSON.parse(line) as { msg?: string; address?: string };
          messages.push(String(entry.msg));
          if (entry.msg === 'kiln is serving' && entry.address !== undefined) resolve(entry.address);
        } catch {
          // not a log line
        }
      });
      server!.once('exit', (code) => reject(new Error(`npx kiln serve exited (${code}) before serving:\n${stderr}`)));
    });
    t.diagnostic(`npx kiln serve: ${url}`);

    const out = await run(process.execPath, [join('scripts', 'submit.ts'), url], project);
    const lines = out
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as unknown);
    assert.deepEqual(lines, [
      { refused: 'validation_error' },
      { status: 'completed', result: { title: 'Kiln From A Tarball!', attempt: 1 } },
    ]);

    // The bin's other commands reach the same server.
    const tasks = await run('npx', ['--no-install', 'kiln', 'tasks', '--json', '--url', url], project);
    assert.match(tasks, /"name":\s*"project\.title"/);

    // SIGTERM to the group, as a terminal's Ctrl-C or a container stop reaches npx and kiln: kiln
    // drains and logs that it stopped before its output (which npx hands it) closes.
    const closed = once(log, 'close');
    process.kill(-server.pid!, 'SIGTERM');
    await closed;
    assert.equal(messages.at(-1), 'stopped', stderr);
  });
});
