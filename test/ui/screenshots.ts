/**
 * `npm run screenshots`: the README's pictures of the dashboard, taken in the system's
 * Chromium against a real Kiln that runs real jobs for a while first (two minutes by
 * default, SCREENSHOT_LOAD_SECONDS to change it), so that the charts have something
 * to show. Writes docs/screenshots/*.png.
 */
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Page } from 'playwright-core';
import { launchChromium, waitForText } from '../support/browser.js';
import { startServer, type TestServer } from '../support/kiln.js';
import { fixtureTasksDir, repoRoot } from '../support/paths.js';
import { startReceiver } from '../support/receiver.js';

const outDir = join(repoRoot, 'docs', 'screenshots');
const loadSeconds = Number(process.env.SCREENSHOT_LOAD_SECONDS ?? 120);

async function submit(server: TestServer, jobs: object[]): Promise<string[]> {
  const response = await server.request('POST', '/v1/jobs/batch', { jobs });
  if (response.status !== 201) throw new Error(`batch: ${response.status} ${response.text}`);
  return response.body.jobs.map((job: { id: string }) => job.id);
}

/** A mix of real work whose rate rises and falls, with a failure now and then. */
async function runLoad(server: TestServer): Promise<void> {
  const end = Date.now() + loadSeconds * 1000;
  for (let second = 0; Date.now() < end; second++) {
    const rate = Math.round(14 + 10 * Math.sin(second / 9));
    const jobs: object[] = [];
    for (let i = 0; i < rate; i++) {
      const pick = (second * 31 + i * 7) % 20;
      // Not gzip: fails at once, without retries.
      if (pick === 0) jobs.push({ type: 'compress.gunzip', payload: { data: 'aGVsbG8gd29ybGQ=' } });
      else if (pick < 8) jobs.push({ type: 'cpu.spin', payload: { ms: 5 + ((second + i) % 8) * 8 } });
      else if (pick < 14) {
        const group = ['acme', 'globex', 'initech'][i % 3];
        jobs.push({ type: 'hash.sha256', payload: { data: `report-${second}-${i}`, rounds: 20_000 }, group });
      } else jobs.push({ type: 'compress.gzip', payload: { data: 'kiln '.repeat(2000) }, priority: 7 });
    }
    await submit(server, jobs);
    await sleep(1000);
  }
}

async function shoot(page: Page, name: string): Promise<void> {
  await page.waitForLoadState('networkidle');
  await page.screenshot({ path: join(outDir, `${name}.png`), fullPage: true });
  console.log(`docs/screenshots/${name}.png`);
}

async function main(): Promise<void> {
  mkdirSync(outDir, { recursive: true });
  const holdDir = mkdtempSync(join(tmpdir(), 'kiln-screenshots-'));
  // The built-in tasks, and the two test tasks that hold a job where the pictures need it.
  const tasksDir = join(holdDir, 'tasks');
  mkdirSync(tasksDir);
  for (const task of ['test.steps.mjs', 'test.hold.mjs'])
    copyFileSync(join(fixtureTasksDir, task), join(tasksDir, task));
  // A receiver of callbacks on this machine (a private address, allowed here), which takes every delivery.
  const receiver = await startReceiver();
  const hook = `${receiver.url}/kiln-hook`;
  const server = await startServer({
    KILN_THREADS: '2',
    KILN_STORE: 'sqlite',
    KILN_TASKS_DIR: tasksDir,
    KILN_CALLBACK_SECRET: 'screenshots',
    KILN_CALLBACK_ALLOW_PRIVATE: 'true',
  });
  const browser = await launchChromium();
  try {
    console.log(`running jobs for ${loadSeconds} s…`);
    await runLoad(server);
    // A failed job whose callback told a receiver.
    const [failed] = await submit(server, [
      {
        type: 'compress.gunzip',
        payload: { data: 'aGVsbG8gd29ybGQ=' },
        metadata: { upload: 'invoice-2026-11.gz' },
        callback: { url: hook, events: ['failed'] },
      },
    ]);
    await server.waitForJob(failed as string);
    // A job in progress (held at 50 % by its release files), some waiting their turn and a delayed one.
    const [steps] = await submit(server, [{ type: 'test.steps', payload: { dir: holdDir, steps: 4 }, priority: 9 }]);
    await server.whenStatus(steps as string, 'running');
    writeFileSync(join(holdDir, 'step-1'), '');
    writeFileSync(join(holdDir, 'step-2'), '');
    await submit(server, [
      { type: 'test.hold', payload: { release: join(holdDir, 'never') }, priority: 8 },
      { type: 'hash.pbkdf2', payload: { password: 'hunter2', iterations: 1_000_000 }, priority: 3 },
      { type: 'math.primes', payload: { limit: 50_000_000 }, priority: 1 },
      { type: 'noop', delayMs: 3_600_000, metadata: { note: 'runs in an hour' } },
    ]);

    // Schedules, where the server has them (a 404 leaves the page saying they are not available).
    for (const [name, cron, type, paused] of [
      ['nightly-report', '0 3 * * *', 'hash.sha256', false],
      ['hourly-digest', '0 * * * *', 'compress.gzip', false],
      ['weekly-cleanup', '30 4 * * 1', 'noop', true],
    ] as const) {
      await server.request('PUT', `/v1/schedules/${name}`, {
        cron,
        timezone: 'Europe/Berlin',
        job: { type, payload: type === 'noop' ? {} : { data: name } },
        paused,
      });
    }

    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(`${server.url}/ui/#/`);
    await page.getByRole('button', { name: '5 min', exact: true }).click();
    await page.locator('[data-testid=chart-throughput] canvas').waitFor();
    await shoot(page, 'overview');

    await page.goto(`${server.url}/ui/#/jobs`);
    await page.locator('[data-testid=job-table] tbody tr').first().waitFor();
    await shoot(page, 'jobs');

    await page.goto(`${server.url}/ui/#/jobs/${steps}`);
    await waitForText(page, '[data-testid=progress-percent]', '50 %');
    await shoot(page, 'job');

    await page.goto(`${server.url}/ui/#/jobs/${failed}`);
    await page.locator('[data-testid=job-error]').waitFor();
    await waitForText(page, '[data-testid=deliveries] tbody tr td:nth-child(3)', 'delivered');
    await shoot(page, 'job-failed');

    await page.goto(`${server.url}/ui/#/schedules`);
    await page.locator('main h1').waitFor();
    await shoot(page, 'schedules');

    await page.goto(`${server.url}/ui/#/tasks`);
    await page.locator('[data-task]').first().waitFor();
    await shoot(page, 'tasks');

    const phone = await browser.newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2 });
    await phone.goto(`${server.url}/ui/#/`);
    await phone.locator('[data-testid=chart-throughput] canvas').waitFor();
    await shoot(phone, 'phone-overview');
  } finally {
    await browser.close();
    await server.close();
    await receiver.close();
    rmSync(holdDir, { recursive: true, force: true });
  }
}

await main();
