import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { ConfigError, loadConfig } from '../../src/config.js';

/** Why a secret no bearer header can carry is refused. */
const TOKEN68 =
  'has a character a bearer token cannot carry (RFC 6750: letters, digits, "-", ".", "_", "~", "+", "/", then "=" at the end only)';

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
    assert.deepEqual(
      config.apiTokens.map((token) => [token.name, token.scopes]),
      [
        ['env:1', ['read', 'submit', 'admin']],
        ['env:2', ['read', 'submit', 'admin']],
      ],
    );
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
    ['KILN_API_TOKENS', 'a,b c', `KILN_API_TOKENS: token 2 ${TOKEN68}`],
    ['KILN_API_TOKENS', 'a,b=c', `KILN_API_TOKENS: token 2 ${TOKEN68}`],
    ['KILN_API_TOKENS', 'clé', `KILN_API_TOKENS: token 1 ${TOKEN68}`],
    ['KILN_API_TOKENS', 'a, a ', 'KILN_API_TOKENS: token 2 is token 1 again'],
  ] as const) {
    it(`refuses ${name}=${value} naming the variable, the value and what was expected`, () => {
      assert.throws(
        () => loadConfig({ [name]: value }),
        (error: unknown) => error instanceof ConfigError && error.message === expected,
      );
    });
  }
});

describe('KILN_API_TOKENS_FILE', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kiln-token-files-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  let files = 0;
  /** A file holding `content` (JSON unless a string); its path. */
  const tokenFile = (content: unknown) => {
    const path = join(dir, `tokens-${++files}.json`);
    writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content));
    return path;
  };
  const hex = (secret: string) => createHash('sha256').update(secret).digest('hex');

  it('reads named tokens with scopes, in clear or as SHA-256 in either case, beside KILN_API_TOKENS', () => {
    const file = tokenFile([
      { name: 'ci', token: 'ci-secret', scopes: ['submit'] },
      { name: 'viewer', sha256: hex('viewer-secret').toUpperCase(), scopes: ['read'] },
      { name: 'ops', sha256: hex('ops-secret'), scopes: ['read', 'admin'] },
    ]);
    const tokens = loadConfig({ KILN_API_TOKENS: 'env-secret', KILN_API_TOKENS_FILE: file }).apiTokens;
    assert.deepEqual(
      tokens.map((token) => [token.name, token.scopes, token.digest.toString('hex')]),
      [
        ['env:1', ['read', 'submit', 'admin'], hex('env-secret')],
        ['ci', ['submit'], hex('ci-secret')],
        ['viewer', ['read'], hex('viewer-secret')],
        ['ops', ['read', 'admin'], hex('ops-secret')],
      ],
    );
    assert.equal(loadConfig({ KILN_API_TOKENS_FILE: file }).apiTokens.length, 3, 'the file alone');
  });

  const entry = { name: 'ci', token: 'ci-secret', scopes: ['submit'] };
  for (const [what, content, env, reason] of [
    ['both token and sha256', [{ ...entry, sha256: hex('x') }], {}, 'entry 1 ("ci") gives both token and sha256'],
    ['neither', [{ name: 'ci', scopes: ['read'] }], {}, 'entry 1 ("ci") needs a token or a sha256'],
    ['an unknown scope', [{ ...entry, scopes: ['read', 'write'] }], {}, 'entry 1 ("ci") has the scope "write"'],
    ['an empty scope', [{ ...entry, scopes: [''] }], {}, 'entry 1 ("ci") has the scope ""'],
    ['no scopes', [{ ...entry, scopes: [] }], {}, 'entry 1 ("ci") scopes must not be empty'],
    ['a short sha256', [{ name: 'ci', sha256: 'abc', scopes: ['read'] }], {}, 'sha256 must be 64 hex digits'],
    ['an unknown field', [{ ...entry, password: 'x' }], {}, 'entry 1 ("ci") has unknown fields password'],
    ['no name', [{ token: 'ci-secret', scopes: ['read'] }], {}, 'entry 1 needs a name'],
    ['a token with a space', [{ ...entry, token: 'ci secret' }], {}, `entry 1 ("ci") token ${TOKEN68}`],
    ['a token with a line break', [{ ...entry, token: 'ci-\nsecret' }], {}, `entry 1 ("ci") token ${TOKEN68}`],
    ['a token with a letter beyond ASCII', [{ ...entry, token: 'ci-secret-é' }], {}, `entry 1 ("ci") token ${TOKEN68}`],
    ['a token with "=" inside', [{ ...entry, token: 'ci=secret' }], {}, `entry 1 ("ci") token ${TOKEN68}`],
    ['an empty token', [{ ...entry, token: '' }], {}, 'entry 1 ("ci") token must not be empty'],
    ['a token of spaces', [{ ...entry, token: '   ' }], {}, 'entry 1 ("ci") token must not be empty'],
    ['a token that is not a string', [{ ...entry, token: 42 }], {}, 'entry 1 ("ci") token must be a string'],
    ['a name twice', [entry, { ...entry, token: 'other' }], {}, 'entry 2 ("ci") has the name of entry 1'],
    [
      'a secret twice',
      [entry, { name: 'ci2', sha256: hex('ci-secret'), scopes: ['read'] }],
      {},
      'entry 2 ("ci2") has the same secret as "ci"',
    ],
    [
      'a secret of KILN_API_TOKENS',
      [{ name: 'again', sha256: hex('env-b'), scopes: ['read'] }],
      { KILN_API_TOKENS: 'env-a,env-b' },
      'entry 1 ("again") has the same secret as token 2 of KILN_API_TOKENS',
    ],
    [
      'a secret of KILN_API_TOKENS, with spaces around it',
      [{ name: 'again', token: ' env-b\t', scopes: ['read'] }],
      { KILN_API_TOKENS: 'env-a, env-b ' },
      'entry 1 ("again") has the same secret as token 2 of KILN_API_TOKENS',
    ],
    ['no list', { name: 'ci' }, {}, 'must hold a JSON list'],
    ['an entry that is not an object', [entry, 'ci-secret'], {}, 'entry 2 must be an object'],
    ['an empty list', [], {}, 'holds no token'],
    ['text that is not JSON', '[{"name": "ci", "token": "ci-secret",}]', {}, 'is not JSON (line 1, column 38)'],
  ] as const) {
    it(`refuses a file with ${what} in one line naming the file and the entry, without the secret`, () => {
      const file = tokenFile(content);
      assert.throws(
        () => loadConfig({ ...env, KILN_API_TOKENS_FILE: file }),
        (error: unknown) => {
          assert.ok(error instanceof ConfigError);
          assert.ok(error.message.startsWith(`KILN_API_TOKENS_FILE "${file}"`), error.message);
          assert.ok(error.message.includes(reason), error.message);
          assert.ok(!error.message.includes('\n'), error.message);
          assert.ok(!/secret|env-b|ci=|é/.test(error.message.replace('same secret', '')), error.message);
          return true;
        },
      );
    });
  }

  it('takes secrets made of token68 characters, without the spaces around them, from a file with a BOM', () => {
    const file = tokenFile(
      `\uFEFF${JSON.stringify([
        { name: 'ci', token: ' a-Z_0.9~+/== ', scopes: ['submit'] },
        { name: 'viewer', sha256: hex('viewer-secret'), scopes: ['read'] },
      ])}`,
    );
    const tokens = loadConfig({ KILN_API_TOKENS: ' env/secret= ', KILN_API_TOKENS_FILE: file }).apiTokens;
    assert.deepEqual(
      tokens.map((token) => [token.name, token.digest.toString('hex')]),
      [
        ['env:1', hex('env/secret=')],
        ['ci', hex('a-Z_0.9~+/==')],
        ['viewer', hex('viewer-secret')],
      ],
    );
  });

  it('warns of a file of clear secrets that every user may read, naming the file', () => {
    const clear = tokenFile([entry]);
    chmodSync(clear, 0o644);
    assert.equal(
      loadConfig({ KILN_API_TOKENS_FILE: clear }).apiTokensWarning,
      `KILN_API_TOKENS_FILE "${clear}" holds secrets in clear and every user of this machine may read it (mode 644): make it unreadable to others (chmod o-r) or give the secrets as sha256`,
    );
    chmodSync(clear, 0o640);
    assert.equal(loadConfig({ KILN_API_TOKENS_FILE: clear }).apiTokensWarning, null, 'readable by its group only');
    const digests = tokenFile([{ name: 'ci', sha256: hex('ci-secret'), scopes: ['submit'] }]);
    chmodSync(digests, 0o644);
    assert.equal(loadConfig({ KILN_API_TOKENS_FILE: digests }).apiTokensWarning, null, 'digests only');
    assert.equal(loadConfig({ KILN_API_TOKENS: 'a' }).apiTokensWarning, null, 'no file');
  });

  it('refuses a file that cannot be read, and a token twice in KILN_API_TOKENS', () => {
    const missing = join(dir, 'missing.json');
    assert.throws(
      () => loadConfig({ KILN_API_TOKENS_FILE: missing }),
      (error: unknown) =>
        error instanceof ConfigError && error.message === `KILN_API_TOKENS_FILE "${missing}" cannot be read (ENOENT)`,
    );
    assert.throws(
      () => loadConfig({ KILN_API_TOKENS: 'a,b,a' }),
      (error: unknown) => error instanceof ConfigError && error.message === 'KILN_API_TOKENS: token 3 is token 1 again',
    );
  });
});
