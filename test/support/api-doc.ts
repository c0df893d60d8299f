import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from './paths.js';

/** One row of an error-code table in docs/API.md. */
export interface DocumentedCode {
  status: number;
  code: string;
  /** The heading the table stands under. */
  section: string;
}

/** The headings under which docs/API.md lists problem codes; "Errors" is required. */
const CODE_SECTIONS = ['Errors', 'New error codes'];

export const apiDocPath = join(repoRoot, 'docs', 'API.md');

/**
 * Every row of the `| status | code | when |` tables under the "Errors" and "New error
 * codes" headings of docs/API.md. Throws on a row it cannot read, and when the "Errors"
 * table is missing, so a change to the page's shape fails the tests instead of
 * shrinking the list.
 */
export function documentedProblemCodes(markdown: string = readFileSync(apiDocPath, 'utf8')): DocumentedCode[] {
  const rows: DocumentedCode[] = [];
  const sectionsWithTable = new Set<string>();
  let section: string | null = null;
  let inFence = false;
  let inTable = false;
  for (const [index, line] of markdown.split('\n').entries()) {
    if (line.startsWith('```')) inFence = !inFence;
    if (inFence) continue;
    const heading = /^#{1,6}\s+(.*?)\s*$/.exec(line);
    if (heading !== null) {
      section = heading[1] ?? '';
      inTable = false;
      continue;
    }
    if (section === null || !CODE_SECTIONS.includes(section)) continue;
    if (!line.startsWith('|')) {
      inTable = false;
      continue;
    }
    const cells = line
      .slice(1, line.endsWith('|') ? -1 : undefined)
      .split('|')
      .map((cell) => cell.trim());
    if (!inTable) {
      inTable = cells.join('|') === 'status|code|when';
      if (inTable) sectionsWithTable.add(section);
      continue;
    }
    if (cells.every((cell) => /^:?-+:?$/.test(cell))) continue;
    const status = /^\d{3}$/.test(cells[0] ?? '') ? Number(cells[0]) : Number.NaN;
    const code = /^`([a-z_]+)`$/.exec(cells[1] ?? '')?.[1];
    if (Number.isNaN(status) || code === undefined) {
      throw new Error(`docs/API.md line ${index + 1}: expected "| <status> | \`<code>\` | <when> |", got: ${line}`);
    }
    rows.push({ status, code, section });
  }
  if (!sectionsWithTable.has('Errors')) {
    throw new Error('docs/API.md has no "| status | code | when |" table under an "Errors" heading');
  }
  return rows;
}
