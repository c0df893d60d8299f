import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import {
  browserSkipReason,
  launchChromium,
  overflowsHorizontally,
  pageErrors,
  storageItem,
  waitForRows,
  waitForText,
} from '../support/browser.js';
import { startServer, type TestServer } from '../support/kiln.js';
import { startReceiver } from '../support/receiver.js';

/**
 * The dashboard in a real headless Chromium against a real Kiln: what a person sees
 * when jobs are submitted through the API, and what its buttons do.
 */
describe('dashboard', { skip: browserSkipReason() ?? false }, () => {
  let browser: Browser;
  let server: TestServer;
  let dir: string;

  before(async () => {
    browser = await launchChromium();
    // Callbacks to a receiver on this machine (a private address, allowed here).
    server = await startServer({
      KILN_THREADS: '1',
      KILN_CALLBACK_SECRET: 'dashboard-test-secret',
      KILN_CALLBACK_ALLOW_PRIVATE: 'true',
    });
    dir = mkdtempSync(join(tmpdir(), 'kiln-ui-'));
  });

  after(async () => {
    await browser?.close();
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function open(
    hash: string,
    viewport = { width: 1280, height: 900 },
  ): Promise<{ page: Page; errors: string[] }> {
    const page = await browser.newPage({ viewport });
    const errors = pageErrors(page);
    await page.goto(`${server.url}/ui/${hash}`);
    return { page, errors };
  }

  async function submit(body: object): Promise<string> {
    const response = await server.request('POST', '/v1/jobs', body);
    assert.equal(response.status, 201, response.text);
    return response.body.id;
  }

  it('shows the counts by status change as jobs complete, and draws the charts', async () => {
    const { page, errors } = await open('#/');
    await waitForText(page, '[data-testid=count-completed] .number', '0');
    await waitForText(page, '[data-testid=threads]', '0 / 1');
    for (let i = 0; i < 3; i++) await server.waitForJob(await submit({ type: 'noop' }));
    await waitForText(page, '[data-testid=count-completed] .number', '3');
    await waitForText(page, '[data-testid=total-submitted]', '3');
    assert.equal(await page.locator('[data-testid=chart-throughput] canvas').count(), 1);
    assert.equal(await page.locator('[data-testid=chart-latency] canvas').count(), 1);
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('pauses and resumes dispatch with its button', async () => {
    const { page } = await open('#/');
    await waitForText(page, '[data-testid=paused]', 'running');
    await page.getByRole('button', { name: 'Pause dispatch' }).click();
    await waitForText(page, '[data-testid=paused]', 'paused');
    assert.equal((await server.request('GET', '/v1/queue')).body.paused, true);
    const id = await submit({ type: 'noop' });
    await waitForText(page, '[data-testid=count-queued] .number', '1');
    await page.getByRole('button', { name: 'Resume dispatch' }).click();
    await waitForText(page, '[data-testid=paused]', 'running');
    assert.equal((await server.waitForJob(id)).status, 'completed');
    await page.close();
  });

  it('shows a failed job with its error', async () => {
    const id = await submit({ type: 'test.fatal', payload: { input: 'bad' } });
    assert.equal((await server.waitForJob(id)).status, 'failed');
    const { page, errors } = await open(`#/jobs/${id}`);
    await waitForText(page, '.job-title .badge', 'failed');
    await waitForText(page, '[data-testid=job-error]', /handler_error on attempt 1.*this input can never succeed/);
    assert.match((await page.locator('.json').first().textContent()) ?? '', /"input": "bad"/);
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('shows a snoozed job: its snoozes and next run', async () => {
    const id = await submit({ type: 'test.snooze', payload: { times: 1, ms: 86_400_000 } });
    const snoozed = await server.whenStatus(id, 'scheduled');
    const { page, errors } = await open(`#/jobs/${id}`);
    await waitForText(page, '.job-title .badge', 'scheduled');
    await waitForText(page, '[data-testid=snoozes]', '1');
    await waitForText(page, '[data-testid=attempts]', '0 of 3');
    assert.notEqual(snoozed.runAt, null);
    assert.notEqual(((await page.locator('[data-testid=next-run]').textContent()) ?? '').trim(), '');
    assert.deepEqual(errors, []);
    await page.close();
    assert.equal((await server.request('POST', `/v1/jobs/${id}/cancel`)).status, 200);
  });

  it('cancels a running job and retries it', async () => {
    const release = join(dir, 'hold-release');
    const id = await submit({ type: 'test.hold', payload: { release } });
    await server.whenStatus(id, 'running');
    const { page } = await open(`#/jobs/${id}`);
    await waitForText(page, '.job-title .badge', 'running');
    page.once('dialog', (dialog) => void dialog.accept());
    await page.getByRole('button', { name: 'Cancel' }).click();
    await waitForText(page, '.job-title .badge', 'cancelled');
    await waitForText(page, '[data-testid=job-error]', /cancelled on attempt 1/);
    assert.equal((await server.request('GET', `/v1/jobs/${id}`)).body.status, 'cancelled');

    await page.getByRole('button', { name: 'Retry' }).click();
    await waitForText(page, '.job-title .badge', 'running');
    await waitForText(page, '[data-testid=attempts]', '1 of 3');
    // The page follows the retried job live: releasing it shows it completed.
    writeFileSync(release, '');
    await waitForText(page, '.job-title .badge', 'completed');
    await page.close();
  });

  it('lists jobs with filters and pages through them by cursor', async () => {
    const batch = await server.request('POST', '/v1/jobs/batch', {
      jobs: Array.from({ length: 30 }, (_, i) => ({ type: 'test.sequence', payload: { label: `n${i}` } })),
    });
    assert.equal(batch.status, 201);
    for (const job of batch.body.jobs) await server.waitForJob(job.id);
    const { page, errors } = await open('#/jobs');
    await page.locator('input[name=status][value=completed]').check();
    await page.locator('select[name=type]').selectOption('test.sequence');
    // The list refreshes while the user fills the form: what is ticked and chosen stays.
    await page.waitForResponse((response) => /\/v1\/jobs\?/.test(response.url()));
    await waitForRows(page, '[data-testid=job-table]', 25);
    assert.equal(await page.locator('input[name=status][value=completed]').isChecked(), true);
    assert.equal(await page.locator('select[name=type]').inputValue(), 'test.sequence');
    await page.getByRole('button', { name: 'Apply' }).click();
    await page.waitForURL(/#\/jobs\?status=completed&type=test\.sequence$/);
    await waitForRows(page, '[data-testid=job-table]', 25);
    const newest = await page.locator('[data-testid=job-table] tbody tr').first().getAttribute('data-job');
    assert.equal(newest, batch.body.jobs.at(-1).id);
    await page.getByRole('button', { name: 'Older →' }).click();
    await waitForRows(page, '[data-testid=job-table]', 5);
    const oldest = await page.locator('[data-testid=job-table] tbody tr').last().getAttribute('data-job');
    assert.equal(oldest, batch.body.jobs[0].id);
    await waitForText(page, '.pager .muted', 'page 2');
    await page.getByRole('button', { name: '← Newer' }).click();
    await waitForRows(page, '[data-testid=job-table]', 25);
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('filters the list by group and shows a job’s group', async () => {
    const batch = await server.request('POST', '/v1/jobs/batch', {
      jobs: [
        { type: 'noop', group: 'acme' },
        { type: 'noop', group: 'globex' },
        { type: 'noop', group: 'acme' },
      ],
    });
    assert.equal(batch.status, 201, batch.text);
    for (const job of batch.body.jobs) await server.waitForJob(job.id);
    const [acmeFirst, , acmeSecond] = batch.body.jobs.map((job: { id: string }) => job.id);
    const { page, errors } = await open('#/jobs');
    await page.locator('input[name=group]').fill('acme');
    await page.getByRole('button', { name: 'Apply' }).click();
    await page.waitForURL(/#\/jobs\?group=acme$/);
    await waitForRows(page, '[data-testid=job-table]', 2);
    const rows = page.locator('[data-testid=job-table] tbody tr');
    assert.deepEqual(
      [await rows.nth(0).getAttribute('data-job'), await rows.nth(1).getAttribute('data-job')],
      [acmeSecond, acmeFirst],
    );
    await waitForText(page, '[data-testid=job-table] tbody tr .small', 'group acme');
    await rows.first().locator('a').click();
    await waitForText(page, '[data-testid=job-group]', 'acme');
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('lists schedules, pauses, resumes and triggers one', async () => {
    const { page, errors } = await open('#/schedules');
    const created = await server.request('PUT', '/v1/schedules/nightly', {
      cron: '0 3 * * *',
      job: { type: 'noop', payload: { echo: 'nightly' } },
    });
    assert.equal(created.status, 201, created.text);
    await page.reload();
    const row = page.locator('[data-schedule=nightly]');
    await waitForText(page, '[data-schedule=nightly] [data-testid=schedule-state]', 'active');
    await row.getByRole('button', { name: 'Pause' }).click();
    await waitForText(page, '[data-schedule=nightly] [data-testid=schedule-state]', 'paused');
    assert.equal((await server.request('GET', '/v1/schedules/nightly')).body.paused, true);
    await row.getByRole('button', { name: 'Resume' }).click();
    await waitForText(page, '[data-schedule=nightly] [data-testid=schedule-state]', 'active');
    await row.getByRole('button', { name: 'Trigger now' }).click();
    await page.waitForURL(/#\/jobs\/[^/]+$/);
    await waitForText(page, '[data-testid=job-schedule]', 'nightly');
    await waitForText(page, '.job-title .badge', 'completed');
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('shows the deliveries of a job’s callback', async () => {
    // A receiver that turns the first delivery away and takes the second.
    const receiver = await startReceiver((_request, n, response) => response.writeHead(n === 0 ? 503 : 204).end());
    try {
      const id = await submit({ type: 'noop', callback: { url: `${receiver.url}/hook` } });
      await server.waitForJob(id);
      const { page, errors } = await open(`#/jobs/${id}`);
      const cell = (row: number, column: number) =>
        `[data-testid=deliveries] tbody tr:nth-child(${row}) td:nth-child(${column})`;
      await waitForText(page, cell(1, 3), 'failed');
      assert.deepEqual(
        [
          await page.locator(cell(1, 1)).textContent(),
          await page.locator(cell(1, 2)).textContent(),
          await page.locator(cell(1, 4)).textContent(),
        ],
        ['job.completed', '1', '503'],
      );
      // The retry comes after its backoff; the page reads the deliveries again meanwhile.
      await waitForText(page, cell(2, 3), 'delivered', 30_000);
      assert.equal(await page.locator(cell(2, 2)).textContent(), '2');
      assert.equal(await page.locator(cell(2, 4)).textContent(), '204');
      const main = (await page.locator('main').textContent()) ?? '';
      assert.ok(main.includes(`Posts to ${receiver.url}/hook`), main);
      assert.deepEqual(errors, []);
      await page.close();
    } finally {
      await receiver.close();
    }
  });

  it("changes a task's limits and returns to the module's own", async () => {
    const { page, errors } = await open('#/tasks');
    const form = page.locator('[data-testid="limits-test.limited"]');
    await waitForText(page, '[data-task="test.limited"] [data-testid=limits]', '1 at once');
    await form.locator('input[name=concurrency]').fill('3');
    await form.locator('input[name=max]').fill('10');
    await form.locator('input[name=perMs]').fill('1000');
    await form.getByRole('button', { name: 'Set' }).click();
    await waitForText(page, '[data-task="test.limited"] [data-testid=limits]', '3 at once, 10 per 1.0 s');
    const task = (await server.request('GET', '/v1/tasks')).body.tasks.find((t: any) => t.name === 'test.limited');
    assert.deepEqual(task.override, { concurrency: 3, rateLimit: { max: 10, perMs: 1000 } });
    await page.locator('[data-testid="limits-test.limited"]').getByRole('button', { name: "Module's own" }).click();
    await waitForText(page, '[data-task="test.limited"] [data-testid=limits]', '1 at once');
    const after = (await server.request('GET', '/v1/tasks')).body.tasks.find((t: any) => t.name === 'test.limited');
    assert.equal(after.override, null);
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('limits a group, shows its running and queued jobs, and removes its limits', async () => {
    const { page, errors } = await open('#/groups');
    await page.locator('main h1').waitFor();
    const adding = page.locator('[data-testid=new-group-limits]');
    await adding.locator('input[name=group]').fill('tenant-ui');
    const form = page.locator('[data-testid=group-limits-new]');
    await form.locator('input[name=concurrency]').fill('1');
    await form.getByRole('button', { name: 'Set' }).click();
    await waitForText(page, '[data-group="tenant-ui"] [data-testid=limits]', '1 at once');
    const listed = (await server.request('GET', '/v1/groups')).body.groups;
    assert.deepEqual(
      listed.find((g: { name: string }) => g.name === 'tenant-ui'),
      { name: 'tenant-ui', limits: { concurrency: 1, rateLimit: null }, running: 0, queued: 0 },
    );
    // Two held jobs of the group: one runs, the other waits for the group's one place.
    const releases = [join(dir, 'group-release-1'), join(dir, 'group-release-2')];
    const ids = [];
    for (const release of releases)
      ids.push(await submit({ type: 'test.hold', group: 'tenant-ui', payload: { release } }));
    await server.whenStatus(ids[0] as string, 'running');
    await waitForText(page, '[data-group="tenant-ui"] [data-testid=group-counts]', 'running 1, queued 1');
    const groupForm = page.locator('[data-testid="group-limits-tenant-ui"]');
    await groupForm.locator('input[name=max]').fill('10');
    await groupForm.locator('input[name=perMs]').fill('1000');
    await groupForm.getByRole('button', { name: 'Set' }).click();
    await waitForText(page, '[data-group="tenant-ui"] [data-testid=limits]', '1 at once, 10 per 1.0 s');
    await page.locator('[data-testid="group-limits-tenant-ui"]').getByRole('button', { name: 'No limits' }).click();
    await waitForText(page, '[data-group="tenant-ui"] [data-testid=limits]', 'none');
    // Its group no longer holds it back: it is claimed, waiting for the one thread.
    await server.whenHeld(ids[1] as string);
    for (const release of releases) writeFileSync(release, '');
    for (const id of ids) await server.waitForJob(id);
    assert.equal(
      (await server.request('GET', '/v1/groups')).body.groups.some((g: { name: string }) => g.name === 'tenant-ui'),
      false,
    );
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('fits a phone-width screen on every page without scrolling sideways', async () => {
    const id = await submit({ type: 'noop', payload: { echo: 'x'.repeat(300) }, metadata: { note: 'y'.repeat(200) } });
    await server.waitForJob(id);
    for (const hash of ['#/', '#/jobs', `#/jobs/${id}`, '#/tasks', '#/groups', '#/schedules', '#/nodes']) {
      const { page, errors } = await open(hash, { width: 375, height: 740 });
      await page.locator('main h1').waitFor();
      await page.waitForLoadState('networkidle');
      assert.equal(await overflowsHorizontally(page), false, `${hash} is wider than the screen`);
      assert.deepEqual(errors, [], hash);
      await page.close();
    }
  });
});

describe('dashboard with API tokens', { skip: browserSkipReason() ?? false }, () => {
  let browser: Browser;
  let server: TestServer;
  let dir: string;

  before(async () => {
    browser = await launchChromium();
    server = await startServer({ KILN_THREADS: '1', KILN_API_TOKENS: 'first-token,second-token' });
    dir = mkdtempSync(join(tmpdir(), 'kiln-ui-'));
  });

  after(async () => {
    await browser?.close();
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('asks for a token, refuses a wrong one, keeps a right one for the tab only', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(`${server.url}/ui/`);
    await page.locator('[data-testid=token-prompt]').waitFor();
    await page.locator('input[name=token]').fill('wrong-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await waitForText(page, '[data-testid=token-prompt] [role=alert]', 'The server did not accept the token.');
    assert.equal(await storageItem(page, 'sessionStorage', 'kiln.token'), null);

    await page.locator('input[name=token]').fill('second-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await waitForText(page, '[data-testid=threads]', '0 / 1');
    assert.equal(await storageItem(page, 'sessionStorage', 'kiln.token'), 'second-token');
    assert.equal(await page.evaluate<number>('localStorage.length'), 0);
    // A reload in the same tab keeps it; a new tab asks again.
    await page.reload();
    await waitForText(page, '[data-testid=threads]', '0 / 1');
    const other = await context.newPage();
    await other.goto(`${server.url}/ui/`);
    await other.locator('[data-testid=token-prompt]').waitFor();
    await context.close();
  });

  it('follows a running job’s progress live through the authenticated event stream', async () => {
    const auth = { authorization: 'Bearer first-token' };
    const created = await server.request('POST', '/v1/jobs', { type: 'test.steps', payload: { dir, steps: 4 } }, auth);
    assert.equal(created.status, 201, created.text);
    const id = created.body.id;
    await server.whenStatus(id, 'running');

    const context = await browser.newContext();
    await context.addInitScript({ content: "sessionStorage.setItem('kiln.token', 'first-token')" });
    const page = await context.newPage();
    const errors = pageErrors(page);
    const streams: string[] = [];
    page.on('request', (request) => {
      if (request.url().endsWith('/events')) streams.push(request.url());
    });
    await page.goto(`${server.url}/ui/#/jobs/${id}`);
    await waitForText(page, '[data-testid=progress-percent]', '0 %');
    await page.locator('.live').waitFor();
    for (const [step, percent] of [
      [1, '25 %'],
      [2, '50 %'],
      [3, '75 %'],
    ] as const) {
      writeFileSync(join(dir, `step-${step}`), '');
      await waitForText(page, '[data-testid=progress-percent]', percent);
    }
    writeFileSync(join(dir, 'step-4'), '');
    await waitForText(page, '.job-title .badge', 'completed');
    await waitForText(page, '[data-testid=progress-percent]', '100 %');
    // The token travelled in a header: no URL the page asked for carries it.
    assert.equal(streams.length, 1);
    assert.ok(streams.every((url) => !url.includes('token')));
    assert.deepEqual(errors, []);
    await context.close();
  });
});

describe('dashboard with a read token', { skip: browserSkipReason() ?? false }, () => {
  let browser: Browser;
  let server: TestServer;
  let dir: string;
  const admin = { authorization: 'Bearer admin-token' };

  before(async () => {
    browser = await launchChromium();
    dir = mkdtempSync(join(tmpdir(), 'kiln-ui-'));
    const file = join(dir, 'tokens.json');
    writeFileSync(file, JSON.stringify([{ name: 'viewer', token: 'viewer-token', scopes: ['read'] }]));
    server = await startServer({ KILN_THREADS: '1', KILN_API_TOKENS: 'admin-token', KILN_API_TOKENS_FILE: file });
  });

  after(async () => {
    await browser?.close();
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** A tab signed in with `token`, on `hash`. */
  async function openAs(
    token: string,
    hash: string,
  ): Promise<{ page: Page; errors: string[]; close(): Promise<void> }> {
    const context = await browser.newContext();
    await context.addInitScript({ content: `sessionStorage.setItem('kiln.token', ${JSON.stringify(token)})` });
    const page = await context.newPage();
    const errors = pageErrors(page);
    await page.goto(`${server.url}/ui/${hash}`);
    return { page, errors, close: () => context.close() };
  }

  it('shows the same pages without the actions the token may not take', async () => {
    const created = await server.request('POST', '/v1/jobs', { type: 'noop' }, admin);
    assert.equal(created.status, 201, created.text);
    const id = created.body.id as string;
    assert.equal((await server.request('GET', `/v1/jobs/${id}?wait=30`, undefined, admin)).body.status, 'completed');
    const schedule = await server.request(
      'PUT',
      '/v1/schedules/nightly',
      { cron: '0 3 * * *', job: { type: 'noop' } },
      admin,
    );
    assert.equal(schedule.status, 201, schedule.text);
    const limited = await server.request('PUT', '/v1/groups/tenant-x/limits', { concurrency: 2 }, admin);
    assert.equal(limited.status, 200, limited.text);

    // Each page with its data, as the admin token sees it and as the read token does.
    const pages = [
      { hash: '#/', ready: '[data-testid=threads]', actions: ['Pause dispatch'] },
      { hash: `#/jobs/${id}`, ready: '.job-title .badge', actions: ['Cancel', 'Retry', 'Delete'] },
      { hash: '#/tasks', ready: '[data-task=noop] [data-testid=limits]', actions: ['Set', "Module's own"] },
      { hash: '#/groups', ready: '[data-group=tenant-x] [data-testid=limits]', actions: ['Set', 'No limits'] },
      {
        hash: '#/schedules',
        ready: '[data-schedule=nightly] [data-testid=schedule-state]',
        actions: ['Pause', 'Trigger now'],
      },
    ];
    for (const [token, name, shown] of [
      ['admin-token', 'env:1 (read, submit, admin)', true],
      ['viewer-token', 'viewer (read)', false],
    ] as const) {
      for (const { hash, ready, actions } of pages) {
        const { page, errors, close } = await openAs(token, hash);
        await page.locator(ready).first().waitFor();
        // The token's name and scopes in the header: its permissions are loaded.
        await waitForText(page, '[data-testid=token-name]', name);
        for (const action of actions) {
          const button = page.locator('main').getByRole('button', { name: action, exact: true });
          if (shown) await button.first().waitFor();
          else assert.equal(await button.count(), 0, `${token} on ${hash}: ${action} is shown`);
        }
        assert.deepEqual(errors, [], `${token} on ${hash}`);
        await close();
      }
    }
    // Nothing the read token saw changed anything.
    assert.equal((await server.request('GET', `/v1/jobs/${id}`, undefined, admin)).status, 200);
    assert.equal((await server.request('GET', '/v1/schedules/nightly', undefined, admin)).body.paused, false);
  });

  it("shows no action of the token signed out while the next token's scopes are on their way", async () => {
    const { page, errors, close } = await openAs('admin-token', '#/');
    await waitForText(page, '[data-testid=token-name]', 'env:1 (read, submit, admin)');
    const pause = page.locator('main').getByRole('button', { name: 'Pause dispatch', exact: true });
    await pause.waitFor();

    // The next token's scopes are held back until the page has been looked at without them.
    let release = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let asked = () => {};
    const tokenAsked = new Promise<void>((resolve) => {
      asked = resolve;
    });
    await page.route('**/v1/token', async (route) => {
      asked();
      await released;
      await route.continue();
    });
    await page.getByRole('button', { name: 'Forget token' }).click();
    await page.locator('input[name=token]').fill('viewer-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await tokenAsked;
    await page.locator('[data-testid=threads]').waitFor();
    assert.equal(await pause.count(), 0, "the admin token's button is shown after it was forgotten");
    release();
    await waitForText(page, '[data-testid=token-name]', 'viewer (read)');
    assert.equal(await pause.count(), 0);
    assert.deepEqual(errors, []);
    await close();
  });
});
