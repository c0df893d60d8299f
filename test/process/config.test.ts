import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, loadConfig } from '../../src/config.js';

describe('loadConfig', () => {
  it('has the documented defaults', () => {
    const config = loadConfig({});
    assert.equal(config.port, 3000);
    assert.equal(config.host, '127.0.0.1');
    assert.equal(config.store, 'sqlite:./data/kiln.db');
    assert.ok(config.threads >= 1);
    assert.equal(config.maxQueued, 100_000);
    assert.equal(config.threadMaxMemoryMb, 512);
    assert.equal(config.threadMaxJobs, null, 'threads are not recycled');
    assert.equal(config.maxResultBytes, 16 * 1024 * 1024);
    assert.equal(config.maxSnoozes, 100);
    assert.equal(config.sqliteSync, 'full');
    assert.equal(config.sqliteCacheMb, 8);
    assert.equal(config.tasksDir, null);
    assert.deepEqual(config.apiTokens, []);
    assert.equal(config.maxBodyBytes, 1_048_576);
    assert.equal(config.shutdownGraceMs, 30_000);
    assert.equal(config.leaseMs, 30_000);
    assert.equal(config.retainCompletedMs, 86_400_000);
    assert.equal(config.retainFailedMs, 7 * 86_400_000);
    assert.equal(config.callbackSecret, null);
    assert.equal(config.callbackTimeoutMs, 10_000);
    assert.equal(config.callbackMaxAttempts, 8);
    assert.equal(config.callbackAllowPrivate, false);
    assert.equal(config.logLevel, 'info');
    assert.equal(config.logFormat, 'auto');
    assert.deepEqual(loadConfig({ KILN_API_TOKENS: '' }).apiTokens, [], 'empty means unset: an open API');
  });

  it('reads the callback variables', () => {
    const config = loadConfig({
      KILN_CALLBACK_SECRET: ' s3cret ',
      KILN_CALLBACK_TIMEOUT_MS: '2500',
      KILN_CALLBACK_MAX_ATTEMPTS: '3',
      KILN_CALLBACK_ALLOW_PRIVATE: 'TRUE',
    });
    // The secret is taken byte for byte: spaces are part of it.
    assert.equal(config.callbackSecret, ' s3cret ');
    assert.equal(config.callbackTimeoutMs, 2500);
    assert.equal(config.callbackMaxAttempts, 3);
    assert.equal(config.callbackAllowPrivate, true);
    assert.equal(loadConfig({ KILN_CALLBACK_SECRET: '' }).callbackSecret, null);
  });

  it('reads every variable', () => {
    const config = loadConfig({
      PORT: '8080',
      HOST: '0.0.0.0',
      KILN_STORE: 'memory',
      KILN_THREADS: '3',
      KILN_MAX_QUEUED: '0010',
      KILN_SQLITE_SYNC: 'NORMAL',
      KILN_SQLITE_CACHE_MB: '64',
      KILN_TASKS_DIR: '/srv/tasks',
      KILN_API_TOKENS: ' a , b,,',
      KILN_SHUTDOWN_GRACE_MS: '0',
      KILN_THREAD_MAX_JOBS: '1000',
      KILN_MAX_RESULT_BYTES: '65536',
      KILN_MAX_SNOOZES: '0',
      LOG_LEVEL: 'debug',
      LOG_FORMAT: 'JSON',
    });
    assert.equal(config.port, 8080);
    assert.equal(config.host, '0.0.0.0');
    assert.equal(config.store, 'memory');
    assert.equal(config.threads, 3);
    assert.equal(config.maxQueued, 10);
    assert.equal(config.sqliteSync, 'normal');
    assert.equal(config.sqliteCacheMb, 64);
    assert.equal(config.tasksDir, '/srv/tasks');
    assert.deepEqual(config.apiTokens, ['a', 'b']);
    assert.equal(config.shutdownGraceMs, 0);
    assert.equal(config.threadMaxJobs, 1000);
    assert.equal(config.maxResultBytes, 65_536);
    assert.equal(config.maxSnoozes, 0, '0: a snooze fails the job');
    assert.equal(loadConfig({ KILN_THREAD_MAX_JOBS: '0' }).threadMaxJobs, null, '0: never');
    assert.equal(config.logLevel, 'debug');
    assert.equal(config.logFormat, 'json');
  });

  for (const [name, value, expected] of [
    ['KILN_THREADS', 'abc', 'KILN_THREADS must be an integer from 1 to 256, got "abc"'],
    ['KILN_THREADS', '0', 'KILN_THREADS must be an integer from 1 to 256, got "0"'],
    ['PORT', '70000', 'PORT must be an integer from 0 to 65535, got "70000"'],
    ['KILN_MAX_QUEUED', '1.5', 'KILN_MAX_QUEUED must be an integer from 1 to 100000000, got "1.5"'],
    ['KILN_SQLITE_CACHE_MB', '0', 'KILN_SQLITE_CACHE_MB must be an integer from 1 to 65536, got "0"'],
    ['KILN_SQLITE_SYNC', 'sometimes', 'KILN_SQLITE_SYNC must be one of full, normal, got "sometimes"'],
    ['KILN_STORE', 'mysql://x', 'KILN_STORE must be "memory", "sqlite:<path>" or "postgres://...", got "mysql://x"'],
    ['KILN_CALLBACK_ALLOW_PRIVATE', 'yes', 'KILN_CALLBACK_ALLOW_PRIVATE must be true or false, got "yes"'],
    ['KILN_CALLBACK_MAX_ATTEMPTS', '0', 'KILN_CALLBACK_MAX_ATTEMPTS must be an integer from 1 to 100, got "0"'],
    ['KILN_THREAD_MAX_JOBS', '-1', 'KILN_THREAD_MAX_JOBS must be an integer from 0 to 1000000000, got "-1"'],
    ['KILN_MAX_RESULT_BYTES', '1mb', 'KILN_MAX_RESULT_BYTES must be an integer from 1024 to 268435456, got "1mb"'],
    ['KILN_MAX_SNOOZES', '-1', 'KILN_MAX_SNOOZES must be an integer from 0 to 1000000, got "-1"'],
    ['KILN_MAX_SNOOZES', 'many', 'KILN_MAX_SNOOZES must be an integer from 0 to 1000000, got "many"'],
    ['LOG_LEVEL', 'loud', 'LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got "loud"'],
    ['LOG_FORMAT', 'xml', 'LOG_FORMAT must be one of auto, json, pretty, got "xml"'],
    ['KILN_API_TOKENS', ',', 'KILN_API_TOKENS must be comma-separated tokens (unset it for an open API), got ","'],
    ['KILN_API_TOKENS', ' ', 'KILN_API_TOKENS must be comma-separated tokens (unset it for an open API), got " "'],
  ] as const) {
    it(`refuses ${name}=${value} naming the variable, the value and what was expected`, () => {
      assert.throws(
        () => loadConfig({ [name]: value }),
        (error: unknown) => error instanceof ConfigError && error.message === expected,
      );
    });
  }
});
