import { randomBytes } from 'node:crypto';
import { NonRetryableError } from './task.js';

/** How a task's string input is turned into bytes. */
export type InputEncoding = 'utf8' | 'base64';

const BASE64_CHARS = /^[A-Za-z0-9+/]*={0,2}$/;

/** Standard base64, padding optional; a simple character class keeps the check linear on large inputs. */
function isBase64(text: string): boolean {
  if (!BASE64_CHARS.test(text)) return false;
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  if (padding > 0) return text.length % 4 === 0;
  return text.length % 4 !== 1;
}

/**
 * Decodes a payload string. Buffer.from(..., 'base64') silently skips characters it does
 * not understand, so base64 is checked strictly first: a typo must fail the job, not
 * hash or compress different bytes than the client meant.
 */
export function decodeInput(text: string, encoding: InputEncoding, field: string): Buffer {
  if (encoding === 'utf8') return Buffer.from(text, 'utf8');
  if (!isBase64(text)) {
    throw new NonRetryableError(`${field} is not valid base64`);
  }
  return Buffer.from(text, 'base64');
}

/**
 * The salt of a password hash: the given one, decoded with its encoding, or 16 random
 * bytes (returned base64) when none is given.
 */
export function saltOf(payload: { salt?: string | undefined; saltEncoding: InputEncoding }): {
  salt: string;
  saltEncoding: InputEncoding;
  bytes: Buffer;
} {
  const salt = payload.salt ?? randomBytes(16).toString('base64');
  const saltEncoding = payload.salt === undefined ? 'base64' : payload.saltEncoding;
  return { salt, saltEncoding, bytes: decodeInput(salt, saltEncoding, 'salt') };
}
