import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ATTEMPT_METRIC_OUTCOMES, JOB_SECONDS_BUCKETS } from '../../src/scheduler/statistics/metrics.js';
import { startServer, type TestServer } from '../support/kiln.js';

/** The samples of one metric in an exposition: labels and value. */
function samples(text: string, name: string): { labels: Record<string, string>; value: number }[] {
  const found: { labels: Record<string, string>; value: number }[] = [];
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (match === null || match[1] !== name) continue;
    const labels: Record<string, string> = {};
    for (const pair of (match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]!] = pair[2]!;
    found.push({ labels, value: Number(match[3]) });
  }
  return found;
}

describe('metrics that alert right', () => {
  let server: TestServer;
  let taskTypes: string[];
  const metrics = async () => (await server.request('GET', '/metrics')).text;
  before(async () => {
    server = await startServer({ KILN_THREADS: '1' });
    taskTypes = (await server.request('GET', '/v1/tasks')).body.tasks.map((task: { name: string }) => task.name);
  });
  after(async () => {
    await server.close();
  });

  it('starts every labelled counter at 0 for each task type and each status or outcome', async () => {
    const text = await metrics();
    assert.ok(taskTypes.length >= 9);
    const has = (name: string, labels: Record<string, string>) =>
      samples(text, name).some(
        (sample) => sample.value === 0 && Object.entries(labels).every(([key, value]) => sample.labels[key] === value),
      );
    for (const type of taskTypes) {
      assert.ok(has('kiln_jobs_submitted_total', { type }), `submitted ${type}`);
      for (const status of ['completed', 'failed', 'cancelled']) {
        assert.ok(has('kiln_jobs_finished_total', { type, status }), `finished ${type} ${status}`);
      }
      assert.ok(has('kiln_jobs_snoozed_total', { type }), `snoozed ${type}`);
      for (const outcome of ATTEMPT_METRIC_OUTCOMES) {
        assert.ok(has('kiln_job_attempts_total', { type, outcome }), `attempts ${type} ${outcome}`);
      }
      for (const kind of ['inflight', 'result']) assert.ok(has('kiln_dedupe_hits_total', { type, kind }));
      for (const limit of ['concurrency', 'rate']) assert.ok(has('kiln_task_limited_total', { type, limit }));
    }
    for (const reason of ['queue_full', 'shutting_down']) {
      assert.ok(has('kiln_admission_rejected_total', { reason }), reason);
    }
  });

  it('times waits and runs in buckets from 0.1 ms to an hour, none more than 2.5 times the one below', async () => {
    assert.ok(JOB_SECONDS_BUCKETS[0]! <= 0.0001);
    assert.ok(JOB_SECONDS_BUCKETS.at(-1)! >= 3600);
    for (let i = 1; i < JOB_SECONDS_BUCKETS.length; i++) {
      const ratio = JOB_SECONDS_BUCKETS[i]! / JOB_SECONDS_BUCKETS[i - 1]!;
      assert.ok(ratio > 1 && ratio <= 2.5, `${JOB_SECONDS_BUCKETS[i - 1]} → ${JOB_SECONDS_BUCKETS[i]}`);
    }
    const job = await server.request('POST', '/v1/jobs', { type: 'noop' });
    await server.waitForJob(job.body.id);
    const text = await metrics();
    for (const name of ['kiln_job_wait_seconds_bucket', 'kiln_job_run_seconds_bucket']) {
      const bounds = samples(text, name)
        .filter((sample) => sample.labels.type === 'noop')
        .map((sample) => sample.labels.le);
      assert.deepEqual(
        [...new Set(bounds)],
        [...JOB_SECONDS_BUCKETS.map(String), '+Inf'],
        `${name} exposes the buckets`,
      );
    }
  });

  it('counts and times HTTP requests by route pattern, method and status, never by raw URL', async () => {
    const job = await server.request('POST', '/v1/jobs', { type: 'noop' });
    await server.request('GET', `/v1/jobs/${job.body.id}?wait=30`);
    await server.request('GET', '/v1/jobs/no-such-job');
    await server.request('GET', '/no/such/route/at-all');
    const text = await metrics();
    assert.doesNotMatch(text, new RegExp(job.body.id), 'no job id in a label');
    assert.doesNotMatch(text, /no-such-job|at-all/);
    const requests = samples(text, 'kiln_http_requests_total');
    const count = (route: string, method: string, status: string) =>
      requests.find((s) => s.labels.route === route && s.labels.method === method && s.labels.status === status)
        ?.value ?? 0;
    assert.ok(count('/v1/jobs', 'POST', '201') >= 1);
    assert.ok(count('/v1/jobs/:id', 'GET', '200') >= 1);
    assert.ok(count('/v1/jobs/:id', 'GET', '404') >= 1);
    assert.ok(count('unmatched', 'GET', '404') >= 1);
    const durations = samples(text, 'kiln_http_request_duration_seconds_count');
    assert.ok(durations.some((s) => s.labels.route === '/v1/jobs/:id' && s.labels.method === 'GET' && s.value >= 2));
  });

  it('shows whether dispatch is paused', async () => {
    const paused = async () => samples(await metrics(), 'kiln_queue_paused')[0]?.value;
    assert.equal(await paused(), 0);
    await server.request('POST', '/v1/queue/pause');
    assert.equal(await paused(), 1);
    await server.request('POST', '/v1/queue/resume');
    assert.equal(await paused(), 0);
  });
});
