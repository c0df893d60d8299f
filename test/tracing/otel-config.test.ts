import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, loadConfig } from '../../src/config.js';
import { tracingConfig } from '../../src/tracing/otel-config.js';
import {
  formatTraceparent,
  parseTraceparent,
  readStoredTrace,
  storedHeaders,
  storedTrace,
} from '../../src/tracing/trace-context.js';

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN = '00f067aa0ba902b7';

describe('tracing configuration (OTEL_* variables)', () => {
  it('is off without an endpoint, with OTEL_TRACES_EXPORTER=none, or with OTEL_SDK_DISABLED=true', () => {
    assert.equal(tracingConfig({}), null);
    assert.equal(tracingConfig({ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_EXPORTER: 'otlp' }), null);
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' };
    assert.equal(tracingConfig({ ...endpoint, OTEL_TRACES_EXPORTER: 'none' }), null);
    assert.equal(tracingConfig({ ...endpoint, OTEL_SDK_DISABLED: 'true' }), null);
    assert.notEqual(tracingConfig({ ...endpoint, OTEL_TRACES_EXPORTER: 'none, otlp' }), null, 'a list naming otlp');
  });

  it('sends to the traces endpoint as given, or to the general one with /v1/traces', () => {
    assert.equal(
      tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })?.url,
      'http://collector:4318/v1/traces',
    );
    assert.equal(
      tracingConfig({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example.com/custom/path',
      })?.url,
      'https://traces.example.com/custom/path',
    );
  });

  it('takes the defaults of the specification, and the signal’s own variables over the general ones', () => {
    const config = tracingConfig({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
      OTEL_EXPORTER_OTLP_HEADERS: 'api-key=general,x-team=kiln',
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'api-key=traces',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_RESOURCE_ATTRIBUTES: 'service.name=from-resource,deployment.environment=prod',
    });
    assert.ok(config !== null);
    assert.equal(config.protocol, 'http/json');
    assert.deepEqual(config.headers, { 'api-key': 'traces', 'x-team': 'kiln' });
    assert.equal(config.serviceName, 'from-resource');
    assert.equal(config.resource['deployment.environment'], 'prod');
    assert.equal(config.sampler, 'parentbased_always_on');
    assert.equal(config.timeoutMs, 10_000);
    assert.deepEqual(config.batch, {
      scheduledDelayMs: 5000,
      exportTimeoutMs: 30_000,
      maxQueueSize: 2048,
      maxExportBatchSize: 512,
    });
    const base = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' };
    assert.equal(tracingConfig(base)?.protocol, 'http/protobuf');
    assert.equal(tracingConfig({ ...base, OTEL_SERVICE_NAME: 'mine' })?.serviceName, 'mine');
    assert.equal(tracingConfig(base)?.serviceName, 'kiln');
  });

  it('refuses what it cannot honour, naming the variable and never repeating a URL', () => {
    const base = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' };
    assert.throws(
      () => tracingConfig({ ...base, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' }),
      /OTEL_EXPORTER_OTLP_TRACES_PROTOCOL/,
    );
    assert.throws(() => tracingConfig({ ...base, OTEL_TRACES_EXPORTER: 'zipkin' }), /OTEL_TRACES_EXPORTER.*zipkin/);
    assert.throws(() => tracingConfig({ ...base, OTEL_TRACES_SAMPLER: 'sometimes' }), /OTEL_TRACES_SAMPLER/);
    assert.throws(
      () => tracingConfig({ ...base, OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '2' }),
      /OTEL_TRACES_SAMPLER_ARG/,
    );
    // The argument is read only by the samplers it is for.
    assert.equal(tracingConfig({ ...base, OTEL_TRACES_SAMPLER_ARG: 'x' })?.ratio, 1);
    assert.throws(() => tracingConfig({ ...base, OTEL_BSP_SCHEDULE_DELAY: '-1' }), /OTEL_BSP_SCHEDULE_DELAY/);
    let message = '';
    try {
      tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector with secret-token-9f2' });
    } catch (error) {
      message = (error as Error).message;
    }
    assert.match(message, /OTEL_EXPORTER_OTLP_ENDPOINT must be an http\(s\) URL/);
    assert.ok(!message.includes('secret-token-9f2'), message);
    assert.throws(
      () => loadConfig({ KILN_STORE: 'memory', OTEL_EXPORTER_OTLP_ENDPOINT: 'ftp://collector' }),
      (error: unknown) => error instanceof ConfigError && /http\(s\) URL, not ftp:/.test(error.message),
    );
  });
});

describe('W3C trace context', () => {
  it('reads a valid traceparent and keeps its tracestate', () => {
    assert.deepEqual(parseTraceparent(`00-${TRACE}-${SPAN}-01`, ' vendor=abc , other=1 '), {
      traceId: TRACE,
      spanId: SPAN,
      flags: 1,
      state: 'vendor=abc , other=1',
    });
    assert.equal(parseTraceparent(`00-${TRACE.toUpperCase()}-${SPAN}-00`)?.flags, 0);
    // A later version may carry more fields: what version 00 defines is read.
    assert.equal(parseTraceparent(`01-${TRACE}-${SPAN}-01-more`)?.traceId, TRACE);
  });

  it('ignores one that is not valid, as the specification says', () => {
    for (const bad of [
      undefined,
      '',
      'nonsense',
      `ff-${TRACE}-${SPAN}-01`,
      `00-${'0'.repeat(32)}-${SPAN}-01`,
      `00-${TRACE}-${'0'.repeat(16)}-01`,
      `00-${TRACE}-${SPAN}-01-extra`,
      `00-${TRACE.slice(1)}-${SPAN}-01`,
    ]) {
      assert.equal(parseTraceparent(bad), null, String(bad));
    }
    assert.equal(parseTraceparent(`00-${TRACE}-${SPAN}-01`, 'x'.repeat(600))?.state, null, 'a tracestate too long');
  });

  it('stores the context as one text and reads it back', () => {
    const context = { traceId: TRACE, spanId: SPAN, flags: 1, state: 'vendor=abc' };
    const stored = storedTrace(context);
    assert.equal(stored, `00-${TRACE}-${SPAN}-01 vendor=abc`);
    assert.deepEqual(readStoredTrace(stored), context);
    assert.deepEqual(storedHeaders(stored), { traceparent: formatTraceparent(context), tracestate: 'vendor=abc' });
    assert.deepEqual(storedHeaders(`00-${TRACE}-${SPAN}-01`), {
      traceparent: `00-${TRACE}-${SPAN}-01`,
      tracestate: null,
    });
    assert.equal(storedHeaders(null), null);
  });
});
