import { existsSync } from 'node:fs';
import { type Browser, chromium, type Page } from 'playwright-core';

/** The system's Chromium (Debian package `chromium`); playwright-core downloads no browser of its own. */
export const chromiumPath = process.env.KILN_CHROMIUM ?? '/usr/bin/chromium';

/**
 * Why the browser tests cannot run here, or null when they can. Under CI=true a missing
 * browser is not a reason to skip: the tests run and fail.
 */
export function browserSkipReason(): string | null {
  if (existsSync(chromiumPath) || process.env.CI === 'true') return null;
  return `no Chromium at ${chromiumPath} (apt-get install chromium, or set KILN_CHROMIUM)`;
}

export function launchChromium(): Promise<Browser> {
  if (!existsSync(chromiumPath)) {
    throw new Error(`no Chromium at ${chromiumPath}: the browser tests need it (apt-get install chromium)`);
  }
  return chromium.launch({ executablePath: chromiumPath });
}

/** Collects the page's uncaught errors and console errors, so a test can assert there were none. */
export function pageErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('pageerror', (error) => errors.push(`pageerror: ${error.message}`));
  page.on('console', (message) => {
    // A 401 or 404 the dashboard asked for on purpose is logged by the browser as a failed load.
    if (message.type() === 'error' && !/status of (401|404)/.test(message.text())) {
      errors.push(`console: ${message.text()}`);
    }
  });
  return errors;
}

/**
 * Waits until the text of the first element matching `selector` is `expected` (or
 * matches it), as the page shows it. On timeout the error says what the page showed.
 */
export async function waitForText(
  page: Page,
  selector: string,
  expected: string | RegExp,
  timeoutMs = 20_000,
): Promise<void> {
  try {
    await page.waitForFunction(
      ({ sel, text, source }) => {
        // Runs in the page (whose globals the test's TypeScript does not know).
        const element = (globalThis as any).document.querySelector(sel);
        if (element === null) return false;
        const shown = String(element.textContent ?? '')
          .replace(/\s+/g, ' ')
          .trim();
        return source === null ? shown === text : new RegExp(source).test(shown);
      },
      {
        sel: selector,
        text: typeof expected === 'string' ? expected : null,
        source: typeof expected === 'string' ? null : expected.source,
      },
      { timeout: timeoutMs },
    );
  } catch (error) {
    const shown = await page
      .locator(selector)
      .first()
      .textContent({ timeout: 100 })
      .catch(() => '(no such element)');
    throw new Error(`${selector}: expected ${String(expected)}, the page shows ${JSON.stringify(shown)}`, {
      cause: error,
    });
  }
}

/** Resolves once the page shows `n` rows in the table matching `selector`. */
export async function waitForRows(page: Page, selector: string, n: number, timeoutMs = 20_000): Promise<void> {
  await page.waitForFunction(
    ({ rows, count }) => (globalThis as any).document.querySelectorAll(rows).length === count,
    { rows: `${selector} tbody tr`, count: n },
    { timeout: timeoutMs },
  );
}

/** The page's sessionStorage or localStorage item. */
export function storageItem(
  page: Page,
  storage: 'sessionStorage' | 'localStorage',
  key: string,
): Promise<string | null> {
  return page.evaluate<string | null>(`${storage}.getItem(${JSON.stringify(key)})`);
}

/** Whether the page is wider than the viewport (a horizontal scroll bar on a phone). */
export function overflowsHorizontally(page: Page): Promise<boolean> {
  return page.evaluate<boolean>('document.documentElement.scrollWidth > window.innerWidth');
}
