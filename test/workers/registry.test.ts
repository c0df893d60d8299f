import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { JOB_DEFAULTS } from '../../src/contract/job.js';
import { TaskLoadError } from '../../src/workers/errors.js';
import { loadTasks, validatePayload } from '../../src/workers/registry.js';

const BUILTINS = [
  'compress.brotli',
  'compress.gunzip',
  'compress.gzip',
  'compress.unbrotli',
  'cpu.spin',
  'hash.pbkdf2',
  'hash.scrypt',
  'hash.sha256',
  'math.primes',
  'noop',
];

let root: string;
let dirCount = 0;

before(async () => {
  root = await mkdtemp(join(tmpdir(), 'kiln-registry-'));
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});

/** A fresh tasks directory holding the given files. */
async function tasksDir(files: Record<string, string>): Promise<string> {
  dirCount += 1;
  const dir = join(root, `tasks-${dirCount}`);
  await mkdir(dir);
  for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
  return dir;
}

async function loadError(dir: string): Promise<TaskLoadError> {
  try {
    await loadTasks({ tasksDir: dir });
  } catch (err) {
    assert.ok(err instanceof TaskLoadError, `expected a TaskLoadError, got ${String(err)}`);
    assert.equal(err.code, 'task_load_error');
    return err;
  }
  assert.fail('expected loadTasks to fail');
}

const VALID = `export default {
  name: 'extra.double',
  description: 'doubles n',
  schema: {
    '~standard': {
      version: 1,
      vendor: 'handmade',
      validate: (value) =>
        typeof value?.n === 'number' ? { value: { n: value.n } } : { issues: [{ message: 'n must be a number', path: [{ key: 'n' }] }] },
    },
  },
  defaults: { maxAttempts: 5, timeoutMs: 1000 },
  handler: (payload) => payload.n * 2,
};
`;

describe('loadTasks', () => {
  test('loads the built-in tasks with descriptions, JSON schemas and resolved defaults', async () => {
    const registry = await loadTasks({});
    assert.deepEqual(
      registry.list().map((task) => task.name),
      BUILTINS,
    );
    for (const task of registry.list()) {
      assert.notEqual(task.description, '', task.name);
      assert.equal(task.payloadJsonSchema.type, 'object', task.name);
      assert.equal(task.payloadJsonSchema.additionalProperties, false, task.name);
      assert.ok(task.schema !== null);
      assert.match(task.moduleUrl, /^file:.*\.(js|ts)$/);
      assert.equal(registry.modules()[task.name], task.moduleUrl);
    }
    const pbkdf2 = registry.get('hash.pbkdf2');
    assert.ok(pbkdf2);
    assert.deepEqual(pbkdf2.defaults, { ...JOB_DEFAULTS, backoff: { ...JOB_DEFAULTS.backoff }, timeoutMs: 120_000 });
    assert.equal(pbkdf2.concurrency, null);
    assert.equal(pbkdf2.rateLimit, null);
    const properties = pbkdf2.payloadJsonSchema.properties as Record<string, { default?: unknown }>;
    assert.equal(properties.iterations?.default, 600_000);
    assert.equal(registry.get('no.such.task'), undefined);
  });

  test('adds the .js and .mjs modules of a tasks directory, ignoring other files and subdirectories', async () => {
    const dir = await tasksDir({
      'double.mjs': VALID,
      'plain.js': `export default { name: 'extra.plain', handler() { return 1; } };\n`,
      'README.md': 'not a task',
      'helper.cjs': 'throw new Error("must not be loaded")',
    });
    await mkdir(join(dir, 'nested'));
    await writeFile(join(dir, 'nested', 'deep.mjs'), 'throw new Error("must not be loaded")');
    const registry = await loadTasks({ tasksDir: dir });
    assert.deepEqual(
      registry.list().map((task) => task.name),
      [...BUILTINS, 'extra.double', 'extra.plain'].sort(),
    );
    const double = registry.get('extra.double');
    assert.ok(double);
    assert.equal(double.description, 'doubles n');
    assert.deepEqual(double.payloadJsonSchema, {});
    assert.deepEqual(double.defaults, {
      priority: 5,
      maxAttempts: 5,
      timeoutMs: 1000,
      backoff: JOB_DEFAULTS.backoff,
    });
    assert.equal(fileURLToPath(double.moduleUrl), join(dir, 'double.mjs'));
    const plain = registry.get('extra.plain');
    assert.ok(plain);
    assert.equal(plain.description, '');
    assert.equal(plain.schema, null);
    assert.deepEqual(plain.payloadJsonSchema, {});
  });

  test('keeps concurrency, rateLimit and a whole backoff from the module', async () => {
    const registry = await loadTasks({
      tasksDir: fileURLToPath(new URL('../../../test/fixtures/tasks/', import.meta.url)),
    });
    const task = registry.get('fixture.context');
    assert.ok(task);
    assert.equal(task.concurrency, 2);
    assert.deepEqual(task.rateLimit, { max: 5, perMs: 1000 });
    assert.deepEqual(task.defaults, {
      priority: 7,
      maxAttempts: 3,
      timeoutMs: 60_000,
      backoff: { initialMs: 10, factor: 1, maxMs: 10, jitter: 'none' },
    });
  });

  test('a name clash with a built-in names both files', async () => {
    const dir = await tasksDir({ 'mine.mjs': `export default { name: 'hash.sha256', handler() {} };\n` });
    const err = await loadError(dir);
    assert.equal(err.file, join(dir, 'mine.mjs'));
    assert.match(err.message, /^task "hash\.sha256" in .*mine\.mjs is already defined by .*hash\.sha256\.(js|ts)$/);
  });

  test('a name clash between two files names the later one', async () => {
    const module = `export default { name: 'dup', handler() {} };\n`;
    const dir = await tasksDir({ 'a.mjs': module, 'b.js': module });
    const err = await loadError(dir);
    assert.equal(err.message, `task "dup" in ${join(dir, 'b.js')} is already defined by ${join(dir, 'a.mjs')}`);
  });

  const malformed: [string, string, string][] = [
    [
      'a priority out of range',
      `export default { name: 'x', defaults: { priority: 12 }, handler() {} };`,
      '"defaults.priority" must be an integer from 0 to 9, got 12',
    ],
    ['no handler', `export default { name: 'x' };`, '"handler" must be a function, got nothing'],
    [
      'a handler that is not a function',
      `export default { name: 'x', handler: 1 };`,
      '"handler" must be a function, got 1',
    ],
    [
      'a bad name',
      `export default { name: 'has space', handler() {} };`,
      `"name" must be 1 to 100 letters, digits, '.', '_' or '-', got "has space"`,
    ],
    ['an unknown key', `export default { name: 'x', handler() {}, retries: 3 };`, 'unknown key "retries"'],
    [
      'an unknown key in defaults',
      `export default { name: 'x', handler() {}, defaults: { attempts: 3 } };`,
      'unknown key "defaults.attempts"',
    ],
    [
      'a schema that is not a Standard Schema',
      `export default { name: 'x', schema: { type: 'object' }, handler() {} };`,
      '"schema" must be a Standard Schema',
    ],
    [
      'a backoff whose maxMs is below initialMs',
      `export default { name: 'x', defaults: { backoff: { initialMs: 100, factor: 2, maxMs: 10, jitter: 'full' } }, handler() {} };`,
      '"defaults.backoff.maxMs" must be a number >= initialMs, got 10',
    ],
    [
      'a bad jitter',
      `export default { name: 'x', defaults: { backoff: { initialMs: 1, factor: 2, maxMs: 10, jitter: 'some' } }, handler() {} };`,
      '"defaults.backoff.jitter" must be one of "full", "equal", "none", got "some"',
    ],
    [
      'a zero concurrency',
      `export default { name: 'x', concurrency: 0, handler() {} };`,
      '"concurrency" must be an integer >= 1, got 0',
    ],
    [
      'a rate limit without perMs',
      `export default { name: 'x', rateLimit: { max: 1 }, handler() {} };`,
      '"rateLimit.perMs" must be an integer >= 1, got nothing',
    ],
    ['no default export', `export const task = { name: 'x', handler() {} };`, 'has no default export'],
    [
      'a default export that is a function',
      `export default function handler() {}`,
      'the default export must be a task definition object, got a function',
    ],
  ];
  for (const [what, text, expected] of malformed) {
    test(`a module with ${what} fails with the file and the reason`, async () => {
      const dir = await tasksDir({ 'bad.mjs': text });
      const err = await loadError(dir);
      const file = join(dir, 'bad.mjs');
      assert.equal(err.file, file);
      assert.ok(err.message.startsWith(`task module ${file}: `), err.message);
      assert.ok(err.message.includes(expected), `${err.message}\n  should include\n${expected}`);
    });
  }

  test('a module that throws on import fails with the file and the error', async () => {
    const dir = await tasksDir({ 'explodes.mjs': `throw new Error('kaboom');\n` });
    const err = await loadError(dir);
    assert.equal(err.message, `task module ${join(dir, 'explodes.mjs')}: import failed: kaboom`);
  });

  test('a module with a syntax error fails with the file', async () => {
    const dir = await tasksDir({ 'broken.js': `export default { name: 'x', handler() { ;\n` });
    const err = await loadError(dir);
    assert.ok(err.message.startsWith(`task module ${join(dir, 'broken.js')}: import failed: `), err.message);
  });

  test('a tasks directory that does not exist fails with its path', async () => {
    const missing = join(root, 'missing');
    const err = await loadError(missing);
    assert.equal(err.file, missing);
    assert.match(err.message, /^tasks directory .*missing: cannot be read/);
  });
});

describe('validatePayload', () => {
  test('returns the parsed value with defaults applied', async () => {
    const registry = await loadTasks({});
    const task = registry.get('hash.pbkdf2');
    assert.ok(task);
    const outcome = await validatePayload(task, { password: 'hunter2' });
    assert.ok(outcome.ok);
    assert.deepEqual(outcome.value, {
      password: 'hunter2',
      saltEncoding: 'base64',
      iterations: 600_000,
      keyLength: 32,
      digest: 'sha256',
      output: 'hex',
    });
  });

  test('reports each issue with a dotted path', async () => {
    const registry = await loadTasks({});
    const task = registry.get('hash.pbkdf2');
    assert.ok(task);
    const outcome = await validatePayload(task, { password: 'x', iterations: 10_000_001, digest: 'md5' });
    assert.ok(!outcome.ok);
    assert.deepEqual(
      outcome.issues.map((issue) => issue.path),
      ['iterations', 'digest'],
    );
    for (const issue of outcome.issues) assert.notEqual(issue.message, '');
  });

  test('uses a non-zod Standard Schema, and accepts anything without a schema', async () => {
    const registry = await loadTasks({
      tasksDir: await tasksDir({
        'double.mjs': VALID,
        'plain.mjs': `export default { name: 'extra.plain', handler() {} };`,
      }),
    });
    const double = registry.get('extra.double');
    const plain = registry.get('extra.plain');
    assert.ok(double && plain);
    assert.deepEqual(await validatePayload(double, { n: 2, dropped: true }), { ok: true, value: { n: 2 } });
    assert.deepEqual(await validatePayload(double, { n: 'two' }), {
      ok: false,
      issues: [{ path: 'n', message: 'n must be a number' }],
    });
    const anything = { deep: [1, { x: null }] };
    assert.deepEqual(await validatePayload(plain, anything), { ok: true, value: anything });
  });
});
