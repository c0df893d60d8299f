import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, relative, sep } from 'node:path';
import { describe, it } from 'node:test';
import { repoRoot } from '../support/paths.js';

/**
 * The arrows between src/'s folders (README, "Architecture"): server → scheduler → store,
 * every layer → contract, and the client and the dashboard → contract only. Read from the
 * sources, every `import … from`, `export … from` and `import()`, type imports included.
 */

const srcDir = join(repoRoot, 'src');

/** One import: the importing file and the imported one, both relative to src/ with '/'. */
interface Arrow {
  from: string;
  to: string;
}

/**
 * Arrows that break a rule today, each with the change that removes it (none now). The
 * test fails when one of them is gone, so the list cannot go stale.
 */
const KNOWN: readonly (Arrow & { why: string })[] = [];

const RULES: readonly { rule: string; breaks(arrow: Arrow): boolean }[] = [
  {
    rule: 'contract/ imports only contract/',
    breaks: ({ from, to }) => within(from, 'contract') && !within(to, 'contract'),
  },
  {
    rule: 'client/ imports only contract/ and client/',
    breaks: ({ from, to }) => within(from, 'client') && !within(to, 'client') && !within(to, 'contract'),
  },
  {
    rule: 'ui/ imports only contract/, client/ and ui/',
    breaks: ({ from, to }) => within(from, 'ui') && !['ui', 'client', 'contract'].some((layer) => within(to, layer)),
  },
  {
    rule: 'server/ does not import store/',
    breaks: ({ from, to }) => within(from, 'server') && within(to, 'store'),
  },
  {
    rule: 'store/ imports neither scheduler/ nor server/',
    breaks: ({ from, to }) => within(from, 'store') && (within(to, 'scheduler') || within(to, 'server')),
  },
  {
    rule: 'store/sqlite/ and store/postgres/ do not import each other',
    breaks: ({ from, to }) =>
      (within(from, 'store/sqlite') && within(to, 'store/postgres')) ||
      (within(from, 'store/postgres') && within(to, 'store/sqlite')),
  },
];

function within(file: string, folder: string): boolean {
  return file.startsWith(`${folder}/`);
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

/** Every `import … from '…'`, `export … from '…'` and `import('…')` specifier in a module's text. */
function importSpecifiers(source: string): string[] {
  const pattern =
    /(?:^|[;\s])(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|(?:^|[;\s])import\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/gm;
  return [...source.matchAll(pattern)].map((match) => match[1] ?? match[2] ?? match[3] ?? '');
}

/** The src/ file a specifier names, or null for a package that is not Kiln. */
function target(fromFile: string, specifier: string): string | null {
  if (specifier === 'kiln-queue/client') return 'client/index.ts';
  if (specifier === 'kiln-queue') return 'index.ts';
  if (!specifier.startsWith('.')) return null;
  const path = relative(srcDir, join(dirname(fromFile), specifier))
    .split(sep)
    .join(posix.sep);
  return path.replace(/\.js$/, '.ts');
}

function arrows(): Arrow[] {
  return sourceFiles(srcDir).flatMap((file) => {
    const from = relative(srcDir, file).split(sep).join(posix.sep);
    return importSpecifiers(readFileSync(file, 'utf8')).flatMap((specifier) => {
      const to = target(file, specifier);
      return to === null ? [] : [{ from, to }];
    });
  });
}

const same = (a: Arrow, b: Arrow) => a.from === b.from && a.to === b.to;

describe('the layers of src/', () => {
  const all = arrows();

  it('reads the imports of every layer', () => {
    for (const layer of ['contract', 'client', 'ui', 'server', 'scheduler', 'store', 'cli']) {
      assert.ok(
        all.some((arrow) => within(arrow.from, layer)),
        `no import read from src/${layer}/`,
      );
    }
    assert.ok(all.some((arrow) => same(arrow, { from: 'client/types.ts', to: 'contract/schemas.ts' })));
    assert.ok(all.some((arrow) => same(arrow, { from: 'ui/api.ts', to: 'client/index.ts' })));
  });

  for (const { rule, breaks } of RULES) {
    it(rule, () => {
      const wrong = all.filter((arrow) => breaks(arrow) && !KNOWN.some((known) => same(known, arrow)));
      assert.deepEqual(
        wrong.map(({ from, to }) => `${from} → ${to}`),
        [],
      );
    });
  }

  it('lists as known only arrows that are still there and still break a rule', () => {
    for (const known of KNOWN) {
      assert.ok(
        all.some((arrow) => same(arrow, known)),
        `${known.from} → ${known.to} is gone: take it off the list`,
      );
      assert.ok(
        RULES.some((rule) => rule.breaks(known)),
        `${known.from} → ${known.to} breaks no rule`,
      );
    }
  });
});
