import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Browser } from 'playwright-core';
import { browserSkipReason, launchChromium, pageErrors, waitForRows, waitForText } from '../support/browser.js';
import { startServer, type TestServer } from '../support/kiln.js';

/** The dashboard's batch page in a real headless Chromium against a real Kiln. */
describe('dashboard: a batch', { skip: browserSkipReason() ?? false }, () => {
  let browser: Browser;
  let server: TestServer;

  before(async () => {
    browser = await launchChromium();
    server = await startServer({ KILN_THREADS: '1' });
  });

  after(async () => {
    await browser?.close();
    await server?.close();
  });

  it('shows its progress as its jobs end, links its jobs, and cancels what is unfinished', async () => {
    await server.request('POST', '/v1/queue/pause');
    const posted = await server.request('POST', '/v1/jobs/batch', {
      jobs: [{ type: 'noop' }, { type: 'noop' }, { type: 'noop', delayMs: 3_600_000 }],
    });
    assert.equal(posted.status, 201, posted.text);
    const { batch, jobs } = posted.body as { batch: string; jobs: { id: string }[] };
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const errors = pageErrors(page);
    await page.goto(`${server.url}/ui/#/batches/${batch}`);
    await waitForText(page, '[data-testid=batch-done]', '0 of 3');
    await waitForText(page, '[data-testid=batch-total]', '3');
    await waitForText(page, '[data-testid=batch-state]', 'unfinished');
    await waitForText(page, '[data-testid=batch-counts] tr[data-status=queued] td.num', '2');
    await waitForText(page, '[data-testid=batch-counts] tr[data-status=scheduled] td.num', '1');

    await server.request('POST', '/v1/queue/resume');
    await waitForText(page, '[data-testid=batch-done]', '2 of 3');
    await waitForText(page, '[data-testid=batch-counts] tr[data-status=completed] td.num', '2');

    page.once('dialog', (dialog) => void dialog.accept());
    await page.getByRole('button', { name: 'Cancel unfinished' }).click();
    await waitForText(page, '[data-testid=batch-done]', '3 of 3');
    await waitForText(page, '[data-testid=batch-state]', 'finished');
    assert.equal((await server.request('GET', `/v1/jobs/${jobs[2]?.id}`)).body.status, 'cancelled');
    assert.equal(await page.getByRole('button', { name: 'Cancel unfinished' }).isDisabled(), true);

    // A count links to those jobs of the batch.
    await page.locator('[data-testid=batch-counts] tr[data-status=completed] a').click();
    await waitForText(page, '[data-testid=batch-filter]', new RegExp(batch));
    await waitForRows(page, '[data-testid=job-table]', 2);
    // A job's page links to its batch.
    await page.goto(`${server.url}/ui/#/jobs/${jobs[0]?.id}`);
    await waitForText(page, '[data-testid=job-batch]', batch);
    await page.locator('[data-testid=job-batch] a').click();
    await waitForText(page, '[data-testid=batch-done]', '3 of 3');
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('says so for an unknown batch', async () => {
    const page = await browser.newPage();
    await page.goto(`${server.url}/ui/#/batches/01936f4e-8d2a-7c3b-9e1f-2a4b6c8d0e20`);
    await waitForText(page, '.problem', /No batch 01936f4e/);
    await page.close();
  });
});
