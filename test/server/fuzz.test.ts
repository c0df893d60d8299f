import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { documentedProblemCodes } from '../support/api-doc.js';
import { startServer, type TestServer } from '../support/kiln.js';

/**
 * "No request, however malformed, may crash the process or produce a 500" (API.md,
 * "Errors"), checked with seeded random requests written byte by byte on raw sockets.
 * The seed is KILN_FUZZ_SEED when set, a fixed one under CI=true (so CI runs are
 * repeatable), else a fresh one per run; every run prints it, so
 * KILN_FUZZ_SEED=<seed> reproduces it. KILN_FUZZ_COUNT sets how many requests it sends.
 */

const CI_SEED = 20_261_122;
const { seed: SEED, source: SEED_SOURCE } = fuzzSeed(process.env);
const COUNT = Number(process.env.KILN_FUZZ_COUNT ?? 3000);
const CONCURRENCY = 16;
const MAX_BODY_BYTES = 65_536;

function fuzzSeed(env: NodeJS.ProcessEnv): { seed: number; source: string } {
  const given = env.KILN_FUZZ_SEED;
  if (given !== undefined && given !== '') {
    const seed = Number(given);
    if (!/^\d+$/.test(given) || seed > 0xffff_ffff) {
      throw new Error(`KILN_FUZZ_SEED must be an integer from 0 to 4294967295, got "${given}"`);
    }
    return { seed, source: 'from KILN_FUZZ_SEED' };
  }
  if (env.CI === 'true') return { seed: CI_SEED, source: 'fixed under CI=true' };
  return { seed: randomInt(0, 2 ** 32), source: 'random' };
}

function mulberry32(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class Fuzzer {
  readonly #random: () => number;
  constructor(seed: number) {
    this.#random = mulberry32(seed);
  }
  int(max: number): number {
    return Math.floor(this.#random() * max);
  }
  chance(p: number): boolean {
    return this.#random() < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)] as T;
  }

  string(): string {
    return this.pick<() => string>([
      () => '',
      () => 'noop',
      () => 'x'.repeat(this.pick([1, 64, 65, 100, 101, 255, 256, 5000])),
      () => 'żółw 🐢 \u202e\u0000\ud800',
      () => '../../etc/passwd',
      () => '%00%ff%zz',
      () => 'ref:a',
      () => '0193aaaa-0000-7000-8000-000000000000',
      () => '2026-11-22T10:00:00.000Z',
      () => 'not a date',
      () => '__proto__',
      () => 'constructor',
      () => String.fromCharCode(...Array.from({ length: 8 }, () => this.int(0x10000))),
    ])();
  }

  number(): number {
    return this.pick([0, -1, 1, 5, 9, 10, 100, 101, 1.5, -0, 1e308, -1e308, 2 ** 53 + 1, 86_400_001, 1e-300]);
  }

  /** Any JSON value, nested up to `depth`. */
  value(depth = 3): unknown {
    const kinds = depth <= 0 ? 5 : 8;
    switch (this.int(kinds)) {
      case 0:
        return null;
      case 1:
        return this.chance(0.5);
      case 2:
        return this.number();
      case 3:
      case 4:
        return this.string();
      case 5:
        return Array.from({ length: this.int(4) }, () => this.value(depth - 1));
      default: {
        const object: Record<string, unknown> = {};
        for (let i = this.int(4); i > 0; i--) object[this.key()] = this.value(depth - 1);
        return object;
      }
    }
  }

  key(): string {
    return this.pick([
      'a',
      'type',
      'payload',
      'jobs',
      'ms',
      'echo',
      'data',
      '__proto__',
      'constructor',
      'prototype',
      '',
    ]);
  }

  /** A job request that is valid, or wrong in one or more fields. */
  jobRequest(batchItem: boolean): Record<string, unknown> {
    const job: Record<string, unknown> = {
      type: this.pick(['noop', 'noop', 'hash.sha256', 'no.such', 'cpu.spin']),
    };
    if (job.type === 'hash.sha256') job.payload = { data: 'abc' };
    if (job.type === 'cpu.spin') job.payload = this.pick([{ ms: -1 }, { ms: 'x' }, {}, { ms: 1, extra: 1 }]);
    const fields = [
      'type',
      'payload',
      'priority',
      'maxAttempts',
      'timeoutMs',
      'backoff',
      'runAt',
      'delayMs',
      'idempotencyKey',
      'dependsOn',
      'metadata',
      'ref',
      'unknownField',
      '__proto__',
      'constructor',
    ];
    for (let i = this.int(4); i > 0; i--) {
      const field = this.pick(fields);
      const wrong = this.pick<() => unknown>([
        () => this.value(),
        () => this.number(),
        () => this.string(),
        () => (field === 'backoff' ? { initialMs: 10, factor: 0.5, maxMs: 1, jitter: 'some' } : [this.value()]),
        () => (field === 'metadata' ? { big: 'x'.repeat(5000) } : { polluted: true }),
        () => (field === 'dependsOn' ? Array.from({ length: 101 }, () => 'x') : ['ref:nope', 'ref:nope']),
      ])();
      if (field === '__proto__' || field === 'constructor') {
        // Written as own keys, as a client's JSON would carry them.
        Object.defineProperty(job, field, {
          value: { polluted: true },
          enumerable: true,
          writable: true,
        });
      } else {
        job[field] = wrong;
      }
    }
    if (!batchItem) delete job.ref;
    // Nothing the fuzzer submits may keep a thread busy once dispatch resumes.
    if (job.type === 'noop' && job.payload !== undefined && this.chance(0.5)) delete job.payload;
    return job;
  }

  batch(): unknown {
    switch (this.int(6)) {
      case 0:
        return { jobs: Array.from({ length: 1001 }, () => ({ type: 'noop' })) };
      case 1:
        return { jobs: [] };
      case 2:
        // A cycle and a forward reference: refs may only name earlier items.
        return {
          jobs: [
            { ref: 'a', type: 'noop', dependsOn: ['ref:b'] },
            { ref: 'b', type: 'noop', dependsOn: ['ref:a'] },
          ],
        };
      case 3:
        return {
          jobs: [
            { ref: 'a', type: 'noop', dependsOn: ['ref:a'] },
            { ref: 'a', type: 'noop' },
          ],
        };
      case 4:
        return this.pick([[], [{ type: 'noop' }], { jobs: { type: 'noop' } }, { jobs: [{ type: 'noop' }], extra: 1 }]);
      default:
        return {
          jobs: Array.from({ length: 1 + this.int(5) }, () => this.jobRequest(true)),
        };
    }
  }

  /** A JSON text, valid or not. */
  body(kind: 'job' | 'batch' | 'any'): string {
    switch (this.int(13)) {
      case 0:
        return '{"type": "noop",';
      case 1:
        return this.pick(['', ' ', 'null', 'true', '"noop"', '[]', '0', '{}', 'NaN', '{"type": undefined}']);
      case 2: {
        const depth = this.pick([100, 1000, 5000, 20_000]);
        return `{"type":"noop","payload":{"echo":${'['.repeat(depth)}${']'.repeat(depth)}}}`;
      }
      case 3: {
        const depth = this.pick([100, 1000, 5000]);
        return `{"type":"noop","metadata":${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}}`;
      }
      case 9: {
        // test.sum (a fixture task) has no payload schema: the payload reaches the store as it is.
        const depth = this.pick([100, 1000, 5000, 20_000]);
        const key = this.chance(0.5) ? `"idempotencyKey":"deep-${this.int(1e9)}",` : '';
        return `{"type":"test.sum",${key}"payload":${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}}`;
      }
      case 4:
        return '{"type":"noop","priority":1e999999,"timeoutMs":123456789012345678901234567890}';
      case 5:
        return '{"type":"noop","__proto__":{"polluted":true},"constructor":{"prototype":{"polluted":true}}}';
      case 6:
        return '{"type":"noop","payload":{"echo":{"__proto__":{"polluted":true}}}}';
      case 7:
        return '{"type":"noop","type":"noop","type":"cpu.spin"}';
      case 8:
        return `{"type":"noop","payload":{"echo":"${'x'.repeat(MAX_BODY_BYTES)}"}}`;
      default:
        return JSON.stringify(kind === 'batch' ? this.batch() : kind === 'job' ? this.jobRequest(false) : this.value());
    }
  }

  pathSegment(): string {
    return this.pick<() => string>([
      () => '0193aaaa-0000-7000-8000-000000000000',
      () => 'x'.repeat(this.pick([64, 65, 200, 201, 5000])),
      () => encodeURIComponent('żółw🐢'),
      () => '%',
      () => '%zz',
      () => '%E0%A4%A',
      () => '%00',
      () => '%2F..%2F',
      () => '..',
      () => '__proto__',
      () => 'constructor',
      () => "'; DROP TABLE jobs; --".replace(/ /g, '%20'),
      () => String(this.int(1e9)),
    ])();
  }

  query(): string {
    const parts: string[] = [];
    for (let i = this.int(4); i > 0; i--) {
      parts.push(
        this.pick([
          'wait=-1',
          'wait=61',
          'wait=abc',
          'wait=0',
          'wait=1e999',
          'wait=0.001',
          'wait=',
          'limit=abc',
          'limit=0',
          'limit=501',
          'limit=1',
          'limit=-5',
          'limit=1&limit=2',
          'status=sleeping',
          'status=queued,',
          'status=queued,completed',
          'status=',
          'type=',
          `type=${'x'.repeat(200)}`,
          'cursor=garbage',
          'cursor=%FF%FE',
          `cursor=${'x'.repeat(300)}`,
          '__proto__[polluted]=1',
          'constructor[prototype][polluted]=1',
          'unknown=1',
          '%zz=%zz',
          '&&&',
          '=',
        ]),
      );
    }
    return parts.length === 0 ? '' : `?${parts.join('&')}`;
  }

  /** One request: method, target, headers and body, all as the bytes the socket gets. */
  request(): FuzzRequest {
    const id = this.pathSegment();
    const target =
      this.pick([
        '/v1/jobs',
        '/v1/jobs',
        '/v1/jobs/batch',
        '/v1/jobs/batch',
        `/v1/jobs/${id}`,
        `/v1/jobs/${id}/cancel`,
        `/v1/jobs/${id}/retry`,
        `/v1/jobs/${id}/events`,
        `/v1/jobs/${id}/${id}`,
        '/v1/queue',
        '/v1/queue/pause',
        '/v1/queue/resume',
        '/v1/tasks',
        '/v1/stats',
        '/v1',
        '/v2/jobs',
        '/health',
        '/ready',
        '/metrics',
        '/openapi.json',
        '/ui',
        '/ui/',
        '/ui/app/main.js',
        '/ui/vendor/preact.mjs',
        '/ui/vendor/../../package.json',
        `/${id}`,
        '//v1//jobs',
        '/v1/jobs/',
        '*',
      ]) + this.query();
    // Pausing or resuming would start fuzz jobs; events on a live job would stream.
    const method = this.pick(['GET', 'POST', 'POST', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS', 'BREW']);
    const headers: string[] = [];
    let body: Buffer | null = null;
    if (method !== 'GET' && method !== 'HEAD' && this.chance(0.85)) {
      const kind = target.startsWith('/v1/jobs/batch') ? 'batch' : target.startsWith('/v1/jobs') ? 'job' : 'any';
      body = Buffer.from(this.body(kind));
      if (this.chance(0.05)) body = Buffer.concat([body.subarray(0, body.length - 1), Buffer.from([0xff, 0xfe, 0xc3])]);
      headers.push(
        `Content-Type: ${this.pick([
          'application/json',
          'application/json',
          'application/json; charset=utf-8',
          'application/json; charset=latin1',
          'APPLICATION/JSON',
          'text/plain',
          'application/x-www-form-urlencoded',
          'multipart/form-data; boundary=x',
          'application/problem+json',
          'application/json, text/plain',
          '',
          ';;;',
        ])}`,
      );
    }
    if (this.chance(0.2)) headers.push(`Idempotency-Key: ${this.pick(['k', '', 'x'.repeat(300), 'żółw'])}`);
    if (this.chance(0.1)) headers.push('Idempotency-Key: a', 'Idempotency-Key: b');
    if (this.chance(0.1)) headers.push('Content-Type: application/json', 'Content-Type: text/plain');
    if (this.chance(0.05)) headers.push(`X-Big: ${'x'.repeat(this.pick([8000, 20_000]))}`);
    if (this.chance(0.05)) headers.push('Authorization: Bearer nope');
    if (this.chance(0.05)) headers.push('Accept: text/event-stream');
    if (this.chance(0.05)) headers.push('Content-Encoding: gzip');
    return { method, target, headers, body };
  }

  /** Bytes that are not valid HTTP/1.1. */
  malformed(): Buffer {
    return this.pick<() => Buffer>([
      () => Buffer.from('GARBAGE\r\n\r\n'),
      () => Buffer.from('GET / HTTP/9.9\r\nHost: x\r\n\r\n'),
      () => Buffer.from('GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n'),
      () => Buffer.from('POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello'),
      () =>
        Buffer.from(
          'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n',
        ),
      () => Buffer.from('POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nxx\r\n'),
      () => Buffer.from(`GET /${'a'.repeat(100_000)} HTTP/1.1\r\nHost: x\r\n\r\n`),
      () => Buffer.from('GET /health HTTP/1.1\r\nHost: x\r\nBad Header Name: 1\r\n\r\n'),
      () => Buffer.from('GET /health HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n'),
      () =>
        Buffer.concat([
          Buffer.from('GET /v1/jobs/'),
          Buffer.from([0xff, 0xc0, 0x80]),
          Buffer.from(' HTTP/1.1\r\n\r\n'),
        ]),
      () => Buffer.from('GET /health HTTP/1.1\nHost: x\n\n'),
      () => Buffer.from('\r\n\r\n\r\n'),
      () => Buffer.from([0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03]),
      () => Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
      () => Buffer.from(`GET /health HTTP/1.1\r\nHost: x\r\n${'X-A: b\r\n'.repeat(3000)}\r\n`),
      () =>
        Buffer.from(
          'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{}',
        ),
    ])();
  }
}

interface FuzzRequest {
  method: string;
  target: string;
  headers: string[];
  body: Buffer | null;
}

type Plan = { malformed: Buffer } | { request: FuzzRequest };

interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Writes `bytes` and reads whatever comes back until the server closes. `halfClose`
 * ends the writing side at once, so that a server waiting for more bytes of a
 * truncated request learns that none will come (requests that are complete rely on
 * `Connection: close` instead: an early FIN makes Node abort the request).
 */
function exchange(
  port: number,
  bytes: Buffer,
  halfClose: boolean,
): Promise<{ response: RawResponse | null; raw: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, allowHalfOpen: true });
    const chunks: Buffer[] = [];
    socket.setTimeout(10_000, () => socket.destroy(new Error('no answer within 10 s')));
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', (error: NodeJS.ErrnoException) => {
      // The server may reset a connection it refused to read to the end.
      if (error.code === 'ECONNRESET' || error.code === 'EPIPE') resolve(parse(Buffer.concat(chunks)));
      else reject(error);
    });
    socket.on('end', () => {
      socket.end();
      resolve(parse(Buffer.concat(chunks)));
    });
    socket.write(bytes, () => {
      if (halfClose) socket.end();
    });
  });
}

function parse(data: Buffer): { response: RawResponse | null; raw: string } {
  const raw = data.toString('latin1');
  const head = raw.indexOf('\r\n\r\n');
  if (head === -1) return { response: null, raw };
  const [statusLine = '', ...lines] = raw.slice(0, head).split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? Number.NaN);
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  let body = data.subarray(Buffer.byteLength(raw.slice(0, head + 4), 'latin1'));
  if (headers['transfer-encoding'] === 'chunked') {
    const parts: Buffer[] = [];
    let rest = body;
    for (let guard = 0; guard < 10_000; guard++) {
      const eol = rest.indexOf('\r\n');
      const size = Number.parseInt(rest.subarray(0, eol).toString('latin1'), 16);
      if (eol === -1 || !(size > 0)) break;
      parts.push(rest.subarray(eol + 2, eol + 2 + size));
      rest = rest.subarray(eol + 2 + size + 2);
    }
    body = Buffer.concat(parts);
  } else if (headers['content-length'] !== undefined) {
    body = body.subarray(0, Number(headers['content-length']));
  }
  return { response: { status, headers, body: body.toString('utf8') }, raw };
}

function encode(request: FuzzRequest): Buffer {
  const lines = [`${request.method} ${request.target} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close'];
  lines.push(...request.headers);
  if (request.body !== null) lines.push(`Content-Length: ${request.body.length}`);
  const head = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'utf8');
  return request.body === null ? head : Buffer.concat([head, request.body]);
}

/**
 * What is wrong with an answer, or null when it keeps the contract. `documented` maps
 * each code of docs/API.md's tables to its status.
 */
function verdict(
  documented: ReadonlyMap<string, number>,
  response: RawResponse | null,
  malformedHttp: boolean,
  head: boolean,
): string | null {
  if (response === null) return malformedHttp ? null : 'no HTTP answer';
  if (Number.isNaN(response.status)) return 'an unreadable status line';
  if (response.status >= 500) return `status ${response.status}`;
  if (response.status < 400) return null;
  if (!/^application\/problem\+json/.test(response.headers['content-type'] ?? '')) {
    return `a ${response.status} that is not application/problem+json`;
  }
  if (head) return null; // no body to read
  let problem: any; // a problem document, checked field by field below
  try {
    problem = JSON.parse(response.body);
  } catch {
    return 'a problem document that is not JSON';
  }
  const documentedStatus = typeof problem.code === 'string' ? documented.get(problem.code) : undefined;
  if (documentedStatus === undefined) return `an undocumented code ${JSON.stringify(problem.code)}`;
  if (problem.status !== response.status) return `body status ${problem.status} differs from ${response.status}`;
  if (typeof problem.detail !== 'string' || typeof problem.title !== 'string') return 'no title or detail';
  if (/\n\s+at /.test(problem.detail)) return 'a stack trace in the detail';
  // A path parameter over the router's maxParamLength keeps HTTP's own 414, which
  // API.md's table does not list.
  const httpLimit = response.status === 414 && problem.code === 'validation_error';
  if (documentedStatus !== response.status && !httpLimit) {
    return `code ${problem.code} with status ${response.status} (API.md gives ${documentedStatus})`;
  }
  return null;
}

function snippet(text: string, max = 160): string {
  const printable = text.replace(/[^\x20-\x7e]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
  return printable.length > max ? `${printable.slice(0, max)}… (${text.length} chars)` : printable;
}

describe('API fuzz', { timeout: 120_000 }, () => {
  let server: TestServer;
  let port: number;
  const documented = new Map(documentedProblemCodes().map((row) => [row.code, row.status]));
  before(async () => {
    server = await startServer({
      KILN_THREADS: '1',
      KILN_MAX_BODY_BYTES: String(MAX_BODY_BYTES),
    });
    port = Number(new URL(server.url).port);
    // Nothing the fuzz submits runs until the end.
    await server.request('POST', '/v1/queue/pause');
  });
  after(async () => {
    await server.close();
  });

  it(`answers ${COUNT} random malformed requests without a 5xx, each 4xx a documented problem`, async (t) => {
    t.diagnostic(`KILN_FUZZ_SEED=${SEED} (${SEED_SOURCE}; set it to reproduce this run)`);
    const fuzz = new Fuzzer(SEED);
    const plans: Plan[] = Array.from({ length: COUNT }, (): Plan =>
      fuzz.chance(0.05) ? { malformed: fuzz.malformed() } : { request: fuzz.request() },
    );
    const failures: string[] = [];
    const statuses = new Map<number | string, number>();
    let next = 0;
    const lane = async () => {
      while (next < plans.length) {
        const plan = plans[next++]!;
        let bytes: Buffer;
        let label: string;
        if ('malformed' in plan) {
          bytes = plan.malformed;
          label = `raw ${snippet(bytes.toString('latin1'))}`;
        } else {
          const { method, target, headers, body } = plan.request;
          // Stay away from the two routes that change what the fuzz is allowed to run.
          if (/^\/v1\/queue\/(pause|resume)/.test(target) && method === 'POST') continue;
          bytes = encode(plan.request);
          label = `${method} ${snippet(target)} [${snippet(headers.join(' | '), 120)}] body ${snippet(body?.toString('latin1') ?? '')}`;
        }
        let outcome: { response: RawResponse | null; raw: string };
        try {
          outcome = await exchange(port, bytes, 'malformed' in plan);
        } catch (error) {
          failures.push(`${label}\n  → ${(error as Error).message}`);
          continue;
        }
        const key = outcome.response?.status ?? 'none';
        statuses.set(key, (statuses.get(key) ?? 0) + 1);
        const wrong = verdict(
          documented,
          outcome.response,
          'malformed' in plan,
          'request' in plan && plan.request.method === 'HEAD',
        );
        if (wrong !== null) failures.push(`${label}\n  → ${wrong}: ${snippet(outcome.raw, 400)}`);
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, lane));
    t.diagnostic(`statuses: ${JSON.stringify(Object.fromEntries(statuses))}`);

    assert.equal(({} as Record<string, unknown>).polluted, undefined, 'Object.prototype was polluted');
    assert.equal(
      failures.length,
      0,
      `${failures.length} answers broke the contract (KILN_FUZZ_SEED=${SEED}):\n${failures.slice(0, 40).join('\n')}`,
    );
  });

  it('still serves: /health answers and a job runs once dispatch resumes', async () => {
    assert.deepEqual((await server.request('GET', '/health')).body, {
      status: 'ok',
    });
    // Fuzz jobs that were accepted are cheap (noop, hash.sha256), but may be many.
    const created = await server.request('POST', '/v1/jobs', {
      type: 'noop',
      priority: 9,
      payload: { echo: 'alive' },
    });
    assert.equal(created.status, 201, created.text);
    const resumed = await server.request('POST', '/v1/queue/resume');
    assert.equal(resumed.status, 200, resumed.text);
    const job: any = await server.waitForJob(created.body.id);
    assert.equal(job.status, 'completed');
    assert.equal(job.result, 'alive');
  });
});
