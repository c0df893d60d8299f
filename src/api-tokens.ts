import { createHash } from 'node:crypto';
import { closeSync, fstatSync, openSync, readFileSync } from 'node:fs';
import { z } from 'zod';
import { SCOPES, type Scope } from './contract/scopes.js';

/**
 * The API's tokens, from KILN_API_TOKENS (each has every scope) and KILN_API_TOKENS_FILE
 * (named, with scopes, the secret in clear or as its SHA-256). Only digests are kept:
 * a presented token is hashed and compared with them. No message here ever holds a
 * secret or a digest; an entry is named by its place in the file and its name.
 */

export interface ApiToken {
  /** How logs name it: the file's `name`, or `env:<n>` for the n-th token of KILN_API_TOKENS. */
  name: string;
  /** SHA-256 of the secret. */
  digest: Buffer;
  scopes: Scope[];
}

export function sha256(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

/** What loadApiTokens found: the tokens, and what to warn of at start (null: nothing). */
export interface LoadedApiTokens {
  tokens: ApiToken[];
  warning: string | null;
}

/**
 * The characters a bearer token is made of (RFC 6750, token68). A secret with any other
 * (a space, a letter beyond ASCII, which a header does not carry as UTF-8) could never
 * be presented as it was configured.
 */
const TOKEN68 = /^[A-Za-z0-9\-._~+/]+=*$/;
// What is wrong with such a secret, said without quoting it.
const NOT_TOKEN68 =
  'has a character a bearer token cannot carry (RFC 6750: letters, digits, "-", ".", "_", "~", "+", "/", then "=" at the end only)';

/** A secret as both sources give it: spaces around it are not part of it. */
function trimmed(secret: string): string {
  return secret.trim();
}

const NAME = /^[A-Za-z0-9._-]{1,64}$/;

const entrySchema = z
  .object({
    name: z.string({ message: 'needs a name' }).regex(NAME, 'name must be 1–64 letters, digits, ".", "_" or "-"'),
    token: z.string().optional(),
    sha256: z
      .string()
      .regex(/^[0-9a-fA-F]{64}$/, 'sha256 must be 64 hex digits')
      .optional(),
    scopes: z
      .array(z.string(), { message: `scopes must be a list of ${SCOPES.join(', ')}` })
      .min(1, `scopes must not be empty (give some of ${SCOPES.join(', ')})`),
  })
  .strict();

/** Turns one line of zod's complaint about an entry into words; never echoes a value. */
function entryIssue(issue: z.ZodIssue): string {
  if (issue.code === 'unrecognized_keys') return `has unknown fields ${issue.keys.join(', ')}`;
  if (issue.code === 'invalid_type' && issue.path.length === 1 && issue.path[0] !== 'name') {
    return `${String(issue.path[0])} must be a ${issue.path[0] === 'scopes' ? 'list' : 'string'}`;
  }
  return issue.message;
}

/**
 * Every token the server accepts. Throws an Error with a one-line reason: a file that
 * cannot be read or parsed, an entry that is wrong, a secret a bearer header cannot
 * carry, a secret given twice, a name given twice. Warns of a file that holds secrets
 * in clear and that every user may read.
 */
export function loadApiTokens(envTokens: readonly string[], file: string | null): LoadedApiTokens {
  const secrets = envTokens.map(trimmed);
  for (const [index, secret] of secrets.entries()) {
    if (!TOKEN68.test(secret)) throw new Error(`KILN_API_TOKENS: token ${index + 1} ${NOT_TOKEN68}`);
    const first = secrets.indexOf(secret);
    if (first !== index) throw new Error(`KILN_API_TOKENS: token ${index + 1} is token ${first + 1} again`);
  }
  const tokens: ApiToken[] = secrets.map((secret, index) => ({
    name: `env:${index + 1}`,
    digest: sha256(secret),
    scopes: [...SCOPES],
  }));
  const seen = (digest: Buffer) => tokens.find((token) => token.digest.equals(digest));
  if (file === null) return { tokens, warning: null };

  const where = `KILN_API_TOKENS_FILE ${JSON.stringify(file)}`;
  let text: string;
  let mode: number;
  try {
    const fd = openSync(file, 'r');
    try {
      mode = fstatSync(fd).mode;
      // An editor may start a UTF-8 file with a byte order mark, which JSON.parse refuses.
      text = readFileSync(fd, 'utf8').replace(/^\uFEFF/, '');
    } finally {
      closeSync(fd);
    }
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? String(error);
    throw new Error(`${where} cannot be read (${code})`, { cause: error });
  }
  let parsed: unknown;
  let unparsed: string | null = null;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    unparsed = String(error);
  }
  if (unparsed !== null) {
    // The parser's message may quote the file's text, secrets included: only the place is
    // told, and the parser's error is not kept, where it could be logged.
    const position = /position (\d+)/.exec(unparsed)?.[1];
    throw new Error(
      `${where} is not JSON${position === undefined ? '' : ` (${lineAndColumn(text, Number(position))})`}`,
    );
  }
  if (!Array.isArray(parsed)) {
    throw new Error(`${where} must hold a JSON list of { "name", "token" or "sha256", "scopes" }`);
  }
  if (parsed.length === 0) throw new Error(`${where} holds no token (leave it unset for no tokens)`);
  const names = new Map<string, number>();
  let inClear = false;
  for (const [index, raw] of parsed.entries()) {
    const rawName = (raw as { name?: unknown } | null)?.name;
    const label = `entry ${index + 1}${typeof rawName === 'string' && NAME.test(rawName) ? ` ("${rawName}")` : ''}`;
    const fail = (reason: string): never => {
      throw new Error(`${where}: ${label} ${reason}`);
    };
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
      fail('must be an object { "name", "token" or "sha256", "scopes" }');
    }
    const result = entrySchema.safeParse(raw);
    if (!result.success) {
      const issue = result.error.issues[0];
      return fail(issue === undefined ? 'is not valid' : entryIssue(issue));
    }
    const entry = result.data;
    if (entry.token !== undefined && entry.sha256 !== undefined) fail('gives both token and sha256; give one');
    if (entry.token === undefined && entry.sha256 === undefined) fail('needs a token or a sha256');
    const unknown = entry.scopes.find((scope) => !(SCOPES as readonly string[]).includes(scope));
    if (unknown !== undefined) {
      fail(`has the scope ${JSON.stringify(unknown)}; scopes are ${SCOPES.join(', ')}`);
    }
    const firstWithName = names.get(entry.name);
    if (firstWithName !== undefined) fail(`has the name of entry ${firstWithName}`);
    names.set(entry.name, index + 1);
    const secret = entry.token === undefined ? null : trimmed(entry.token);
    if (secret === '') fail('token must not be empty');
    if (secret !== null && !TOKEN68.test(secret)) fail(`token ${NOT_TOKEN68}`);
    inClear ||= secret !== null;
    const digest = secret !== null ? sha256(secret) : Buffer.from(entry.sha256 ?? '', 'hex');
    const twin = seen(digest);
    if (twin !== undefined) fail(`has the same secret as ${describe(twin)}`);
    tokens.push({ name: entry.name, digest, scopes: entry.scopes as Scope[] });
  }
  // Not refused: a file readable by all may be what a container's mounted secret gives.
  const warning =
    inClear && (mode & 0o004) !== 0
      ? `${where} holds secrets in clear and every user of this machine may read it (mode ${(mode & 0o777).toString(8)}): make it unreadable to others (chmod o-r) or give the secrets as sha256`
      : null;
  return { tokens, warning };
}

function describe(token: ApiToken): string {
  return token.name.startsWith('env:') ? `token ${token.name.slice(4)} of KILN_API_TOKENS` : `"${token.name}"`;
}

function lineAndColumn(text: string, position: number): string {
  const before = text.slice(0, position).split('\n');
  return `line ${before.length}, column ${(before.at(-1)?.length ?? 0) + 1}`;
}
