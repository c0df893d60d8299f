import { type FieldIssue, validationError } from '../scheduler/errors.js';

/** Bodies nest at most this deep; deeper ones would exhaust the stack of code that walks them. */
const MAX_JSON_DEPTH = 64;

/** Issues named at most per body: enough to point at the fault without echoing a hostile body. */
const MAX_ISSUES = 10;

/**
 * Text that may hold a `__proto__` or `constructor` key, spelled plainly or with escapes.
 * Most bodies hold neither, and skip the walk that finds where.
 */
const MAYBE_FORBIDDEN_KEY = /__proto__|constructor|\\u/;

const HUNDREDS_OF_ZEROS = '0'.repeat(300);

/**
 * Whether the text may hold a literal JSON.parse turned into 0 though it is not: a
 * negative exponent, or hundreds of zeros. Three searches for plain strings take a
 * third of the time of one regular expression over the body.
 */
function mayUnderflow(text: string): boolean {
  return text.includes('e-') || text.includes('E-') || text.includes(HUNDREDS_OF_ZEROS);
}

/** What looks like a number literal; inside a string too, which only costs the walk of the text. */
const NUMBER_CANDIDATE = /(?:^|[:,[])\s*(-?\d[\d.]*(?:[eE][-+]?\d+)?)/g;

const NUMBER = /-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?/y;

/**
 * The one parse every JSON body goes through. Beyond JSON.parse it refuses, as a
 * validation_error naming the field, what would be stored other than as sent:
 * - a `__proto__` key (or `constructor.prototype`), which would become the prototype of
 *   any object built from the body by spread or assignment;
 * - a number that does not survive the trip: 1e309 becomes Infinity (stored as null),
 *   1e-400 becomes 0, 9007199254740993 becomes …992.
 * Both are rare: the walk that measures the depth notes numbers that may have changed
 * (infinite, zero, or past 2^53), and only then is the text looked at closer.
 */
export function parseJsonBody(text: string): unknown {
  const value: unknown = JSON.parse(text);
  const { depth, zero, large } = inspect(value);
  if (depth > MAX_JSON_DEPTH) {
    throw validationError([{ path: 'body', message: `nests deeper than ${MAX_JSON_DEPTH} levels` }]);
  }
  const issues = MAYBE_FORBIDDEN_KEY.test(text) ? forbiddenKeys(value) : [];
  const suspect = large || (zero && mayUnderflow(text));
  if (issues.length === 0 && suspect && someInexactCandidate(text)) issues.push(...inexactNumbers(text));
  if (issues.length > 0) throw validationError(issues);
  return value;
}

/**
 * How deep arrays and objects nest in a parsed value (counted without recursion, and no
 * further than past the limit), and whether it holds a zero or a number of magnitude
 * 2^53 or more (Infinity included): the numbers a literal may have been changed into.
 */
function inspect(value: unknown): { depth: number; zero: boolean; large: boolean } {
  let deepest = 0;
  let zero = false;
  let large = false;
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [current, depth] = stack.pop() as [unknown, number];
    if (typeof current === 'number') {
      if (current === 0) zero = true;
      else if (!(Math.abs(current) < 2 ** 53)) large = true;
      continue;
    }
    if (typeof current !== 'object' || current === null) continue;
    if (depth > deepest) deepest = depth;
    if (deepest > MAX_JSON_DEPTH) break;
    for (const child of Object.values(current)) stack.push([child, depth + 1]);
  }
  return { depth: deepest, zero, large };
}

function joinPath(parent: string, key: string | number): string {
  return parent === '' ? String(key) : `${parent}.${key}`;
}

/** The `__proto__` and `constructor.prototype` keys of a parsed value, outer ones first. */
function forbiddenKeys(value: unknown): FieldIssue[] {
  const issues: FieldIssue[] = [];
  const stack: Array<[unknown, string]> = [[value, '']];
  while (stack.length > 0 && issues.length < MAX_ISSUES) {
    const [current, path] = stack.pop() as [unknown, string];
    if (typeof current !== 'object' || current === null) continue;
    const entries = Object.entries(current);
    for (const [key, child] of entries) {
      if (key === '__proto__') {
        issues.push({ path: joinPath(path, key), message: 'the key __proto__ is not accepted' });
      } else if (
        key === 'constructor' &&
        typeof child === 'object' &&
        child !== null &&
        Object.hasOwn(child, 'prototype')
      ) {
        issues.push({
          path: joinPath(joinPath(path, key), 'prototype'),
          message: 'the key constructor.prototype is not accepted',
        });
      }
    }
    for (let i = entries.length - 1; i >= 0; i--) {
      const [key, child] = entries[i] as [string, unknown];
      stack.push([child, joinPath(path, Array.isArray(current) ? Number(key) : key)]);
    }
  }
  return issues.slice(0, MAX_ISSUES);
}

function someInexactCandidate(text: string): boolean {
  for (const match of text.matchAll(NUMBER_CANDIDATE)) {
    if (numberProblem(match[1] ?? '') !== null) return true;
  }
  return false;
}

interface Frame {
  array: boolean;
  /** The key or index of the value being read in this container. */
  key: string | number;
}

/**
 * The number literals of `text` (valid JSON) that do not survive JSON.parse, each named
 * by its path. A walk of the text rather than of the parsed value: the value no longer
 * holds the literal.
 */
function inexactNumbers(text: string): FieldIssue[] {
  const issues: FieldIssue[] = [];
  const frames: Frame[] = [];
  let i = 0;
  while (i < text.length && issues.length < MAX_ISSUES) {
    const c = text.charCodeAt(i);
    if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      frames.push({ array: c === 0x5b, key: 0 });
      i++;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      frames.pop();
      i++;
    } else if (c === 0x2c /* , */) {
      const top = frames[frames.length - 1];
      if (top?.array === true) top.key = (top.key as number) + 1;
      i++;
    } else if (c === 0x22 /* " */) {
      const end = stringEnd(text, i);
      const top = frames[frames.length - 1];
      // A string right before a colon is a key.
      if (top !== undefined && !top.array && nextNonSpace(text, end) === 0x3a) {
        top.key = JSON.parse(text.slice(i, end)) as string;
      }
      i = end;
    } else if (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39)) {
      NUMBER.lastIndex = i;
      const literal = NUMBER.exec(text)?.[0] ?? text.charAt(i);
      const message = numberProblem(literal);
      if (message !== null) {
        const path = frames.reduce<string>((joined, frame) => joinPath(joined, frame.key), '');
        issues.push({ path: path === '' ? 'body' : path, message });
      }
      i += literal.length;
    } else {
      i++;
    }
  }
  return issues;
}

/** The index just past the string literal that starts at `start`. */
function stringEnd(text: string, start: number): number {
  let i = start + 1;
  for (;;) {
    const quote = text.indexOf('"', i);
    if (quote === -1) return text.length;
    let backslashes = 0;
    while (text.charCodeAt(quote - 1 - backslashes) === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return quote + 1;
    i = quote + 1;
  }
}

function nextNonSpace(text: string, from: number): number {
  let i = from;
  while (i < text.length && /\s/.test(text.charAt(i))) i++;
  return text.charCodeAt(i);
}

/**
 * Why a JSON number literal would not be stored as written, or null when it would. Past
 * 2^53 a double holds only some integers; a literal is kept if it is the double's exact
 * value or the shortest decimal that reads back as it (what JSON.stringify writes, so a
 * value a client computed as a double always passes), and refused otherwise, as
 * 9007199254740993 is (the double is …992).
 */
function numberProblem(literal: string): string | null {
  const value = Number(literal);
  const shown =
    literal.length > 40 ? `${literal.slice(0, 24)}…${literal.slice(-8)} (${literal.length} characters)` : literal;
  if (!Number.isFinite(value)) return `the number ${shown} is too large to store (it would become ${value})`;
  if (value === 0) {
    const mantissa = literal.split(/[eE]/)[0] ?? '';
    return /[1-9]/.test(mantissa) ? `the number ${shown} is too small to store (it would become 0)` : null;
  }
  if (Math.abs(value) < 2 ** 53 || String(value) === literal) return null;
  const written = decimal(literal);
  const shortest = decimal(Math.abs(value).toExponential());
  if (written.digits === shortest.digits && written.exponent === shortest.exponent) return null;
  // A finite value holds at most 309 integer digits, so this BigInt stays small.
  if (written.exponent >= 0 && BigInt(written.digits) * 10n ** BigInt(written.exponent) === BigInt(Math.abs(value))) {
    return null;
  }
  return `the number ${shown} cannot be stored exactly (it would become ${value}); send it as a string`;
}

/** A nonzero decimal literal, sign dropped, as digits × 10^exponent with no trailing zeros in the digits. */
function decimal(literal: string): { digits: string; exponent: number } {
  const [mantissa = '', power = '0'] = literal.replace(/^-/, '').split(/[eE]/);
  const [whole = '', fraction = ''] = mantissa.split('.');
  const all = `${whole}${fraction}`.replace(/^0+/, '');
  const digits = all.replace(/0+$/, '');
  return { digits, exponent: Number(power) - fraction.length + (all.length - digits.length) };
}
