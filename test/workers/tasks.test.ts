import assert from 'node:assert/strict';
import { createHash, pbkdf2Sync, scryptSync } from 'node:crypto';
import { describe, test } from 'node:test';
import { brotliCompressSync, constants, gunzipSync, gzipSync } from 'node:zlib';
import { NonRetryableError, type TaskContext, type TaskDefinition } from '../../src/workers/task.js';
import brotli from '../../src/workers/tasks/compress.brotli.js';
import gunzip from '../../src/workers/tasks/compress.gunzip.js';
import gzip from '../../src/workers/tasks/compress.gzip.js';
import unbrotli from '../../src/workers/tasks/compress.unbrotli.js';
import spin from '../../src/workers/tasks/cpu.spin.js';
import pbkdf2 from '../../src/workers/tasks/hash.pbkdf2.js';
import scrypt from '../../src/workers/tasks/hash.scrypt.js';
import sha256 from '../../src/workers/tasks/hash.sha256.js';
import primes from '../../src/workers/tasks/math.primes.js';
import noop from '../../src/workers/tasks/noop.js';

/** Calls a task the way the thread does: the payload through its schema, then the handler with a real context. */
async function call<P, R>(task: TaskDefinition<P, R>, payload: unknown, progress: number[] = []): Promise<R> {
  assert.ok(task.schema);
  const parsed = await task.schema['~standard'].validate(payload);
  if (parsed.issues !== undefined) assert.fail(`payload rejected: ${parsed.issues.map((i) => i.message).join('; ')}`);
  const ctx: TaskContext = {
    jobId: 'job-1',
    attempt: 1,
    signal: new AbortController().signal,
    progress: (percent) => progress.push(percent),
    snooze: () => assert.fail('a built-in task never snoozes'),
    parents: [],
    traceparent: null,
    tracestate: null,
  };
  return task.handler(parsed.value, ctx);
}

async function rejects<P, R>(task: TaskDefinition<P, R>, payload: unknown): Promise<void> {
  assert.ok(task.schema);
  const parsed = await task.schema['~standard'].validate(payload);
  assert.ok(
    parsed.issues !== undefined && parsed.issues.length > 0,
    `${task.name} accepted ${JSON.stringify(payload)}`,
  );
}

async function failsForGood<P, R>(task: TaskDefinition<P, R>, payload: unknown, message: RegExp): Promise<void> {
  await assert.rejects(
    async () => call(task, payload),
    (err: unknown) => {
      assert.ok(err instanceof NonRetryableError, String(err));
      assert.equal(err.retryable, false);
      assert.match(err.message, message);
      return true;
    },
  );
}

describe('hash.pbkdf2', () => {
  test('matches node:crypto with a given salt', async () => {
    const salt = Buffer.from('0123456789abcdef').toString('base64');
    const result = await call(pbkdf2, { password: 'hunter2', salt, iterations: 1000, digest: 'sha512' });
    assert.deepEqual(result, {
      hash: pbkdf2Sync('hunter2', Buffer.from(salt, 'base64'), 1000, 32, 'sha512').toString('hex'),
      salt,
      saltEncoding: 'base64',
      iterations: 1000,
      keyLength: 32,
      digest: 'sha512',
    });
  });

  test('generates a 16-byte salt when none is given, and returns it', async () => {
    const result = await call(pbkdf2, { password: 'pw', iterations: 10, keyLength: 64, output: 'base64' });
    assert.equal(Buffer.from(result.salt, 'base64').length, 16);
    assert.equal(
      result.hash,
      pbkdf2Sync('pw', Buffer.from(result.salt, 'base64'), 10, 64, 'sha256').toString('base64'),
    );
    const again = await call(pbkdf2, { password: 'pw', iterations: 10, keyLength: 64, output: 'base64' });
    assert.notEqual(again.salt, result.salt);
  });

  test('takes a UTF-8 salt when told so', async () => {
    const result = await call(pbkdf2, { password: 'pw', salt: 'pepper & salt', saltEncoding: 'utf8', iterations: 5 });
    assert.equal(result.hash, pbkdf2Sync('pw', 'pepper & salt', 5, 32, 'sha256').toString('hex'));
  });

  test('a salt that is not base64 fails for good', async () => {
    await failsForGood(pbkdf2, { password: 'pw', salt: 'not base64!', iterations: 1 }, /salt is not valid base64/);
  });

  test('rejects out-of-bound payloads', async () => {
    await rejects(pbkdf2, {});
    await rejects(pbkdf2, { password: 'x', iterations: 0 });
    await rejects(pbkdf2, { password: 'x', iterations: 10_000_001 });
    await rejects(pbkdf2, { password: 'x', iterations: 1.5 });
    await rejects(pbkdf2, { password: 'x'.repeat(1025) });
    await rejects(pbkdf2, { password: 'x', keyLength: 257 });
    await rejects(pbkdf2, { password: 'x', digest: 'md5' });
    await rejects(pbkdf2, { password: 'x', extra: 1 });
  });
});

describe('hash.scrypt', () => {
  test('matches node:crypto', async () => {
    const salt = Buffer.from('some salt bytes!').toString('base64');
    const result = await call(scrypt, { password: 'hunter2', salt, cost: 1024, blockSize: 8, parallelization: 2 });
    assert.deepEqual(result, {
      hash: scryptSync('hunter2', Buffer.from(salt, 'base64'), 64, { N: 1024, r: 8, p: 2 }).toString('hex'),
      salt,
      saltEncoding: 'base64',
      N: 1024,
      r: 8,
      p: 2,
      keyLength: 64,
    });
  });

  test('runs with its defaults (N = 16384, r = 8, p = 1) and a generated salt', async () => {
    const result = await call(scrypt, { password: 'pw' });
    assert.equal(result.N, 16_384);
    assert.equal(
      result.hash,
      scryptSync('pw', Buffer.from(result.salt, 'base64'), 64, { N: 16_384, r: 8, p: 1 }).toString('hex'),
    );
  });

  test('rejects out-of-bound payloads', async () => {
    await rejects(scrypt, { password: 'x', cost: 1000 });
    await rejects(scrypt, { password: 'x', cost: 1 });
    await rejects(scrypt, { password: 'x', cost: 2 ** 21 });
    await rejects(scrypt, { password: 'x', blockSize: 33 });
    await rejects(scrypt, { password: 'x', parallelization: 17 });
    await rejects(scrypt, { password: 'x', cost: 2 ** 20, blockSize: 16 });
  });
});

describe('hash.sha256', () => {
  test('hashes UTF-8 and base64 data', async () => {
    const abc = 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad';
    assert.deepEqual(await call(sha256, { data: 'abc' }), { digest: abc, rounds: 1 });
    assert.deepEqual(await call(sha256, { data: 'YWJj', encoding: 'base64' }), { digest: abc, rounds: 1 });
  });

  test('re-hashes the digest for each further round and reports progress', async () => {
    let digest = createHash('sha256').update('abc').digest();
    for (let i = 1; i < 1000; i++) digest = createHash('sha256').update(digest).digest();
    const progress: number[] = [];
    assert.deepEqual(await call(sha256, { data: 'abc', rounds: 1000 }, progress), {
      digest: digest.toString('hex'),
      rounds: 1000,
    });
    assert.deepEqual(progress, [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]);
  });

  test('bad base64 fails for good', async () => {
    await failsForGood(sha256, { data: 'a', encoding: 'base64' }, /data is not valid base64/);
  });

  test('rejects out-of-bound payloads', async () => {
    await rejects(sha256, { data: 'x', rounds: 0 });
    await rejects(sha256, { data: 'x', rounds: 10_000_001 });
    await rejects(sha256, { data: 'x', encoding: 'hex' });
    await rejects(sha256, { data: 'x'.repeat(10 * 1024 * 1024 + 1) });
  });
});

describe('compress.*', () => {
  const text = 'Kiln fires jobs. '.repeat(1000);

  test('gzip then gunzip gives the data back', async () => {
    const packed = await call(gzip, { data: text, level: 9 });
    assert.equal(packed.inputBytes, text.length);
    assert.ok(packed.outputBytes < text.length / 10);
    assert.equal(gunzipSync(Buffer.from(packed.data, 'base64')).toString('utf8'), text);
    assert.deepEqual(await call(gunzip, { data: packed.data, output: 'utf8' }), {
      data: text,
      inputBytes: packed.outputBytes,
      outputBytes: text.length,
    });
    const bytes = Buffer.from([0, 255, 1, 254]);
    const binary = await call(gzip, { data: bytes.toString('base64'), encoding: 'base64', level: 0 });
    assert.equal((await call(gunzip, { data: binary.data })).data, bytes.toString('base64'));
  });

  test('brotli then unbrotli gives the data back', async () => {
    const packed = await call(brotli, { data: text, quality: 5 });
    assert.ok(packed.outputBytes < text.length / 10);
    assert.equal((await call(unbrotli, { data: packed.data, output: 'utf8' })).data, text);
  });

  test('a zip bomb hits the output cap and fails for good', async () => {
    const bomb = Buffer.alloc(65 * 1024 * 1024);
    await failsForGood(
      gunzip,
      { data: gzipSync(bomb, { level: 1 }).toString('base64') },
      /decompresses to more than 67108864 bytes/,
    );
    const brotliBomb = brotliCompressSync(bomb, { params: { [constants.BROTLI_PARAM_QUALITY]: 1 } }).toString('base64');
    await failsForGood(unbrotli, { data: brotliBomb }, /decompresses to more than 67108864 bytes/);
  });

  test('corrupt input fails for good', async () => {
    await failsForGood(gunzip, { data: Buffer.from('not gzip at all').toString('base64') }, /not valid gzip/);
    await failsForGood(unbrotli, { data: Buffer.from('not brotli at all').toString('base64') }, /not valid Brotli/);
    await failsForGood(gunzip, { data: '%%%' }, /not valid base64/);
  });

  test('rejects out-of-bound payloads', async () => {
    await rejects(gzip, { data: 'x', level: 10 });
    await rejects(gzip, { data: 'x', level: -1 });
    await rejects(brotli, { data: 'x', quality: 12 });
    await rejects(gunzip, { data: 'x', output: 'hex' });
    await rejects(gunzip, { data: 'x', level: 1 });
    await rejects(unbrotli, {});
  });
});

describe('math.primes', () => {
  test('counts the primes up to the limit', async () => {
    assert.deepEqual(await call(primes, { limit: 2 }), { limit: 2, count: 1, largest: 2 });
    assert.deepEqual(await call(primes, { limit: 3 }), { limit: 3, count: 2, largest: 3 });
    assert.deepEqual(await call(primes, { limit: 100 }), { limit: 100, count: 25, largest: 97 });
    assert.deepEqual(await call(primes, { limit: 1_000_000 }), { limit: 1_000_000, count: 78_498, largest: 999_983 });
  });

  test('reports progress every 10 % on a large limit', async () => {
    const progress: number[] = [];
    assert.deepEqual(await call(primes, { limit: 10_000_000 }, progress), {
      limit: 10_000_000,
      count: 664_579,
      largest: 9_999_991,
    });
    assert.deepEqual(progress, [10, 20, 30, 40, 50, 60, 70, 80, 90]);
  });

  test('rejects out-of-bound payloads', async () => {
    await rejects(primes, { limit: 1 });
    await rejects(primes, { limit: 100_000_001 });
    await rejects(primes, { limit: 10.5 });
    await rejects(primes, {});
  });
});

describe('noop and cpu.spin', () => {
  test('noop returns {ok: true} or echoes', async () => {
    assert.deepEqual(await call(noop, {}), { ok: true });
    assert.deepEqual(await call(noop, { echo: { a: [1, 'b', null] } }), { a: [1, 'b', null] });
    await rejects(noop, { other: 1 });
  });

  test('cpu.spin burns at least the given time on its thread', async () => {
    const result = await call(spin, { ms: 20 });
    assert.ok(result.spunMs >= 20, String(result.spunMs));
    assert.deepEqual(await call(spin, { ms: 0 }), { spunMs: 0 });
    await rejects(spin, { ms: 600_001 });
    await rejects(spin, { ms: -1 });
    await rejects(spin, {});
  });
});
