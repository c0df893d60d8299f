import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, it, type TestContext } from 'node:test';
import { stringify } from 'yaml';
import { PENDING_STATUSES } from '../../src/store/core/statuses.js';
import { alternatives, exprNames } from './promql.js';
import { exportedSeries, exprProblems, type SeriesInfo } from './exported-series.js';
import { readYaml } from './compose-file.js';
import { repoRoot } from '../support/paths.js';

const prometheusConfig = readYaml('deploy/prometheus/prometheus.yml');
const jobs: string[] = prometheusConfig.scrape_configs.map((job: any) => job.job_name);
const rules: any[] = readYaml('deploy/prometheus/alerts.yml').groups.flatMap((group: any) => group.rules);
const ruleTests = readYaml('deploy/prometheus/alerts.test.yml');
const dashboard = JSON.parse(readFileSync(join(repoRoot, 'deploy/grafana/dashboards/kiln.json'), 'utf8'));
const datasource = readYaml('deploy/grafana/provisioning/datasources/prometheus.yml').datasources[0];

/** Grafana's variables in a query, replaced as Grafana would before sending it. */
function withoutGrafanaVariables(expr: string): string {
  return expr.replace(/\$__(rate_interval|interval|range)\b/g, '1m');
}

function dashboardTargets(): { panel: string; expr: string }[] {
  return dashboard.panels.flatMap((panel: any) =>
    (panel.targets ?? []).map((target: any) => ({ panel: panel.title, expr: target.expr })),
  );
}

/** Runs promtool; false (the test skipped) when it is not installed, except under CI=true where that fails. */
function promtool(t: TestContext, args: string[]): boolean {
  const run = spawnSync('promtool', args, { cwd: repoRoot, encoding: 'utf8' });
  if ((run.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    assert.notEqual(process.env.CI, 'true', 'promtool is not on PATH: CI must install it (Debian package prometheus)');
    t.skip(`promtool is not installed (Debian package prometheus): promtool ${args.join(' ')} was NOT run`);
    return false;
  }
  assert.equal(run.error, undefined, `promtool did not run: ${String(run.error)}`);
  assert.equal(run.status, 0, `promtool ${args.join(' ')}:\n${run.stdout}${run.stderr}`);
  return true;
}

describe('reading PromQL', () => {
  it('finds every selector, its matchers and the grouping labels', () => {
    const names = exprNames(
      'histogram_quantile(0.99, sum by (le, type) (rate(kiln_job_wait_seconds_bucket{job="kiln"}[$__rate_interval])))' +
        ' / on (instance) group_left max without (x) (kiln_queue_capacity offset 5m) > bool 0.5' +
        ' or absent(up{job=~"a|b", instance!="x:1"} == 1) unless {__name__="kiln_nodes", status!~"a\\"b"}',
    );
    assert.deepEqual(names.selectors, [
      { metric: 'kiln_job_wait_seconds_bucket', matchers: [{ label: 'job', op: '=', value: 'kiln' }] },
      { metric: 'kiln_queue_capacity', matchers: [] },
      {
        metric: 'up',
        matchers: [
          { label: 'job', op: '=~', value: 'a|b' },
          { label: 'instance', op: '!=', value: 'x:1' },
        ],
      },
      { metric: 'kiln_nodes', matchers: [{ label: 'status', op: '!~', value: 'a"b' }] },
    ]);
    assert.deepEqual(names.groupingLabels, ['le', 'type', 'instance', 'x']);
    assert.deepEqual(alternatives('queued|running'), ['queued', 'running']);
    assert.equal(alternatives('queu.*'), null);
  });
});

describe('names read by the alerts and the dashboard', () => {
  let series: Map<string, SeriesInfo>;
  before(async () => {
    series = await exportedSeries();
  });

  it('knows what Kiln exports, and tells a wrong name, label, value or job', () => {
    assert.ok(series.has('kiln_job_run_seconds_bucket'));
    assert.ok(series.get('kiln_job_run_seconds_bucket')!.labels.has('le'));
    assert.ok(series.has('nodejs_eventloop_lag_p99_seconds'));
    assert.deepEqual(
      exprProblems('sum by (type) (rate(kiln_jobs_finished_total{status="failed"}[5m]))', series, jobs),
      [],
    );
    assert.deepEqual(exprProblems('kiln_jobs_failed_total', series, jobs), [
      'kiln_jobs_failed_total is not a series Kiln exports',
    ]);
    assert.deepEqual(exprProblems('kiln_queue_depth{status="queued"}', series, jobs), [
      'kiln_queue_depth has no label status',
    ]);
    assert.equal(exprProblems('kiln_jobs{status=~"queued|done"}', series, jobs).length, 1);
    assert.equal(exprProblems('kiln_jobs_finished_total{status="running"}', series, jobs).length, 1);
    assert.equal(exprProblems('up{job="api"}', series, jobs).length, 1);
    assert.equal(exprProblems('sum by (priority) (kiln_jobs)', series, jobs).length, 1);
  });

  it('alert rules read only series Kiln exports', () => {
    for (const rule of rules) {
      assert.deepEqual(exprProblems(rule.expr, series, jobs), [], rule.alert);
    }
  });

  it('dashboard queries read only series Kiln exports', () => {
    const targets = dashboardTargets();
    assert.ok(targets.length >= 15, 'the dashboard has its queries');
    for (const { panel, expr } of targets) {
      assert.deepEqual(exprProblems(withoutGrafanaVariables(expr), series, jobs), [], `${panel}: ${expr}`);
    }
  });
});

describe('deploy/prometheus/alerts.yml', () => {
  it('has the four alerts of the runbook, each with a delay, a severity, a summary and a description', () => {
    const names = rules.map((rule) => rule.alert);
    assert.equal(new Set(names).size, names.length, 'alert names are unique');
    for (const name of ['KilnQueueFull', 'KilnOldestJobTooOld', 'KilnFailureRateHigh', 'KilnNoLiveNode']) {
      assert.ok(names.includes(name), name);
    }
    for (const rule of rules) {
      assert.equal(typeof rule.alert, 'string', 'alerting rules only');
      assert.match(rule.for ?? '', /^\d+[smh]$/, `${rule.alert}: for`);
      assert.ok(['warning', 'critical'].includes(rule.labels?.severity), `${rule.alert}: severity`);
      assert.ok(rule.annotations?.summary, `${rule.alert}: summary`);
      assert.ok(rule.annotations?.description, `${rule.alert}: description`);
    }
  });

  it('counts against the capacity exactly the statuses admission counts', () => {
    const expr = rules.find((rule) => rule.alert === 'KilnQueueFull').expr;
    const jobsSelectors = exprNames(expr).selectors.filter((selector) => selector.metric === 'kiln_jobs');
    assert.equal(jobsSelectors.length, 1);
    const status = jobsSelectors[0]!.matchers.find((matcher) => matcher.label === 'status');
    assert.equal(status?.op, '=~');
    assert.deepEqual(alternatives(status.value)?.sort(), [...PENDING_STATUSES].sort());
  });

  it('has unit tests in alerts.test.yml where each alert fires, and where it does not', () => {
    assert.deepEqual(ruleTests.rule_files, ['alerts.yml']);
    const cases = ruleTests.tests.flatMap((test: any) => test.alert_rule_test ?? []);
    for (const rule of rules) {
      const own = cases.filter((c: any) => c.alertname === rule.alert);
      assert.ok(
        own.some((c: any) => (c.exp_alerts ?? []).length > 0),
        `${rule.alert}: no test where it fires`,
      );
      assert.ok(
        own.some((c: any) => (c.exp_alerts ?? []).length === 0),
        `${rule.alert}: no test where it stays quiet`,
      );
    }
  });

  it('passes promtool check rules', (t) => {
    promtool(t, ['check', 'rules', 'deploy/prometheus/alerts.yml']);
  });

  it('passes its unit tests (promtool test rules)', (t) => {
    promtool(t, ['test', 'rules', 'deploy/prometheus/alerts.test.yml']);
  });
});

describe('deploy/prometheus/prometheus.yml', () => {
  it('passes promtool check config (its rule files included)', (t) => {
    promtool(t, ['check', 'config', 'deploy/prometheus/prometheus.yml']);
  });
});

describe('deploy/grafana/dashboards/kiln.json', () => {
  it('is a Grafana dashboard whose panels tile the grid', () => {
    assert.equal(typeof dashboard.schemaVersion, 'number');
    assert.equal(dashboard.uid, 'kiln');
    assert.equal(typeof dashboard.title, 'string');
    const ids = dashboard.panels.map((panel: any) => panel.id);
    assert.equal(new Set(ids).size, ids.length, 'panel ids are unique');
    const boxes: { title: string; x: number; y: number; w: number; h: number }[] = [];
    for (const panel of dashboard.panels) {
      const { x, y, w, h } = panel.gridPos;
      assert.ok([x, y, w, h].every(Number.isInteger) && x >= 0 && y >= 0 && w > 0 && h > 0, panel.title);
      assert.ok(x + w <= 24, `${panel.title} is wider than the grid`);
      for (const other of boxes) {
        const overlap = x < other.x + other.w && other.x < x + w && y < other.y + other.h && other.y < y + h;
        assert.ok(!overlap, `${panel.title} overlaps ${other.title}`);
      }
      boxes.push({ title: panel.title, x, y, w, h });
    }
  });

  it('queries the provisioned datasource in every panel and target', () => {
    assert.equal(datasource.uid, 'prometheus');
    for (const panel of dashboard.panels) {
      assert.deepEqual(panel.datasource, { type: 'prometheus', uid: datasource.uid }, panel.title);
      assert.ok(panel.targets.length > 0, `${panel.title} has queries`);
      const refIds = panel.targets.map((target: any) => target.refId);
      assert.equal(new Set(refIds).size, refIds.length, `${panel.title}: refIds are unique`);
      for (const target of panel.targets) {
        assert.equal(target.datasource?.uid, datasource.uid, panel.title);
        assert.equal(typeof target.expr, 'string', panel.title);
      }
    }
  });

  it('has the panels the runbook points to', () => {
    const exprs = dashboardTargets().map((target) => target.expr);
    const reads = (metric: string) => exprs.some((expr) => exprNames(expr).selectors.some((s) => s.metric === metric));
    for (const metric of [
      'kiln_jobs_submitted_total',
      'kiln_jobs_finished_total',
      'kiln_queue_depth',
      'kiln_jobs',
      'kiln_queue_oldest_age_seconds',
      'kiln_pool_threads',
      'kiln_pool_busy_threads',
      'kiln_job_wait_seconds_bucket',
      'kiln_job_run_seconds_bucket',
      'kiln_nodes',
      'kiln_admission_rejected_total',
    ]) {
      assert.ok(reads(metric), `no panel reads ${metric}`);
    }
  });

  it('has queries that Prometheus parses (promtool check rules on them as recording rules)', (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'kiln-dashboard-'));
    try {
      const recordings = dashboardTargets().map(({ expr }, i) => ({
        record: `kiln_dashboard:query_${i}`,
        expr: withoutGrafanaVariables(expr),
      }));
      const file = join(dir, 'dashboard-queries.yml');
      writeFileSync(file, stringify({ groups: [{ name: 'dashboard', rules: recordings }] }));
      promtool(t, ['check', 'rules', file]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
