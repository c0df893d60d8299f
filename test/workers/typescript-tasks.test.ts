import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { z } from 'zod';
import { TaskLoadError } from '../../src/workers/errors.js';
import { loadTasks } from '../../src/workers/registry.js';
import { defineTask } from '../../src/workers/task.js';
import { collect } from '../support/cli.js';
import { inheritedEnv, mainScript } from '../support/kiln-process.js';
import { startServer } from '../support/kiln.js';
import { repoRoot, typescriptTasksDir } from '../support/paths.js';

/**
 * Task modules in TypeScript (test/fixtures/ts-tasks/): loaded as they are where Node.js strips
 * types, their own .ts imports included; refused at start, with the file and what to do, where
 * it cannot or when the module is TypeScript that stripping cannot run.
 */

let root: string;
let dirCount = 0;
before(async () => {
  root = await mkdtemp(join(tmpdir(), 'kiln-ts-tasks-'));
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});

async function tasksDir(files: Record<string, string>): Promise<string> {
  dirCount += 1;
  const dir = join(root, `tasks-${dirCount}`);
  await mkdir(join(dir, 'lib'), { recursive: true });
  for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
  return dir;
}

async function loadError(dir: string): Promise<TaskLoadError> {
  const err = await loadTasks({ tasksDir: dir }).then(
    () => assert.fail('expected loadTasks to fail'),
    (error: unknown) => error,
  );
  assert.ok(err instanceof TaskLoadError, `expected a TaskLoadError, got ${String(err)}`);
  return err;
}

describe('TypeScript task modules', () => {
  it('are loaded from .ts and .mts files as they are, .d.ts skipped', async () => {
    assert.ok(process.features.typescript, `Node.js ${process.version} strips types (engines: 22.18 or later)`);
    const registry = await loadTasks({ tasksDir: typescriptTasksDir });
    const names = registry.list().map((task) => task.name);
    assert.ok(names.includes('ts.words') && names.includes('ts.shout'), names.join(', '));
    const words = registry.get('ts.words');
    assert.ok(words);
    assert.equal(words.description, 'Counts the words of a text (a TypeScript task).');
    assert.match(words.moduleUrl, /\/ts-tasks\/words\.count\.ts$/);
    const properties = words.payloadJsonSchema.properties as Record<string, { default?: unknown }>;
    assert.equal(properties.top?.default, 2);
    assert.match(registry.get('ts.shout')?.moduleUrl ?? '', /\/ts-tasks\/shout\.mts$/);
  });

  it('run in the worker threads of a real server, with their imports of the project’s .ts files', async () => {
    const server = await startServer({ KILN_TASKS_DIR: typescriptTasksDir, KILN_THREADS: '2' });
    try {
      const words = await server.request('POST', '/v1/jobs', {
        type: 'ts.words',
        payload: { text: 'the cat and the hat' },
      });
      assert.equal(words.status, 201, words.text);
      assert.deepEqual(words.body.payload, { text: 'the cat and the hat', top: 2 });
      const shout = await server.request('POST', '/v1/jobs', { type: 'ts.shout', payload: { text: 'hi' } });
      assert.equal(shout.status, 201, shout.text);
      const doneWords = await server.waitForJob(words.body.id);
      assert.equal(doneWords.status, 'completed', JSON.stringify(doneWords.error));
      assert.deepEqual(doneWords.result, {
        words: 5,
        top: [
          { word: 'the', count: 2 },
          { word: 'and', count: 1 },
        ],
      });
      const doneShout = await server.waitForJob(shout.body.id);
      assert.equal(doneShout.status, 'completed', JSON.stringify(doneShout.error));
      assert.equal(doneShout.result, 'HI!');
      const blank = await server.request('POST', '/v1/jobs', { type: 'ts.words', payload: { text: ' ' } });
      const failed = await server.waitForJob(blank.body.id);
      assert.equal(failed.status, 'failed');
      assert.deepEqual(failed.error, {
        code: 'handler_error',
        message: 'NonRetryableError: text is blank',
        attempt: 1,
      });
    } finally {
      await server.close();
    }
  });

  it('refuses an enum, which Node.js cannot strip, naming the file and what to do', async () => {
    const dir = await tasksDir({
      'colors.ts': `enum Color { Red }\nexport default { name: 'x', handler: () => Color.Red };\n`,
    });
    const err = await loadError(dir);
    assert.equal(err.file, join(dir, 'colors.ts'));
    assert.ok(err.message.startsWith(`task module ${join(dir, 'colors.ts')}: import failed: `), err.message);
    assert.match(err.message, /enum/);
    assert.match(err.message, /write erasable TypeScript \(a const object instead of an enum/);
  });

  it('says to name a TypeScript import with its .ts extension when it was left out', async () => {
    const dir = await tasksDir({
      'uses.ts': `import { twice } from './lib/twice';\nexport default { name: 'x', handler: () => twice(2) };\n`,
      'lib/twice.ts': `export const twice = (n: number): number => n * 2;\n`,
    });
    const err = await loadError(dir);
    assert.equal(err.file, join(dir, 'uses.ts'));
    assert.match(err.message, /Cannot find module .*lib\/twice/);
    assert.match(err.message, /write '\.ts' at the end of the import/);
  });

  it('refuses .tsx and .cts files instead of ignoring them', async () => {
    for (const [name, reason] of [
      ['page.tsx', /JSX is not TypeScript that Node\.js can strip/],
      ['old.cts', /a \.cts file is CommonJS/],
    ] as const) {
      const dir = await tasksDir({ [name]: 'export default {};\n' });
      const err = await loadError(dir);
      assert.equal(err.file, join(dir, name));
      assert.ok(err.message.startsWith(`task module ${join(dir, name)}: `), err.message);
      assert.match(err.message, reason);
    }
  });

  it('stops the start with one line naming the file where Node.js does not strip types', async () => {
    // --no-experimental-strip-types stands for a Node.js that cannot strip them (20, or 22 before 22.18).
    const child = spawn(process.execPath, ['--no-experimental-strip-types', mainScript], {
      cwd: repoRoot,
      env: {
        ...inheritedEnv(),
        KILN_STORE: 'memory',
        KILN_THREADS: '1',
        PORT: '0',
        KILN_TASKS_DIR: typescriptTasksDir,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const run = await collect(child);
    assert.equal(run.code, 1, run.stderr);
    const lines = run.stderr.split('\n').filter((line) => line.trim() !== '');
    assert.deepEqual(lines, [
      `kiln: cannot start: task module ${join(typescriptTasksDir, 'shout.mts')}: Node.js ${process.version} ` +
        'cannot load TypeScript: run Kiln on Node.js 22.18 or later (24 is the LTS), where types are stripped as ' +
        'modules load, or compile the module to .js',
    ]);
  });
});

// Type-level: the build (tsc, strict) fails if defineTask stops typing the handler's payload
// as the schema's output.
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const typed = defineTask({
  name: 'typed',
  schema: z.object({ text: z.string(), times: z.number().int().default(1) }),
  handler(payload) {
    // @ts-expect-error the payload has no field the schema does not declare
    void payload.missing;
    return payload.text.repeat(payload.times);
  },
});
const payloadIsSchemaOutput: Equal<Parameters<typeof typed.handler>[0], { text: string; times: number }> = true;
const resultIsHandlerReturn: Equal<Awaited<ReturnType<typeof typed.handler>>, string> = true;
void [typed, payloadIsSchemaOutput, resultIsHandlerReturn];
