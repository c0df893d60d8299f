import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stringify } from 'yaml';
import { closedPortUrl } from '../support/http.js';
import { startServer, type TestServer } from '../support/kiln.js';
import { pollUntil } from '../support/poll.js';

/** How long Prometheus may take to start and to scrape what a test waits for. */
const DEADLINE_MS = 60_000;
/** Prometheus is polled this often while a test waits for a scrape to show something. */
const POLL_MS = 200;

interface Sample {
  metric: Record<string, string>;
  value: [number, string];
}

/** Whether the prometheus binary is there; missing under CI=true fails instead. */
function prometheusInstalled(): boolean {
  const run = spawnSync('prometheus', ['--version'], { encoding: 'utf8' });
  if ((run.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    assert.notEqual(
      process.env.CI,
      'true',
      'prometheus is not on PATH: CI must install it (Debian package prometheus)',
    );
    return false;
  }
  assert.equal(run.status, 0, `prometheus --version: ${run.stderr}`);
  return true;
}

describe(
  'a real Prometheus scraping a real Kiln',
  { skip: !prometheusInstalled() && 'prometheus is not installed (Debian package prometheus): NOT run' },
  () => {
    let kiln: TestServer;
    let prometheus: ChildProcess;
    let api: string;
    let dir: string;
    let output = '';

    before(async () => {
      kiln = await startServer({ KILN_THREADS: '2' });
      dir = mkdtempSync(join(tmpdir(), 'kiln-prometheus-'));
      const config = join(dir, 'prometheus.yml');
      writeFileSync(
        config,
        stringify({
          global: { scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' },
          scrape_configs: [{ job_name: 'kiln', static_configs: [{ targets: [new URL(kiln.url).host] }] }],
        }),
      );
      api = await closedPortUrl();
      const { port } = new URL(api);
      prometheus = spawn(
        'prometheus',
        [
          `--config.file=${config}`,
          `--storage.tsdb.path=${join(dir, 'data')}`,
          `--web.listen-address=127.0.0.1:${port}`,
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      prometheus.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
      prometheus.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
      await until('Prometheus is ready', async () => (await fetch(`${api}/-/ready`).catch(() => null))?.ok === true);
    });

    after(async () => {
      if (prometheus !== undefined && prometheus.exitCode === null) {
        const exited = once(prometheus, 'exit');
        prometheus.kill('SIGTERM');
        await exited;
      }
      await kiln?.close();
      if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
    });

    /**
     * Polls `check` until it holds, failing at once if prometheus exits; after DEADLINE_MS
     * fails naming what it waited for, with what prometheus said.
     */
    async function until(what: string, check: () => Promise<boolean>): Promise<void> {
      const ready = async () => {
        const held = await check();
        if (!held) assert.equal(prometheus.exitCode, null, `prometheus exited:\n${output.slice(-3000)}`);
        return held;
      };
      try {
        await pollUntil(ready, (held) => held, { what, deadlineMs: DEADLINE_MS, everyMs: POLL_MS });
      } catch (error) {
        if (error instanceof assert.AssertionError) throw error;
        throw new Error(`${(error as Error).message}; prometheus said:\n${output.slice(-3000)}`, { cause: error });
      }
    }

    /** An instant query through Prometheus's HTTP API. */
    async function query(expr: string): Promise<Sample[]> {
      const answer = await fetch(`${api}/api/v1/query?query=${encodeURIComponent(expr)}`);
      const body = (await answer.json()) as {
        status: string;
        data: { resultType: string; result: Sample[] };
        error?: string;
      };
      assert.equal(body.status, 'success', `${expr}: ${body.error}`);
      return body.data.result;
    }

    const valueOf = async (expr: string) => {
      const [sample] = await query(expr);
      return sample === undefined ? null : Number(sample.value[1]);
    };

    it('reads the rate of finished jobs and a wait-time quantile from the scrapes', async () => {
      const finished = 'kiln_jobs_finished_total{job="kiln",type="noop",status="completed"}';
      const waitBuckets = 'kiln_job_wait_seconds_bucket{job="kiln",type="noop"}';
      // The series exist at 0 before any job (scraped at least once), so the jobs below are an increase.
      await until(
        'the zero series are scraped',
        async () => (await valueOf(finished)) === 0 && (await query(waitBuckets)).length > 0,
      );

      const jobs = Array.from({ length: 20 }, (_, i) => ({ type: 'noop', payload: { echo: i } }));
      const batch = await kiln.request('POST', '/v1/jobs/batch', { jobs });
      assert.equal(batch.status, 201, batch.text);
      for (const job of batch.body.jobs) await kiln.waitForJob(job.id);

      await until('all 20 completions are scraped', async () => (await valueOf(finished)) === 20);
      const rate = await valueOf(`rate(${finished}[1m])`);
      assert.ok(rate !== null && rate > 0, `rate of finished jobs: ${rate}`);
      const p90 = await valueOf(
        `histogram_quantile(0.9, sum by (le) (rate(kiln_job_wait_seconds_bucket{job="kiln",type="noop"}[1m])))`,
      );
      assert.ok(p90 !== null && Number.isFinite(p90) && p90 >= 0 && p90 <= 3600, `p90 wait: ${p90}`);
      const targets = (await (await fetch(`${api}/api/v1/targets`)).json()) as {
        data: { activeTargets: { health: string; lastError: string }[] };
      };
      assert.deepEqual(
        targets.data.activeTargets.map((target) => [target.health, target.lastError]),
        [['up', '']],
      );
    });
  },
);
