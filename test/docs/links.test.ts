import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { repoRoot } from '../support/paths.js';

/**
 * The documentation set: the README and the pages of docs/ (and bench/README.md) link to one
 * another and to files of the repository. Every relative link must name a file that exists and,
 * when it names a heading (`page.md#anchor`), a heading of that page, as GitHub makes its anchors;
 * every page of docs/ is linked from the README, and every page the README links links back.
 */

interface Link {
  file: string;
  line: number;
  target: string;
}

const readme = join(repoRoot, 'README.md');
const docsDir = join(repoRoot, 'docs');

function markdownFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return markdownFiles(path);
    return entry.name.endsWith('.md') ? [path] : [];
  });
}

const pages = [readme, join(repoRoot, 'bench', 'README.md'), ...markdownFiles(docsDir)];

/** The lines of a Markdown file outside fenced code blocks, with their numbers, inline code removed. */
function proseLines(file: string): { text: string; line: number }[] {
  const out: { text: string; line: number }[] = [];
  let fence = false;
  readFileSync(file, 'utf8')
    .split('\n')
    .forEach((text, index) => {
      if (/^\s*```/.test(text)) {
        fence = !fence;
        return;
      }
      if (!fence)
        out.push({ text: text.replace(/`[^`]*`/g, (code) => (code.includes('](') ? '' : code)), line: index + 1 });
    });
  return out;
}

function linksOf(file: string): Link[] {
  const links: Link[] = [];
  for (const { text, line } of proseLines(file)) {
    for (const match of text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) links.push({ file, line, target: match[1]! });
  }
  return links;
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function anchorsOf(file: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const { text } of proseLines(file)) {
    for (const match of text.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(match[1]!);
    const heading = /^#{1,6}\s+(.*)$/.exec(text);
    if (heading === null) continue;
    const base = heading[1]!
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/ /g, '-');
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

const isExternal = (target: string) => /^[a-z][a-z0-9+.-]*:/i.test(target);

/** The file a relative link names (the page itself for `#anchor`), and its anchor. */
function resolveLink(link: Link): { path: string; anchor: string | null } {
  const [path = '', anchor] = link.target.split('#', 2);
  return { path: path === '' ? link.file : resolve(dirname(link.file), decodeURI(path)), anchor: anchor ?? null };
}

describe('the documentation links', () => {
  it('name files of the repository that exist, and headings those pages have', () => {
    const broken: string[] = [];
    const anchorCache = new Map<string, Set<string>>();
    let checked = 0;
    for (const page of pages) {
      for (const link of linksOf(page)) {
        if (isExternal(link.target)) continue;
        checked += 1;
        const where = `${relative(repoRoot, link.file)}:${link.line}: ${link.target}`;
        const { path, anchor } = resolveLink(link);
        if (!existsSync(path)) {
          broken.push(`${where} (no such file)`);
          continue;
        }
        if (anchor === null || !path.endsWith('.md')) continue;
        let anchors = anchorCache.get(path);
        if (anchors === undefined) {
          anchors = anchorsOf(path);
          anchorCache.set(path, anchors);
        }
        if (!anchors.has(anchor)) broken.push(`${where} (no heading #${anchor} in ${relative(repoRoot, path)})`);
      }
    }
    assert.ok(checked > 100, `only ${checked} links found: is the parser reading the pages?`);
    assert.deepEqual(broken, []);
  });

  it('reach every page of docs/ from the README, and lead back from each page the README links', () => {
    const fromReadme = new Set(
      linksOf(readme)
        .filter((link) => !isExternal(link.target))
        .map((link) => resolveLink(link).path),
    );
    const topics = readdirSync(docsDir)
      .filter((name) => name.endsWith('.md'))
      .map((name) => join(docsDir, name));
    assert.deepEqual(
      topics.filter((page) => !fromReadme.has(page)).map((page) => relative(repoRoot, page)),
      [],
      'pages of docs/ the README does not link',
    );
    const linked = [...fromReadme].filter((path) => path.endsWith('.md') && path !== readme);
    assert.ok(linked.length >= 10, `the README links ${linked.length} pages`);
    const noWayBack = linked.filter((page) => !linksOf(page).some((link) => resolveLink(link).path === readme));
    assert.deepEqual(
      noWayBack.map((page) => relative(repoRoot, page)),
      [],
      'pages the README links that do not link back to it',
    );
  });

  it('keeps the README short: what a newcomer needs first, the rest in docs/', () => {
    const lines = readFileSync(readme, 'utf8').trimEnd().split('\n').length;
    assert.ok(lines <= 300, `README.md has ${lines} lines; move a topic to docs/`);
  });
});
