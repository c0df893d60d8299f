import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { KilnClient } from '../../src/client/index.js';
import { startServer, type TestServer } from '../support/kiln.js';
import { killAllKilns, spawnKiln } from '../support/kiln-process.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../support/otlp-receiver.js';
import { startReceiver } from '../support/receiver.js';
import { closedPortUrl } from '../support/http.js';
import { insertOk, newJob } from '../support/store-fixtures.js';
import { newJobId } from '../../src/jobs/ids.js';
import { dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';

/**
 * Traces through real servers, exported by the official OTLP exporters to a real OTLP
 * receiver that decodes what they send (test/support/otlp-receiver.ts).
 */

const CLIENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';
const TRACEPARENT = `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`;

function otelEnv(receiver: OtlpReceiver, protocol: 'http/json' | 'http/protobuf'): Record<string, string> {
  return {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
    OTEL_SERVICE_NAME: 'kiln-under-test',
    OTEL_BSP_SCHEDULE_DELAY: '20',
  };
}

/** The spans of one message (job) id. */
function ofJob(spans: ReceivedSpan[], id: string): ReceivedSpan[] {
  return spans.filter((span) => span.attributes['messaging.message.id'] === id);
}

function one(spans: ReceivedSpan[], what: (span: ReceivedSpan) => boolean, label: string): ReceivedSpan {
  const found = spans.filter(what);
  assert.equal(found.length, 1, `one ${label}: ${JSON.stringify(found.map((s) => s.name))}`);
  return found[0]!;
}

const isProducer = (span: ReceivedSpan) => span.kind === 'PRODUCER';
const attempt = (n: number) => (span: ReceivedSpan) =>
  span.kind === 'CONSUMER' && span.attributes['kiln.attempt'] === n;

describe('traces (SQLite, OTLP over http/json)', () => {
  let otlp: OtlpReceiver;
  let server: TestServer;

  before(async () => {
    otlp = await startOtlpReceiver();
    server = await startServer({
      KILN_STORE: 'sqlite',
      KILN_THREADS: '2',
      KILN_CALLBACK_SECRET: 'trace-test-secret',
      KILN_CALLBACK_ALLOW_PRIVATE: 'true',
      ...otelEnv(otlp, 'http/json'),
    });
  });
  after(async () => {
    await server?.close();
    await otlp?.close();
  });

  it('continues the request trace: a PRODUCER span, a CONSUMER span per attempt across a retry, the handler in the last one', async () => {
    const created = await server.request(
      'POST',
      '/v1/jobs',
      { type: 'test.trace', payload: { failTimes: 1 } },
      { traceparent: TRACEPARENT, tracestate: 'vendor=abc' },
    );
    assert.equal(created.status, 201, created.text);
    const id = created.body.id as string;
    const job = await server.waitForJob(id);
    assert.equal(job.status, 'completed');
    assert.equal(job.attempts, 2);

    const spans = ofJob(
      await otlp.waitFor((all) => ofJob(all, id).filter((span) => span.kind === 'CONSUMER').length === 2, 30_000),
      id,
    );
    const producer = one(spans, isProducer, 'PRODUCER span');
    assert.equal(producer.name, 'send test.trace');
    assert.equal(producer.traceId, CLIENT_TRACE);
    assert.equal(producer.parentSpanId, CLIENT_SPAN);
    assert.equal(producer.traceState, 'vendor=abc');
    assert.equal(producer.service, 'kiln-under-test');
    assert.equal(producer.protocol, 'json');
    assert.equal(producer.attributes['messaging.system'], 'kiln');
    assert.equal(producer.attributes['messaging.operation.type'], 'send');
    assert.equal(producer.attributes['messaging.destination.name'], 'test.trace');

    const first = one(spans, attempt(1), 'first attempt');
    const second = one(spans, attempt(2), 'second attempt');
    for (const consumer of [first, second]) {
      assert.equal(consumer.name, 'process test.trace');
      assert.equal(consumer.traceId, CLIENT_TRACE);
      assert.equal(consumer.parentSpanId, producer.spanId, 'each attempt is a child of the job’s PRODUCER span');
      assert.equal(consumer.attributes['messaging.operation.type'], 'process');
      assert.ok(
        consumer.events.some((event) => event.name === 'started'),
        'the handler’s start is an event',
      );
    }
    assert.equal(first.status.code, 'ERROR');
    assert.equal(first.attributes['error.type'], 'handler_error');
    assert.equal(first.attributes['kiln.outcome'], 'retrying');
    assert.ok(
      first.events.some((event) => event.name === 'retry'),
      'the retry is an event of the failed attempt',
    );
    assert.equal(second.status.code, 'UNSET');
    assert.equal(second.attributes['kiln.outcome'], 'completed');
    assert.ok(second.startNs >= first.endNs, 'the retry runs after the failed attempt');

    // The retry's wait is a span of its own, beside the attempt it led to.
    const waits = spans.filter((span) => span.name === 'wait test.trace' && span.attributes['kiln.attempt'] === 2);
    assert.equal(waits.length, 1, 'the wait before the retry');
    assert.equal(waits[0]!.parentSpanId, producer.spanId);
    assert.ok(waits[0]!.endNs <= second.startNs + 1_000_000n);

    // The handler saw the second attempt's span, and the request's tracestate.
    assert.deepEqual(job.result, { traceparent: `00-${CLIENT_TRACE}-${second.spanId}-01`, tracestate: 'vendor=abc' });
  });

  it('traces a dependency chain in one batch: the dependent waits from its submit to its parent’s end', async () => {
    const created = await server.request(
      'POST',
      '/v1/jobs/batch',
      {
        jobs: [
          { ref: 'a', type: 'test.timed', payload: { ms: 50 } },
          { type: 'test.trace', dependsOn: ['ref:a'] },
        ],
      },
      { traceparent: TRACEPARENT },
    );
    assert.equal(created.status, 201, created.text);
    const [a, b] = created.body.jobs.map((job: { id: string }) => job.id) as [string, string];
    assert.equal((await server.waitForJob(b)).status, 'completed');
    const all = await otlp.waitFor((spans) => ofJob(spans, b).some((span) => span.kind === 'CONSUMER'), 30_000);

    const send = one(
      all,
      (span) => span.name === 'send' && span.attributes['kiln.batch.id'] === created.body.batch,
      'batch send span',
    );
    assert.equal(send.kind, 'CLIENT');
    assert.equal(send.parentSpanId, CLIENT_SPAN);
    assert.equal(send.attributes['messaging.batch.message_count'], 2);
    const createA = one(ofJob(all, a), isProducer, 'create span of the parent');
    const createB = one(ofJob(all, b), isProducer, 'create span of the dependent');
    assert.equal(createA.name, 'create test.timed');
    assert.equal(createB.name, 'create test.trace');
    assert.equal(createA.parentSpanId, send.spanId);
    assert.equal(createB.parentSpanId, send.spanId);

    const runA = one(ofJob(all, a), attempt(1), 'the parent’s attempt');
    const runB = one(ofJob(all, b), attempt(1), 'the dependent’s attempt');
    assert.equal(runA.parentSpanId, createA.spanId);
    assert.equal(runB.parentSpanId, createB.spanId);
    for (const span of [send, createA, createB, runA, runB]) assert.equal(span.traceId, CLIENT_TRACE);
    const waitB = one(ofJob(all, b), (span) => span.name === 'wait test.trace', 'the dependent’s wait');
    // Released when its parent completed: its wait starts at that end (the store's clock, in ms).
    assert.ok(waitB.startNs + 2_000_000n >= runA.endNs, 'the dependent became ready when its parent completed');
  });

  it('sends the delivery’s own traceparent with a callback, from a CLIENT span in the job’s trace', async () => {
    const receiver = await startReceiver();
    try {
      const created = await server.request(
        'POST',
        '/v1/jobs',
        { type: 'test.trace', callback: { url: `${receiver.url}/hook` } },
        { traceparent: TRACEPARENT, tracestate: 'vendor=abc' },
      );
      assert.equal(created.status, 201, created.text);
      const id = created.body.id as string;
      const delivered = await receiver.request(0);
      const header = delivered.headers.traceparent;
      assert.equal(typeof header, 'string');
      assert.equal(delivered.headers.tracestate, 'vendor=abc', 'the tracestate travels with it');
      const [, traceId, spanId] = String(header).split('-');
      assert.equal(traceId, CLIENT_TRACE);

      const all = await otlp.waitFor((spans) => spans.some((span) => span.spanId === spanId), 30_000);
      const delivery = one(all, (span) => span.spanId === spanId, 'delivery span');
      const producer = one(ofJob(all, id), isProducer, 'PRODUCER span');
      assert.equal(delivery.kind, 'CLIENT');
      assert.equal(delivery.name, 'POST');
      assert.equal(delivery.parentSpanId, producer.spanId);
      assert.equal(delivery.attributes['http.response.status_code'], 204);
      assert.equal(delivery.attributes['kiln.callback.event'], 'job.completed');
      assert.equal(delivery.attributes['url.full'], `${receiver.url}/REDACTED`, 'no path: it may hold a secret');
    } finally {
      await receiver.close();
    }
  });

  it('roots the trace of a job a schedule made in the tick’s PRODUCER span', async () => {
    const put = await server.request('PUT', '/v1/schedules/traced', { cron: '0 0 1 1 *', job: { type: 'test.trace' } });
    assert.equal(put.status, 201, put.text);
    // A request's traceparent does not carry into a tick: the schedule, not the caller, made the job.
    const fired = await server.request('POST', '/v1/schedules/traced/trigger', undefined, { traceparent: TRACEPARENT });
    assert.equal(fired.status, 201, fired.text);
    const id = fired.body.id as string;
    const job = await server.waitForJob(id);
    const all = await otlp.waitFor((spans) => ofJob(spans, id).some((span) => span.kind === 'CONSUMER'), 30_000);
    const producer = one(ofJob(all, id), isProducer, 'PRODUCER span');
    assert.equal(producer.name, 'send test.trace');
    assert.equal(producer.parentSpanId, null, 'the root of its own trace');
    assert.notEqual(producer.traceId, CLIENT_TRACE);
    assert.equal(producer.attributes['kiln.schedule'], 'traced');
    const consumer = one(ofJob(all, id), attempt(1), 'attempt');
    assert.equal(consumer.parentSpanId, producer.spanId);
    assert.equal((job.result as { traceparent: string }).traceparent, `00-${producer.traceId}-${consumer.spanId}-01`);
  });

  it('keeps an attempt of a job stored without a context in one trace: its wait inside it', async () => {
    // As a job submitted while tracing was off is stored.
    const [inserted] = await insertOk(server.kiln.store, [newJob({ id: newJobId(Date.now()), type: 'test.trace' })]);
    const id = inserted!.id;
    // A submission wakes dispatch, which claims both.
    assert.equal((await server.request('POST', '/v1/jobs', { type: 'test.trace' })).status, 201);
    const job = await server.waitForJob(id);
    const all = await otlp.waitFor((spans) => ofJob(spans, id).some((span) => span.name === 'wait test.trace'), 30_000);
    const consumer = one(ofJob(all, id), attempt(1), 'attempt');
    const wait = one(ofJob(all, id), (span) => span.name === 'wait test.trace', 'wait');
    assert.equal(consumer.parentSpanId, null, 'the attempt is the root');
    assert.equal(wait.traceId, consumer.traceId);
    assert.equal(wait.parentSpanId, consumer.spanId);
    assert.equal((job.result as { traceparent: string }).traceparent, `00-${consumer.traceId}-${consumer.spanId}-01`);
  });

  it('starts a trace of its own for a request without a traceparent, or with one that is not valid', async () => {
    const invalid = '00-00000000000000000000000000000000-00f067aa0ba902b7-01';
    for (const headers of [{}, { traceparent: invalid }] as Record<string, string>[]) {
      const created = await server.request('POST', '/v1/jobs', { type: 'test.trace' }, headers);
      assert.equal(created.status, 201, created.text);
      const id = created.body.id as string;
      const job = await server.waitForJob(id);
      const all = await otlp.waitFor((spans) => ofJob(spans, id).some((span) => span.kind === 'CONSUMER'), 30_000);
      const producer = one(ofJob(all, id), isProducer, 'PRODUCER span');
      assert.equal(producer.parentSpanId, null, 'a root span');
      assert.notEqual(producer.traceId, CLIENT_TRACE);
      const consumer = one(ofJob(all, id), attempt(1), 'attempt');
      assert.equal(consumer.traceId, producer.traceId);
      assert.equal((job.result as { traceparent: string }).traceparent, `00-${producer.traceId}-${consumer.spanId}-01`);
    }
  });
});

describe('traces off', () => {
  it('stores the request’s context and hands it to the handler, exporting nothing', async () => {
    const server = await startServer({ KILN_STORE: 'sqlite' });
    try {
      const created = await server.request(
        'POST',
        '/v1/jobs',
        { type: 'test.trace' },
        { traceparent: TRACEPARENT, tracestate: 'vendor=abc' },
      );
      const job = await server.waitForJob(created.body.id);
      assert.deepEqual(job.result, { traceparent: TRACEPARENT, tracestate: 'vendor=abc' });
      const plain = await server.request('POST', '/v1/jobs', { type: 'test.trace' });
      assert.deepEqual((await server.waitForJob(plain.body.id)).result, { traceparent: null, tracestate: null });
      // The typed client sends the context as the W3C headers, for a batch too.
      const client = new KilnClient({ url: server.url });
      const { jobs } = await client.submitBatch([{ type: 'test.trace' }], { traceparent: TRACEPARENT });
      assert.deepEqual((await server.waitForJob(jobs[0]!.id)).result, { traceparent: TRACEPARENT, tracestate: null });
    } finally {
      await server.close();
    }
  });
});

describe('traces across processes (OTLP over http/protobuf)', () => {
  const dirs: string[] = [];
  const schema = freshSchemaName();
  after(async () => {
    await killAllKilns();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    await dropSchema(schema);
  });

  /**
   * Submitted while dispatch is paused, its PRODUCER span exported, the server SIGKILLed;
   * the next server (`second`) resumes and runs it: its attempt is in the same trace,
   * a child of the PRODUCER span the first server made, and log lines about it carry
   * the trace id.
   */
  async function submitKillRun(env: Record<string, string>, label: string): Promise<void> {
    const otlp = await startOtlpReceiver();
    try {
      const withOtel = { ...env, ...otelEnv(otlp, 'http/protobuf') };
      const first = await spawnKiln(withOtel);
      assert.equal((await first.request('POST', '/v1/queue/pause')).status, 200);
      const created = await first.request('POST', '/v1/jobs', { type: 'test.trace' }, { traceparent: TRACEPARENT });
      assert.equal(created.status, 201, created.text);
      const id = created.body.id as string;
      const requestLine = await first.waitForLog(/^POST \/v1\/jobs 201/);
      assert.equal(requestLine.trace_id, CLIENT_TRACE, 'the request’s log line carries its trace id');
      const [producer] = ofJob(await otlp.waitFor((spans) => ofJob(spans, id).some(isProducer), 30_000), id);
      assert.ok(producer !== undefined && producer.protocol === 'protobuf');
      first.child.kill('SIGKILL');
      await first.exited;

      const second = await spawnKiln(withOtel);
      assert.equal((await second.request('POST', '/v1/queue/resume')).status, 200);
      const job = await second.waitForJob(id);
      assert.equal(job.status, 'completed', `${label}: ${JSON.stringify(job)}`);
      const all = await otlp.waitFor((spans) => ofJob(spans, id).some((span) => span.kind === 'CONSUMER'), 30_000);
      const consumer = one(ofJob(all, id), attempt(1), 'the attempt on the second server');
      assert.equal(consumer.traceId, CLIENT_TRACE, label);
      assert.equal(consumer.parentSpanId, producer.spanId, `${label}: a child of the first server’s PRODUCER span`);
      assert.equal(job.result.traceparent, `00-${CLIENT_TRACE}-${consumer.spanId}-01`);
      second.child.kill('SIGTERM');
      await second.exited;
    } finally {
      await otlp.close();
    }
  }

  it('logs a collector that cannot be reached as one fault, never its headers’ secret', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kiln-trace-'));
    dirs.push(dir);
    const kiln = await spawnKiln({
      KILN_STORE: `sqlite:${join(dir, 'kiln.db')}`,
      OTEL_EXPORTER_OTLP_ENDPOINT: await closedPortUrl(),
      OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer%20otel-secret-5e1f',
      OTEL_BSP_SCHEDULE_DELAY: '10',
    });
    for (let n = 0; n < 8; n++) {
      const created = await kiln.request('POST', '/v1/jobs', { type: 'test.trace' }, { traceparent: TRACEPARENT });
      assert.equal((await kiln.waitForJob(created.body.id)).status, 'completed', 'jobs run whatever the collector');
    }
    const fault = await kiln.waitForLog(/exporting spans to/);
    assert.equal(fault.level, 40, 'a warning');
    kiln.child.kill('SIGTERM');
    await kiln.exited;
    const lines = kiln.logs.filter((line) => /exporting spans to/.test(line.msg));
    assert.equal(lines.length, 1, `one line for the fault: ${JSON.stringify(lines)}`);
    const everything = JSON.stringify(kiln.logs) + kiln.stderr();
    assert.ok(!everything.includes('otel-secret-5e1f'), 'the exporter’s headers never reach the log');
  });

  it('SQLite: a SIGKILL between submit and run, the restarted server runs it in the same trace', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kiln-trace-'));
    dirs.push(dir);
    await submitKillRun({ KILN_STORE: `sqlite:${join(dir, 'kiln.db')}` }, 'SQLite');
  });

  it('PostgreSQL: submitted on one server, SIGKILLed, run by another server in the same trace', async () => {
    await submitKillRun({ KILN_STORE: TEST_PG_URL, KILN_PG_SCHEMA: schema }, 'PostgreSQL');
  });
});
