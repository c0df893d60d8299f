/**
 * Hostile clients against one server (SQLite, API tokens on, LOG_LEVEL=info, JSON logs):
 *
 * - random: `--requests` seeded random requests (method, route, ids, query strings,
 *   content types and bodies mutated from valid submissions); counts answers >= 500 and
 *   requests that got no answer;
 * - slow: raw TCP connections that send headers and then a body one byte a second and
 *   never finish it, a chunked body that never ends, headers that never end, and nothing
 *   at all; counts those the server still holds open after `--bound-s` seconds;
 * - tokens: requests that carry the API token, and other would-be secrets, in the query
 *   string (`?token=`, `?access_token=`, `?api_key=`) and in the Authorization header;
 *   counts how many times each secret appears in the server's log;
 * - numbers: submissions whose numbers JSON cannot carry exactly (2^53 + 1, 1e400,
 *   -0, 1e-400, 0.1 + 0.2 written long) in the payload and in numeric fields; counts
 *   answers 201 whose stored payload differs from what was sent, 400, and >= 500.
 *
 *   node bench/faults/hostile.mjs [--size tiny|full] [--requests N] [--bound-s S] [--seed S]
 */
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startKiln } from '../lib/processes.mjs';
import { printTable } from '../lib/report.mjs';
import { finish } from './lib/fault-report.mjs';
import { seededRandom } from './lib/mixed-load.mjs';

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: 'full' },
    requests: { type: 'string' },
    'bound-s': { type: 'string' },
    seed: { type: 'string', default: '1' },
  },
  strict: true,
});
const tiny = values.size === 'tiny';
const requests = Number(values.requests ?? (tiny ? 300 : 5000));
const boundMs = Number(values['bound-s'] ?? (tiny ? 5 : 65)) * 1000;
const TOKEN = 'kiln-fault-token-7f3a9c';
const { AbortSignal } = globalThis;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function send(url, { method = 'GET', path, headers = {}, body }) {
  try {
    const response = await fetch(`${url}${path}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...headers },
      body,
      signal: AbortSignal.timeout(10_000),
    });
    const text = await response.text();
    return { status: response.status, text };
  } catch (error) {
    return { status: 0, text: error.name === 'TimeoutError' ? 'timeout' : String(error.cause?.code ?? error.message) };
  }
}

async function randomRequests(url, random) {
  const pick = (list) => list[Math.floor(random() * list.length)];
  const ids = ['01a21433-8ca1-7006-857e-e7cb9173b6b3', 'x', '', '..%2F..', '%00', '9'.repeat(300), 'ü', '-1'];
  const paths = [
    () => '/v1/jobs',
    () => '/v1/jobs/batch',
    () => `/v1/jobs/${pick(ids)}`,
    () => `/v1/jobs/${pick(ids)}/events`,
    () => `/v1/jobs/${pick(ids)}/cancel`,
    () => `/v1/jobs/${pick(ids)}/retry`,
    () => `/v1/jobs/${pick(ids)}/callbacks`,
    () => '/v1/queue',
    () => `/v1/queue/${pick(['pause', 'resume', 'x'])}`,
    () => '/v1/nodes',
    () => '/v1/stats',
    () => '/v1/tasks',
    () => `/v1/tasks/${pick(['noop', 'x', '%ff'])}/limits`,
    () => '/v1/schedules',
    () => `/v1/schedules/${pick(['a', '%', 'b'.repeat(200)])}`,
    () => `/v1/schedules/${pick(['a', 'x'])}/trigger`,
    () => '/metrics',
    () => '/ready',
  ];
  const queries = [
    '',
    '?wait=1',
    '?wait=-1',
    '?wait=1e309',
    '?limit=0',
    '?limit=99999999999',
    '?status=x',
    '?cursor=%ff',
    '?a[b]=1&a[c]=2',
    '?wait=0.01&wait=2',
  ];
  const values = [
    null,
    true,
    -1,
    0,
    1.5,
    2 ** 53 + 2,
    1e308,
    '',
    'x'.repeat(1000),
    [],
    {},
    { a: [1, { b: null }] },
    '\u0000',
    '\ud800',
  ];
  const fields = [
    'type',
    'payload',
    'priority',
    'maxAttempts',
    'timeoutMs',
    'runAt',
    'delayMs',
    'dependsOn',
    'idempotencyKey',
    'group',
    'metadata',
    'backoff',
    'jobs',
    'callback',
    'cron',
    'name',
    'concurrency',
    'rateLimit',
  ];
  const body = () => {
    const kind = random();
    if (kind < 0.1) return '{"type":"noop",'; // cut short
    if (kind < 0.15) return '['.repeat(5000);
    if (kind < 0.2) return Buffer.from([0x7b, 0xff, 0xfe, 0x7d]);
    const object = { type: pick(['noop', 'cpu.spin', 'hash.sha256', 'nope', 1]) };
    for (let i = 0; i < 1 + random() * 4; i++) object[pick(fields)] = pick(values);
    if (random() < 0.2) object.jobs = [{ ...object }, { ...object }];
    return JSON.stringify(object);
  };
  const counts = { total: requests, byClass: {}, fiveHundreds: [], noAnswer: [] };
  let next = 0;
  const lane = async () => {
    while (next < requests) {
      next++;
      const method = pick(['GET', 'POST', 'POST', 'PUT', 'DELETE', 'PATCH']);
      const path = pick(paths)() + pick(queries);
      const headers = {
        'content-type': pick([
          'application/json',
          'application/json; charset=latin1',
          'text/plain',
          'application/x-www-form-urlencoded',
          'application/json',
        ]),
      };
      const answer = await send(url, {
        method,
        path,
        headers,
        body: method === 'GET' || method === 'DELETE' ? undefined : body(),
      });
      const cls = answer.status === 0 ? 'no answer' : `${Math.floor(answer.status / 100)}xx`;
      counts.byClass[cls] = (counts.byClass[cls] ?? 0) + 1;
      if (answer.status >= 500 && counts.fiveHundreds.length < 5)
        counts.fiveHundreds.push(`${method} ${path} → ${answer.status} ${answer.text.slice(0, 120)}`);
      if (answer.status === 0 && counts.noAnswer.length < 5) counts.noAnswer.push(`${method} ${path} → ${answer.text}`);
    }
  };
  await Promise.all([lane(), lane(), lane(), lane()]);
  return counts;
}

/** Opens hostile raw connections; answers how many of each kind the server still holds open after the bound. */
async function slowClients(url, perKind) {
  const { port } = new URL(url);
  const head = (extra) =>
    `POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${TOKEN}\r\nContent-Type: application/json\r\n${extra}\r\n`;
  const kinds = {
    'body one byte a second': (socket) => {
      socket.write(head('Content-Length: 100000\r\n'));
      return setInterval(() => socket.write('{'), 1000);
    },
    'chunked body never ends': (socket) => {
      socket.write(head('Transfer-Encoding: chunked\r\n'));
      return setInterval(() => socket.write('1\r\n \r\n'), 1000);
    },
    'headers never end': (socket) => {
      socket.write('GET /v1/queue HTTP/1.1\r\nHost: 127.0.0.1\r\n');
      return setInterval(() => socket.write('X-Slow: 1\r\n'), 1000);
    },
    'nothing sent': () => null,
  };
  const sockets = [];
  for (const [kind, start] of Object.entries(kinds)) {
    for (let i = 0; i < perKind; i++) {
      const socket = connect(Number(port), '127.0.0.1');
      const entry = { kind, socket, closed: false, timer: null };
      socket.on('close', () => {
        entry.closed = true;
        clearInterval(entry.timer);
      });
      socket.on('error', () => {});
      socket.on('data', () => {});
      socket.once('connect', () => {
        entry.timer = start(socket);
      });
      sockets.push(entry);
    }
  }
  await sleep(boundMs);
  const open = {};
  for (const entry of sockets) {
    open[entry.kind] ??= 0;
    if (!entry.closed) open[entry.kind]++;
    clearInterval(entry.timer);
    entry.socket.destroy();
  }
  return { perKind, boundMs, openAfterBound: open };
}

async function tokensInLogs(server) {
  const secrets = {
    'API token in ?token=': `${TOKEN}`,
    '?access_token=': 'kiln-fault-access-5d1e',
    '?api_key=': 'kiln-fault-apikey-88b2',
    'a wrong token in Authorization': 'kiln-fault-wrong-0c4d',
  };
  await send(server.url, { path: `/v1/queue?token=${secrets['API token in ?token=']}` });
  await send(server.url, { path: `/v1/queue?access_token=${secrets['?access_token=']}` });
  await send(server.url, { path: `/v1/jobs/nope?api_key=${secrets['?api_key=']}` });
  await fetch(`${server.url}/v1/queue`, {
    headers: { authorization: `Bearer ${secrets['a wrong token in Authorization']}` },
  }).then((r) => r.arrayBuffer());
  await sleep(500);
  const log = readFileSync(join(server.dir, 'kiln.log'), 'utf8');
  return Object.fromEntries(Object.entries(secrets).map(([where, secret]) => [where, log.split(secret).length - 1]));
}

async function numbers(url) {
  const literals = [
    '9007199254740993',
    '1e400',
    '-0',
    '1e-400',
    '0.30000000000000004440892098500626',
    '123456789012345678901234567890',
  ];
  const result = { sent: 0, accepted: 0, alteredOnReadBack: [], refused400: 0, fiveHundreds: [] };
  for (const literal of literals) {
    const bodies = [
      `{"type":"noop","payload":{"echo":{"n":${literal}}}}`,
      `{"type":"noop","priority":${literal}}`,
      `{"type":"noop","timeoutMs":${literal}}`,
      `{"type":"noop","maxAttempts":${literal}}`,
    ];
    for (const body of bodies) {
      result.sent++;
      const answer = await send(url, {
        method: 'POST',
        path: '/v1/jobs',
        headers: { 'content-type': 'application/json' },
        body,
      });
      if (answer.status === 201) {
        result.accepted++;
        const job = JSON.parse(answer.text);
        const read = await send(url, { path: `/v1/jobs/${job.id}` });
        const text = read.text;
        // What was sent, as the client wrote it, is not what the server keeps.
        if (body.includes('"echo"') && !text.includes(`"n":${literal}`)) {
          result.alteredOnReadBack.push(`${body} → ${/"payload":(\{[^}]*\}\})/.exec(text)?.[1] ?? text.slice(0, 80)}`);
        } else if (!body.includes('"echo"')) {
          const field = /"(\w+)":[^,}]+\}$/.exec(body)[1];
          const stored = new RegExp(`"${field}":([^,}]+)`).exec(text)?.[1];
          if (stored !== literal) result.alteredOnReadBack.push(`${field}: ${literal} → ${stored}`);
        }
      } else if (answer.status === 400) result.refused400++;
      else if (answer.status >= 500 || answer.status === 0) result.fiveHundreds.push(`${body} → ${answer.status}`);
    }
  }
  return result;
}

await finish('hostile', async () => {
  const server = await startKiln({
    threads: 2,
    env: { KILN_API_TOKENS: TOKEN, LOG_LEVEL: 'info', LOG_FORMAT: 'json' },
  });
  try {
    const random = seededRandom(Number(values.seed));
    // Paused, so that nothing the random requests submit runs meanwhile.
    await send(server.url, { method: 'POST', path: '/v1/queue/pause' });
    const randomFigures = await randomRequests(server.url, random);
    const slow = await slowClients(server.url, tiny ? 2 : 10);
    const tokens = await tokensInLogs(server);
    const numberFigures = await numbers(server.url);
    const alive = (await send(server.url, { path: '/health' })).status === 200;
    printTable(
      `Hostile clients: ${requests} seeded random requests`,
      ['answers', 'count'],
      Object.entries(randomFigures.byClass).map(([k, n]) => [k, n]),
    );
    for (const line of [...randomFigures.fiveHundreds, ...randomFigures.noAnswer]) console.log(`  ${line}`);
    printTable(
      `Slow and never-ending requests, ${slow.perKind} of each, still open after ${boundMs / 1000} s`,
      ['kind', 'open'],
      Object.entries(slow.openAfterBound),
    );
    printTable(
      'Secrets sent in query strings or headers: times each appears in the server log',
      ['where', 'times in the log'],
      Object.entries(tokens),
    );
    printTable(
      'Numbers that do not round-trip',
      ['sent', 'accepted', 'altered on read-back', '400', '>= 500 or no answer'],
      [
        [
          numberFigures.sent,
          numberFigures.accepted,
          numberFigures.alteredOnReadBack.length,
          numberFigures.refused400,
          numberFigures.fiveHundreds.length,
        ],
      ],
    );
    for (const line of [...numberFigures.alteredOnReadBack, ...numberFigures.fiveHundreds]) console.log(`  ${line}`);
    console.log(`server alive at the end: ${alive}`);
    return {
      size: values.size,
      parameters: { requests, boundMs, seed: Number(values.seed) },
      random: randomFigures,
      slow,
      tokensInLog: tokens,
      numbers: numberFigures,
      serverAlive: alive,
    };
  } finally {
    await server.stop();
  }
});
