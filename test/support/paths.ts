import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root, from dist/test/support/ or test/support/. */
export const repoRoot = fileURLToPath(
  new URL(import.meta.url.includes('/dist/') ? '../../../' : '../../', import.meta.url),
);
export const fixtureTasksDir = join(repoRoot, 'test', 'fixtures', 'kiln-tasks');
export const typescriptTasksDir = join(repoRoot, 'test', 'fixtures', 'ts-tasks');
