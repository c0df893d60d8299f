import { createHmac } from 'node:crypto';

/**
 * `Kiln-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` (API.md
 * "Callbacks"): the timestamp is signed with the body, so a receiver that checks it is
 * recent refuses a replayed request.
 */
export function signatureHeader(secret: string, unixSeconds: number, body: string): string {
  const mac = createHmac('sha256', secret).update(`${unixSeconds}.${body}`).digest('hex');
  return `t=${unixSeconds},v1=${mac}`;
}
