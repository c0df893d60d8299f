import { JOB_STATUSES, type JobStatus } from '../../src/contract/job.js';
import { alternatives, exprNames } from './promql.js';
import { type AttemptMetricOutcome, KilnMetrics } from '../../src/scheduler/statistics/metrics.js';

/** One series name a query may read, with its labels and, for labels of a fixed set, their values. */
export interface SeriesInfo {
  labels: Set<string>;
  values: Map<string, Set<string>>;
}

/** Labels whose values form a fixed set that a query must spell right. */
const ENUMERATED = new Set(['status', 'reason', 'outcome']);
/** Labels Prometheus adds to every scraped series. */
const TARGET_LABELS = ['job', 'instance'];

/**
 * Every series a Prometheus that scrapes Kiln can hold: what KilnMetrics registers (built
 * here, with every counter and histogram given a sample so that each label shows), the
 * PostgreSQL store's `kiln_nodes` (docs: shared API.md, "New metrics"), and what
 * Prometheus itself records per target.
 */
export async function exportedSeries(): Promise<Map<string, SeriesInfo>> {
  const byStatus = Object.fromEntries(JOB_STATUSES.map((status) => [status, 1])) as Record<JobStatus, number>;
  const metrics = new KilnMetrics({
    counts: async () => ({
      byStatus,
      queuedByPriority: Array.from({ length: 10 }, () => 1),
      pending: 4,
      oldestQueuedReadyAt: Date.now() - 1000,
      exact: true,
    }),
    capacity: 100,
    threads: () => 2,
    busyThreads: () => 1,
    runningByGroup: () => new Map([['tenant-a', 1]]),
  });
  const outcomes: AttemptMetricOutcome[] = ['success', 'error', 'timeout', 'crash'];
  metrics.submitted('noop');
  for (const status of ['completed', 'failed', 'cancelled'] as const) metrics.finished('noop', status);
  for (const outcome of outcomes) metrics.attempt('noop', outcome, 0.01);
  metrics.waited('noop', 0.01);
  metrics.groupKnown('tenant-a');
  metrics.rejected('queue_full');
  metrics.httpRequest('GET', '/v1/jobs/:id', 200, 0.01);

  const series = new Map<string, SeriesInfo>();
  const info = (name: string): SeriesInfo => {
    let entry = series.get(name);
    if (entry === undefined) {
      entry = { labels: new Set(TARGET_LABELS), values: new Map() };
      series.set(name, entry);
    }
    return entry;
  };
  for (const metric of await metrics.registry.getMetricsAsJSON()) {
    // prom-client's types say an enum; the JSON holds the type's name ('histogram').
    const type = String(metric.type);
    const names =
      type === 'histogram'
        ? ['_bucket', '_sum', '_count'].map((suffix) => metric.name + suffix)
        : type === 'summary'
          ? [metric.name, `${metric.name}_sum`, `${metric.name}_count`]
          : [metric.name];
    for (const name of names) info(name);
    for (const sample of metric.values as { labels: Record<string, string | number>; metricName?: string }[]) {
      const entry = info(sample.metricName ?? metric.name);
      for (const [label, value] of Object.entries(sample.labels)) {
        entry.labels.add(label);
        if (!entry.values.has(label)) entry.values.set(label, new Set());
        entry.values.get(label)!.add(String(value));
      }
    }
  }
  info('kiln_nodes');
  for (const name of ['up', 'scrape_duration_seconds', 'scrape_samples_scraped', 'scrape_series_added']) info(name);
  return series;
}

/** What is wrong with the names an expression reads: unknown metrics, labels, values or jobs. */
export function exprProblems(expr: string, series: Map<string, SeriesInfo>, jobs: readonly string[]): string[] {
  const problems: string[] = [];
  const { selectors, groupingLabels } = exprNames(expr);
  if (selectors.length === 0) problems.push(`reads no series: ${expr}`);
  const labelsRead = new Set(TARGET_LABELS);
  for (const { metric, matchers } of selectors) {
    const entry = series.get(metric);
    if (entry === undefined) {
      problems.push(`${metric} is not a series Kiln exports`);
      continue;
    }
    for (const label of entry.labels) labelsRead.add(label);
    for (const { label, op, value } of matchers) {
      if (!entry.labels.has(label)) {
        problems.push(`${metric} has no label ${label}`);
        continue;
      }
      if (label === 'job' && (op === '=' || op === '!=') && !jobs.includes(value)) {
        problems.push(`${metric}{job="${value}"}: no scrape job is named ${value}`);
      }
      const known = entry.values.get(label);
      if (!ENUMERATED.has(label) || known === undefined) continue;
      const words = op === '=' || op === '!=' ? [value] : alternatives(value);
      if (words === null) continue;
      for (const word of words) {
        if (!known.has(word)) problems.push(`${metric}{${label}} is never "${word}" (only ${[...known].join(', ')})`);
      }
    }
  }
  for (const label of groupingLabels) {
    if (!labelsRead.has(label)) problems.push(`grouping by ${label}, which no series read here has`);
  }
  return problems;
}
