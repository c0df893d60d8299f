import { parseKeyPairsIntoRecord } from '@opentelemetry/core';

/**
 * Tracing as the standard OpenTelemetry variables configure it
 * (opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/). Kiln reads
 * them itself, from the environment its configuration is read from, so one process and
 * one test configure it the same way; a bad value stops the start with its reason.
 */
export interface TracingConfig {
  /** Where spans are POSTed: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces. */
  url: string;
  protocol: 'http/json' | 'http/protobuf';
  /** OTEL_EXPORTER_OTLP_HEADERS and …_TRACES_HEADERS (the latter wins): secrets, never logged. */
  headers: Record<string, string>;
  timeoutMs: number;
  serviceName: string;
  /** OTEL_RESOURCE_ATTRIBUTES. */
  resource: Record<string, string>;
  sampler: Sampler;
  /** OTEL_TRACES_SAMPLER_ARG for the ratio samplers: the share of new traces kept. */
  ratio: number;
  batch: { scheduledDelayMs: number; exportTimeoutMs: number; maxQueueSize: number; maxExportBatchSize: number };
}

export const SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;
export type Sampler = (typeof SAMPLERS)[number];

/** The OpenTelemetry variables Kiln reads. */
export const OTEL_VARS = [
  'OTEL_SDK_DISABLED',
  'OTEL_TRACES_EXPORTER',
  'OTEL_EXPORTER_OTLP_ENDPOINT',
  'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
  'OTEL_EXPORTER_OTLP_PROTOCOL',
  'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL',
  'OTEL_EXPORTER_OTLP_HEADERS',
  'OTEL_EXPORTER_OTLP_TRACES_HEADERS',
  'OTEL_EXPORTER_OTLP_TIMEOUT',
  'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT',
  'OTEL_SERVICE_NAME',
  'OTEL_RESOURCE_ATTRIBUTES',
  'OTEL_TRACES_SAMPLER',
  'OTEL_TRACES_SAMPLER_ARG',
  'OTEL_BSP_SCHEDULE_DELAY',
  'OTEL_BSP_EXPORT_TIMEOUT',
  'OTEL_BSP_MAX_QUEUE_SIZE',
  'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
] as const;

type Env = Record<string, string | undefined>;

/**
 * The tracing an environment asks for, or null for none: tracing is on when an OTLP
 * endpoint is set, `OTEL_TRACES_EXPORTER` is unset or `otlp`, and `OTEL_SDK_DISABLED` is
 * not true. Throws an Error naming the variable for a value Kiln cannot honour.
 */
export function tracingConfig(env: Env): TracingConfig | null {
  const get = (name: string): string | undefined => {
    const value = env[name]?.trim();
    return value === undefined || value === '' ? undefined : value;
  };
  if (get('OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return null;
  // A list, as the specification allows; `none` alone turns tracing off.
  const exporters = (get('OTEL_TRACES_EXPORTER')?.toLowerCase() ?? 'otlp').split(',').map((name) => name.trim());
  const unknown = exporters.filter((name) => name !== 'otlp' && name !== 'none');
  if (unknown.length > 0) {
    throw new Error(`OTEL_TRACES_EXPORTER may name otlp or none, not ${unknown.join(', ')}`);
  }
  if (!exporters.includes('otlp')) return null;
  const url = endpoint(get('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'), get('OTEL_EXPORTER_OTLP_ENDPOINT'));
  if (url === null) return null;
  const protocolVar =
    get('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') === undefined
      ? 'OTEL_EXPORTER_OTLP_PROTOCOL'
      : 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL';
  const protocol = get(protocolVar) ?? 'http/protobuf';
  if (protocol !== 'http/json' && protocol !== 'http/protobuf') {
    throw new Error(
      `${protocolVar} must be http/protobuf or http/json (grpc is not supported), got ${JSON.stringify(protocol)}`,
    );
  }
  const sampler = (get('OTEL_TRACES_SAMPLER')?.toLowerCase() ?? 'parentbased_always_on') as Sampler;
  if (!SAMPLERS.includes(sampler)) {
    throw new Error(`OTEL_TRACES_SAMPLER must be one of ${SAMPLERS.join(', ')}, got ${JSON.stringify(sampler)}`);
  }
  const resource = parseKeyPairsIntoRecord(get('OTEL_RESOURCE_ATTRIBUTES'));
  return {
    url,
    protocol,
    headers: {
      ...parseKeyPairsIntoRecord(get('OTEL_EXPORTER_OTLP_HEADERS')),
      ...parseKeyPairsIntoRecord(get('OTEL_EXPORTER_OTLP_TRACES_HEADERS')),
    },
    timeoutMs: number(get, ['OTEL_EXPORTER_OTLP_TRACES_TIMEOUT', 'OTEL_EXPORTER_OTLP_TIMEOUT'], 10_000, 1),
    serviceName: get('OTEL_SERVICE_NAME') ?? resource['service.name'] ?? 'kiln',
    resource,
    sampler,
    // Read only by the samplers it is for.
    ratio: sampler.endsWith('traceidratio') ? ratio(get('OTEL_TRACES_SAMPLER_ARG')) : 1,
    batch: {
      scheduledDelayMs: number(get, ['OTEL_BSP_SCHEDULE_DELAY'], 5000, 0),
      exportTimeoutMs: number(get, ['OTEL_BSP_EXPORT_TIMEOUT'], 30_000, 1),
      maxQueueSize: number(get, ['OTEL_BSP_MAX_QUEUE_SIZE'], 2048, 1),
      maxExportBatchSize: number(get, ['OTEL_BSP_MAX_EXPORT_BATCH_SIZE'], 512, 1),
    },
  };
}

/** The traces URL: the signal's own endpoint as it is, or the general one with /v1/traces; null: none. */
function endpoint(traces: string | undefined, general: string | undefined): string | null {
  const given = traces ?? general;
  if (given === undefined) return null;
  const name = traces === undefined ? 'OTEL_EXPORTER_OTLP_ENDPOINT' : 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT';
  // The value is not repeated: a URL may carry a password or a token.
  let url: URL;
  try {
    url = new URL(given);
  } catch {
    throw new Error(`${name} must be an http(s) URL; its value is not one`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    // What parses as a scheme may be a user name (user:password@host): only a known scheme is named.
    const known = ['ftp:', 'grpc:', 'ws:', 'wss:', 'file:', 'unix:'].includes(url.protocol);
    throw new Error(`${name} must be an http(s) URL${known ? `, not ${url.protocol}` : '; its value is not one'}`);
  }
  if (traces !== undefined) return url.toString();
  return `${given.replace(/\/+$/, '')}/v1/traces`;
}

function number(get: (name: string) => string | undefined, names: string[], fallback: number, min: number): number {
  for (const name of names) {
    const raw = get(name);
    if (raw === undefined) continue;
    const value = Number(raw);
    if (!Number.isInteger(value) || value < min) {
      throw new Error(`${name} must be an integer of at least ${min}, got ${JSON.stringify(raw)}`);
    }
    return value;
  }
  return fallback;
}

function ratio(raw: string | undefined): number {
  if (raw === undefined) return 1;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0 || value > 1) {
    throw new Error(`OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1, got ${JSON.stringify(raw)}`);
  }
  return value;
}
