import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags } from '@opentelemetry/api';
import { TraceState } from '@opentelemetry/core';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { startOtlpReceiver, type ReceivedSpan } from '../support/otlp-receiver.js';

/** Bits 8 and 9 of OTLP span flags: "whether the parent is remote is known" and "it is remote". */
const HAS_IS_REMOTE = 0x100;

describe('OTLP/HTTP trace receiver', () => {
  for (const protocol of ['json', 'protobuf'] as const) {
    it(`decodes an official SDK's OTLP/${protocol} export span for span`, async () => {
      const receiver = await startOtlpReceiver();
      const url = `${receiver.url}/v1/traces`;
      const exporter = protocol === 'json' ? new JsonExporter({ url }) : new ProtobufExporter({ url });
      const provider = new BasicTracerProvider({
        resource: resourceFromAttributes({ 'service.name': 'otlp-test' }),
        spanProcessors: [new SimpleSpanProcessor(exporter)],
      });
      try {
        const tracer = provider.getTracer('otlp-test-scope', '1.2.3');
        const parent = tracer.startSpan('enqueue', {
          kind: SpanKind.PRODUCER,
          // Past 2^53 ns: the times must come through as exact bigints.
          startTime: [1_800_000_000, 123_456_789],
          attributes: {
            'job.type': 'noop',
            'job.priority': 7,
            'job.retried': true,
            'job.weight': 0.25,
            'job.tags': ['a', 'b'],
            'job.sizes': [1, 2, 3],
          },
        });
        parent.addEvent('stored', { 'job.id': 'j-1', 'job.attempt': 2 }, [1_800_000_000, 500_000_001]);
        parent.setStatus({ code: SpanStatusCode.ERROR, message: 'queue full' });
        const linked = {
          traceId: '0af7651916cd43dd8448eb211c80319c',
          spanId: 'b7ad6b7169203331',
          traceFlags: TraceFlags.SAMPLED,
          traceState: new TraceState('vendor=value'),
        };
        const child = tracer.startSpan(
          'run',
          {
            kind: SpanKind.CONSUMER,
            startTime: [1_800_000_000, 600_000_000],
            links: [{ context: linked, attributes: { 'link.reason': 'retry' } }],
          },
          trace.setSpan(ROOT_CONTEXT, parent),
        );
        child.end([1_800_000_000, 700_000_000]);
        parent.end([1_800_000_001, 0]);
        await provider.forceFlush();

        const spans = await receiver.waitFor((received) => received.length === 2);
        const byName = (name: string) => spans.find((span) => span.name === name)!;
        const common = {
          traceId: parent.spanContext().traceId,
          traceState: null,
          flags: HAS_IS_REMOTE | TraceFlags.SAMPLED,
          scope: { name: 'otlp-test-scope', version: '1.2.3' },
          service: 'otlp-test',
          resource: { 'service.name': 'otlp-test' },
          protocol,
        } satisfies Partial<ReceivedSpan>;
        assert.deepEqual(byName('enqueue'), {
          ...common,
          spanId: parent.spanContext().spanId,
          parentSpanId: null,
          name: 'enqueue',
          kind: 'PRODUCER',
          startNs: 1_800_000_000_123_456_789n,
          endNs: 1_800_000_001_000_000_000n,
          attributes: {
            'job.type': 'noop',
            'job.priority': 7,
            'job.retried': true,
            'job.weight': 0.25,
            'job.tags': ['a', 'b'],
            'job.sizes': [1, 2, 3],
          },
          events: [
            { name: 'stored', timeNs: 1_800_000_000_500_000_001n, attributes: { 'job.id': 'j-1', 'job.attempt': 2 } },
          ],
          links: [],
          status: { code: 'ERROR', message: 'queue full' },
        } satisfies ReceivedSpan);
        assert.deepEqual(byName('run'), {
          ...common,
          spanId: child.spanContext().spanId,
          parentSpanId: parent.spanContext().spanId,
          name: 'run',
          kind: 'CONSUMER',
          startNs: 1_800_000_000_600_000_000n,
          endNs: 1_800_000_000_700_000_000n,
          attributes: {},
          events: [],
          links: [
            {
              traceId: linked.traceId,
              spanId: linked.spanId,
              traceState: 'vendor=value',
              flags: HAS_IS_REMOTE | TraceFlags.SAMPLED,
              attributes: { 'link.reason': 'retry' },
            },
          ],
          status: { code: 'UNSET', message: '' },
        } satisfies ReceivedSpan);

        // One export per ended span (SimpleSpanProcessor), both to /v1/traces in this protocol.
        const contentType = protocol === 'json' ? 'application/json' : 'application/x-protobuf';
        assert.deepEqual(
          receiver.requests.map((request) => [request.method, request.path, request.contentType, request.status]),
          [
            ['POST', '/v1/traces', contentType, 200],
            ['POST', '/v1/traces', contentType, 200],
          ],
        );
      } finally {
        await provider.shutdown();
        await receiver.close();
      }
    });
  }

  it('reads hand-written OTLP/JSON: int64 as strings, uppercase hex ids, kvlist, bytes, empty parent', async () => {
    const receiver = await startOtlpReceiver();
    try {
      const body = {
        resourceSpans: [
          {
            resource: { attributes: [{ key: 'host.name', value: { stringValue: 'box' } }] },
            scopeSpans: [
              {
                scope: { name: 'hand' },
                spans: [
                  {
                    traceId: '5B8EFFF798038103D269B633813FC60C',
                    spanId: 'EEE19B7EC3C1B174',
                    parentSpanId: '',
                    name: 'by hand',
                    kind: 2,
                    startTimeUnixNano: '1800000000000000001',
                    endTimeUnixNano: 1000,
                    attributes: [
                      { key: 'big', value: { intValue: '9007199254740993' } },
                      { key: 'small', value: { intValue: -3 } },
                      { key: 'blob', value: { bytesValue: Buffer.from([1, 2, 255]).toString('base64') } },
                      {
                        key: 'nested',
                        value: {
                          kvlistValue: {
                            values: [
                              { key: 'n', value: { doubleValue: 'NaN' } },
                              { key: 'off', value: { boolValue: false } },
                            ],
                          },
                        },
                      },
                      { key: 'empty', value: {} },
                    ],
                    status: { code: 1 },
                  },
                ],
              },
            ],
          },
        ],
      };
      const response = await fetch(`${receiver.url}/v1/traces`, {
        method: 'POST',
        headers: { 'content-type': 'application/json; charset=utf-8' },
        body: JSON.stringify(body),
      });
      assert.equal(response.status, 200);
      assert.deepEqual(await response.json(), {});

      const span = await receiver.span('by hand');
      assert.equal(span.traceId, '5b8efff798038103d269b633813fc60c');
      assert.equal(span.spanId, 'eee19b7ec3c1b174');
      assert.equal(span.parentSpanId, null);
      assert.equal(span.kind, 'SERVER');
      assert.equal(span.startNs, 1_800_000_000_000_000_001n);
      assert.equal(span.endNs, 1000n);
      assert.deepEqual(span.status, { code: 'OK', message: '' });
      assert.equal(span.service, null);
      assert.deepEqual(span.resource, { 'host.name': 'box' });
      assert.deepEqual(span.scope, { name: 'hand', version: '' });
      // An int64 past 2^53 is rounded to the nearest number: attributes are plain JS values.
      assert.equal(span.attributes.big, 9007199254740992);
      assert.equal(span.attributes.small, -3);
      assert.deepEqual(span.attributes.blob, Buffer.from([1, 2, 255]));
      assert.deepEqual(span.attributes.nested, { n: NaN, off: false });
      assert.equal(span.attributes.empty, null);
    } finally {
      await receiver.close();
    }
  });

  it('answers 400 to bodies it cannot decode, 404 off /v1/traces, 415 to other media types', async () => {
    const receiver = await startOtlpReceiver();
    try {
      const post = (path: string, contentType: string, body: string | Uint8Array) =>
        fetch(`${receiver.url}${path}`, { method: 'POST', headers: { 'content-type': contentType }, body });
      assert.equal((await post('/v1/traces', 'application/json', '{"resourceSpans": [')).status, 400);
      assert.equal((await post('/v1/traces', 'application/json', '{"resourceSpans": {}}')).status, 400);
      // Field 1, length-delimited, with a length that runs past the end.
      assert.equal((await post('/v1/traces', 'application/x-protobuf', new Uint8Array([0x0a, 0x7f]))).status, 400);
      assert.equal((await post('/v1/metrics', 'application/json', '{}')).status, 404);
      assert.equal((await post('/v1/traces', 'text/plain', '{}')).status, 415);
      assert.deepEqual(receiver.spans, []);
      assert.deepEqual(
        receiver.requests.map((request) => request.status),
        [400, 400, 400, 404, 415],
      );
    } finally {
      await receiver.close();
    }
  });

  it('waitFor resolves at the arrival that makes its predicate hold, and times out naming what came', async () => {
    const receiver = await startOtlpReceiver();
    try {
      const send = (name: string) =>
        fetch(`${receiver.url}/v1/traces`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            resourceSpans: [{ scopeSpans: [{ spans: [{ traceId: 'ab'.repeat(16), spanId: 'cd'.repeat(8), name }] }] }],
          }),
        });
      const both = receiver.waitFor((spans) => spans.length === 2);
      await send('first');
      await send('second');
      assert.deepEqual(
        (await both).map((span) => span.name),
        ['first', 'second'],
      );
      await assert.rejects(
        receiver.waitFor((spans) => spans.some((span) => span.name === 'third'), 50),
        /spans received: first, second/,
      );
    } finally {
      await receiver.close();
    }
  });
});
