import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';

/** A fresh temporary directory for this test file, removed after it; answers a maker of new file paths in it. */
export function tempFiles(prefix: string): () => string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  after(() => rmSync(dir, { recursive: true, force: true }));
  let files = 0;
  return () => join(dir, `store-${++files}.db`);
}
