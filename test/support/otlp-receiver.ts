import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import protobuf from 'protobufjs';

/** An attribute's value once decoded: an AnyValue as plain JS (int64 as number, bytes as a Buffer, empty as null). */
export type AttributeValue = string | number | boolean | null | Uint8Array | AttributeValue[] | Attributes;

/** Attributes (or a kvlist) by key. */
export interface Attributes {
  [key: string]: AttributeValue;
}

/** One span as the receiver got it, in the same shape whichever protocol carried it. */
export interface ReceivedSpan {
  /** 32 lowercase hex digits. */
  traceId: string;
  /** 16 lowercase hex digits. */
  spanId: string;
  /** Null for a root span (empty on the wire). */
  parentSpanId: string | null;
  /** Null when empty on the wire. */
  traceState: string | null;
  flags: number;
  name: string;
  kind: SpanKind;
  startNs: bigint;
  endNs: bigint;
  attributes: Attributes;
  events: { name: string; timeNs: bigint; attributes: Attributes }[];
  links: { traceId: string; spanId: string; traceState: string | null; flags: number; attributes: Attributes }[];
  status: { code: StatusCode; message: string };
  /** The instrumentation scope that made the span. */
  scope: { name: string; version: string };
  /** The resource attribute service.name, when it is a string. */
  service: string | null;
  resource: Attributes;
  protocol: 'json' | 'protobuf';
}

export type SpanKind = 'UNSPECIFIED' | 'INTERNAL' | 'SERVER' | 'CLIENT' | 'PRODUCER' | 'CONSUMER';
export type StatusCode = 'UNSET' | 'OK' | 'ERROR';

/** One HTTP request the receiver got, whatever came of it. */
export interface OtlpRequest {
  method: string;
  path: string;
  /** The media type alone, lowercased, without parameters such as charset. */
  contentType: string;
  headers: IncomingHttpHeaders;
  /** The status the receiver answered. */
  status: number;
}

/** A running OTLP/HTTP trace receiver. */
export interface OtlpReceiver {
  /** Base URL, e.g. http://127.0.0.1:PORT; exporters post to `${url}/v1/traces`. */
  url: string;
  /** Every span received, in arrival order. */
  spans: ReceivedSpan[];
  /** Every request received, in arrival order. */
  requests: OtlpRequest[];
  /**
   * Resolves with all spans so far as soon as `predicate` holds over them (checked now and at
   * each arrival); rejects after `timeoutMs` (default 20 000) naming the spans received.
   */
  waitFor(predicate: (spans: ReceivedSpan[]) => boolean, timeoutMs?: number): Promise<ReceivedSpan[]>;
  /** Resolves with the first span of that name (or matching that predicate), waiting for it if need be. */
  span(match: string | ((span: ReceivedSpan) => boolean), timeoutMs?: number): Promise<ReceivedSpan>;
  /** Stops the server; pending waits reject. */
  close(): Promise<void>;
}

/**
 * The part of the OTLP protos (opentelemetry/proto/{collector/trace,trace,common,resource}/v1)
 * that an ExportTraceServiceRequest needs, with the official field numbers. Fields left out are
 * skipped by the decoder.
 */
const OTLP_TRACE_PROTO = `
syntax = "proto3";
package otlp;

message AnyValue {
  oneof value {
    string string_value = 1;
    bool bool_value = 2;
    int64 int_value = 3;
    double double_value = 4;
    ArrayValue array_value = 5;
    KeyValueList kvlist_value = 6;
    bytes bytes_value = 7;
  }
}
message ArrayValue { repeated AnyValue values = 1; }
message KeyValueList { repeated KeyValue values = 1; }
message KeyValue { string key = 1; AnyValue value = 2; }
message InstrumentationScope { string name = 1; string version = 2; repeated KeyValue attributes = 3; }
message Resource { repeated KeyValue attributes = 1; }

message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; string schema_url = 3; }
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; string schema_url = 3; }
message Span {
  bytes trace_id = 1;
  bytes span_id = 2;
  string trace_state = 3;
  bytes parent_span_id = 4;
  fixed32 flags = 16;
  string name = 5;
  int32 kind = 6;
  fixed64 start_time_unix_nano = 7;
  fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9;
  repeated Event events = 11;
  repeated Link links = 13;
  Status status = 15;

  message Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue attributes = 3; }
  message Link {
    bytes trace_id = 1;
    bytes span_id = 2;
    string trace_state = 3;
    repeated KeyValue attributes = 4;
    fixed32 flags = 6;
  }
}
message Status { string message = 2; int32 code = 3; }
`;

const ExportTraceServiceRequest = protobuf.parse(OTLP_TRACE_PROTO).root.lookupType('otlp.ExportTraceServiceRequest');

const KINDS: SpanKind[] = ['UNSPECIFIED', 'INTERNAL', 'SERVER', 'CLIENT', 'PRODUCER', 'CONSUMER'];
const STATUS_CODES: StatusCode[] = ['UNSET', 'OK', 'ERROR'];

/** Starts an OTLP/HTTP trace receiver: a real node:http server on 127.0.0.1 at a free port. */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const requests: OtlpRequest[] = [];
  const waiters = new Set<{ check: () => void; fail: (error: Error) => void }>();

  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const contentType = (request.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
      const answer = (status: number, headers: Record<string, string> = {}, body: string | Buffer = '') => {
        requests.push({
          method: request.method ?? '',
          path: request.url ?? '',
          contentType,
          headers: request.headers,
          status,
        });
        response.writeHead(status, headers).end(body);
      };
      const path = new URL(request.url ?? '/', 'http://localhost').pathname;
      if (path !== '/v1/traces') return answer(404);
      if (request.method !== 'POST') return answer(405, { allow: 'POST' });
      const protocol =
        contentType === 'application/json' ? 'json' : contentType === 'application/x-protobuf' ? 'protobuf' : null;
      if (protocol === null) return answer(415);

      let received: ReceivedSpan[];
      try {
        let body = Buffer.concat(chunks);
        if (request.headers['content-encoding'] === 'gzip') body = gunzipSync(body);
        received = toSpans(decode(protocol, body), protocol);
      } catch (error) {
        return answer(400, { 'content-type': 'text/plain' }, `bad OTLP ${protocol} body: ${(error as Error).message}`);
      }
      spans.push(...received);
      // An empty ExportTraceServiceResponse: no partial_success.
      if (protocol === 'json') answer(200, { 'content-type': 'application/json' }, '{}');
      else answer(200, { 'content-type': 'application/x-protobuf' });
      for (const waiter of waiters) waiter.check();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));

  const receiver: OtlpReceiver = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    requests,
    waitFor(predicate, timeoutMs = 20_000) {
      return new Promise((resolve, reject) => {
        const waiter = {
          check() {
            let done: boolean;
            try {
              done = predicate(spans);
            } catch (error) {
              return waiter.fail(error as Error);
            }
            if (done) settle(() => resolve(spans.slice()));
          },
          fail(error: Error) {
            settle(() => reject(error));
          },
        };
        const timer = setTimeout(() => {
          const names = spans.map((span) => span.name).join(', ') || 'none';
          waiter.fail(new Error(`OTLP receiver: not seen within ${timeoutMs} ms; spans received: ${names}`));
        }, timeoutMs);
        function settle(outcome: () => void) {
          clearTimeout(timer);
          waiters.delete(waiter);
          outcome();
        }
        waiters.add(waiter);
        waiter.check();
      });
    },
    async span(match, timeoutMs) {
      const matches = typeof match === 'string' ? (span: ReceivedSpan) => span.name === match : match;
      const all = await receiver.waitFor((received) => received.some(matches), timeoutMs);
      return all.find(matches)!;
    },
    async close() {
      for (const waiter of waiters) waiter.fail(new Error('OTLP receiver closed'));
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return receiver;
}

/**
 * Parses a body into the proto's object shape with lowerCamelCase keys. From protobuf, ids and
 * bytes stay bytes and 64-bit integers become decimal strings; from JSON, ids are hex, bytes
 * base64 and 64-bit integers strings or numbers. `toSpans` takes either.
 */
function decode(protocol: 'json' | 'protobuf', body: Buffer): Wire {
  if (protocol === 'json') {
    const parsed: unknown = JSON.parse(body.toString('utf8'));
    if (!isObject(parsed)) throw new Error('not a JSON object');
    return parsed;
  }
  const message = ExportTraceServiceRequest.decode(body);
  return ExportTraceServiceRequest.toObject(message, { longs: String }) as Wire;
}

/** A decoded message, before its fields are checked. */
type Wire = Record<string, unknown>;

function toSpans(request: Wire, protocol: 'json' | 'protobuf'): ReceivedSpan[] {
  return list(request.resourceSpans).flatMap((resourceSpans) => {
    const resource = attributes(object(resourceSpans.resource).attributes);
    const service = typeof resource['service.name'] === 'string' ? resource['service.name'] : null;
    return list(resourceSpans.scopeSpans).flatMap((scopeSpans) => {
      const scope = object(scopeSpans.scope);
      const scopeName = { name: string(scope.name), version: string(scope.version) };
      return list(scopeSpans.spans).map((span): ReceivedSpan => ({
        traceId: requiredId(span.traceId, 16, 'traceId'),
        spanId: requiredId(span.spanId, 8, 'spanId'),
        parentSpanId: id(span.parentSpanId, 8, 'parentSpanId'),
        traceState: string(span.traceState) || null,
        flags: Number(span.flags ?? 0),
        name: string(span.name),
        kind: enumName(KINDS, span.kind, 'kind'),
        startNs: nanos(span.startTimeUnixNano),
        endNs: nanos(span.endTimeUnixNano),
        attributes: attributes(span.attributes),
        events: list(span.events).map((event) => ({
          name: string(event.name),
          timeNs: nanos(event.timeUnixNano),
          attributes: attributes(event.attributes),
        })),
        links: list(span.links).map((link) => ({
          traceId: requiredId(link.traceId, 16, 'link traceId'),
          spanId: requiredId(link.spanId, 8, 'link spanId'),
          traceState: string(link.traceState) || null,
          flags: Number(link.flags ?? 0),
          attributes: attributes(link.attributes),
        })),
        status: {
          code: enumName(STATUS_CODES, object(span.status).code, 'status code'),
          message: string(object(span.status).message),
        },
        scope: scopeName,
        service,
        resource,
        protocol,
      }));
    });
  });
}

function attributes(keyValues: unknown): Attributes {
  const result: Attributes = {};
  for (const keyValue of list(keyValues)) result[string(keyValue.key)] = anyValue(keyValue.value);
  return result;
}

function anyValue(value: unknown): AttributeValue {
  const v = object(value);
  if (v.stringValue != null) return string(v.stringValue);
  if (v.boolValue != null) {
    if (typeof v.boolValue !== 'boolean') throw new Error('boolValue is not a boolean');
    return v.boolValue;
  }
  if (v.intValue != null) return Number(integer(v.intValue, 'intValue'));
  if (v.doubleValue != null) {
    // Proto JSON may spell NaN and the infinities as strings.
    if (typeof v.doubleValue !== 'number' && typeof v.doubleValue !== 'string') throw new Error('bad doubleValue');
    return Number(v.doubleValue);
  }
  if (v.arrayValue != null) return list(object(v.arrayValue).values).map(anyValue);
  if (v.kvlistValue != null) return attributes(object(v.kvlistValue).values);
  if (v.bytesValue != null) return bytes(v.bytesValue);
  return null;
}

/** An id as lowercase hex, or null when absent or empty; anything else but `length` bytes is refused. */
function id(value: unknown, length: number, what: string): string | null {
  const hex = value instanceof Uint8Array ? Buffer.from(value).toString('hex') : string(value).toLowerCase();
  if (hex === '') return null;
  if (!new RegExp(`^[0-9a-f]{${length * 2}}$`).test(hex)) throw new Error(`${what} is not ${length} bytes of hex`);
  return hex;
}

function requiredId(value: unknown, length: number, what: string): string {
  const hex = id(value, length, what);
  if (hex === null) throw new Error(`${what} is empty`);
  return hex;
}

/** Bytes as they came in protobuf, or from the base64 of OTLP/JSON. */
function bytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return value;
  return Buffer.from(string(value), 'base64');
}

function nanos(value: unknown): bigint {
  const n = integer(value ?? 0, 'time');
  if (n < 0n) throw new Error('negative time');
  return n;
}

function integer(value: unknown, what: string): bigint {
  if ((typeof value === 'string' && /^-?\d+$/.test(value)) || (typeof value === 'number' && Number.isInteger(value)))
    return BigInt(value);
  throw new Error(`${what} is not an integer: ${JSON.stringify(value)}`);
}

function enumName<T>(names: T[], value: unknown, what: string): T {
  const name = names[Number(value ?? 0)];
  if (name === undefined) throw new Error(`unknown ${what}: ${JSON.stringify(value)}`);
  return name;
}

// Absent and JSON null both read as the field's default.

function string(value: unknown): string {
  if (value == null) return '';
  if (typeof value !== 'string') throw new Error(`expected a string, got ${JSON.stringify(value)}`);
  return value;
}

function object(value: unknown): Wire {
  if (value == null) return {};
  if (!isObject(value)) throw new Error(`expected an object, got ${JSON.stringify(value)}`);
  return value;
}

function list(value: unknown): Wire[] {
  if (value == null) return [];
  if (!Array.isArray(value)) throw new Error(`expected an array, got ${JSON.stringify(value)}`);
  return value.map(object);
}

function isObject(value: unknown): value is Wire {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
