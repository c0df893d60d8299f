import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { repoRoot } from '../support/paths.js';

/**
 * docs/architecture.md names the files a job passes through and the file that implements
 * each facet on each store; it is only useful while those names are true. Every path it
 * names must exist, and every folder of src/ must be in it, so a new folder or a moved
 * file that the map does not follow fails here.
 */
const DOC = 'docs/architecture.md';
const text = readFileSync(join(repoRoot, DOC), 'utf8');

/** The repository paths the document names: in backticks or as link targets. */
function namedPaths(): string[] {
  const inTicks = [...text.matchAll(/`([^`\s]+)`/g)].map((m) => m[1] ?? '');
  const inLinks = [...text.matchAll(/\]\(([^)\s#]+)(?:#[^)]*)?\)/g)].map((m) => join('docs', m[1] ?? ''));
  return [...inTicks, ...inLinks]
    .map((path) => path.replace(/^\.\//, '').replace(/[:#].*$/, ''))
    .filter((path) => /^(src|test|bench|docs)\/[\w./-]*$/.test(path) && !path.includes('*'));
}

function foldersUnder(dir: string): string[] {
  return readdirSync(join(repoRoot, dir))
    .map((name) => join(dir, name))
    .filter((path) => statSync(join(repoRoot, path)).isDirectory())
    .flatMap((path) => [path, ...foldersUnder(path)]);
}

describe('docs/architecture.md', () => {
  it('is linked from the README', () => {
    assert.match(readFileSync(join(repoRoot, 'README.md'), 'utf8'), /\]\(docs\/architecture\.md\)/);
  });

  it('names only paths that exist', () => {
    const paths = [...new Set(namedPaths().map((path) => relative('.', path)))];
    assert.ok(paths.length >= 40, `the map names files (found ${paths.length})`);
    const missing = paths.filter((path) => !existsSync(join(repoRoot, path)));
    assert.deepEqual(missing, [], `${DOC} names paths that do not exist`);
  });

  it('gives every folder of src/ its job', () => {
    const named = new Set(namedPaths().map((path) => path.replace(/\/$/, '')));
    const unnamed = foldersUnder('src').filter(
      (folder) => !named.has(folder) && !folder.includes('/static') && !folder.includes('/migrations'),
    );
    assert.deepEqual(unnamed, [], `${DOC} says nothing of these folders`);
  });
});
