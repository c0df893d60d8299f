import assert from 'node:assert/strict';
import { connect } from 'node:net';

/** HTTP written on raw sockets, for requests fetch and node:http cannot send (unfinished, without Host, …). */

/** How long a helper waits for the server to end a request before it calls the server stuck. */
export const DEADLINE_MS = 20_000;

export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: any; // a problem document, asserted field by field
}

/**
 * Writes `bytes` on a fresh connection, keeps its writing side open, and answers what
 * the server said once it ends the connection; rejects if it has not within DEADLINE_MS.
 */
export function exchange(url: string, bytes: string | Buffer): Promise<RawAnswer> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port), allowHalfOpen: true });
    const chunks: Buffer[] = [];
    const deadline = setTimeout(() => {
      socket.destroy();
      reject(new Error(`the server kept the connection open for ${DEADLINE_MS} ms`));
    }, DEADLINE_MS);
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'ECONNRESET') reject(error);
    });
    // The server ends its side when it has answered; this side stays open until then.
    socket.on('end', () => {
      clearTimeout(deadline);
      socket.end();
      try {
        resolve(parseAnswer(Buffer.concat(chunks).toString('utf8')));
      } catch (error) {
        reject(error);
      }
    });
    socket.write(bytes);
  });
}

function parseAnswer(raw: string): RawAnswer {
  const head = raw.indexOf('\r\n\r\n');
  if (head === -1) throw new Error(`no HTTP answer: ${JSON.stringify(raw)}`);
  const [statusLine = '', ...lines] = raw.slice(0, head).split('\r\n');
  const status = Number(/^HTTP\/1\.1 (\d{3}) /.exec(statusLine)?.[1]);
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const text = raw.slice(head + 4);
  let body: unknown;
  try {
    body = text === '' ? null : JSON.parse(text);
  } catch {
    body = text;
  }
  return { status, headers, body };
}

export function assertProblem(
  answer: { status: number; body: any },
  status: number,
  code: string,
  contentType: string,
) {
  assert.equal(answer.status, status, JSON.stringify(answer.body));
  assert.match(contentType, /^application\/problem\+json/);
  assert.equal(answer.body?.status, status);
  assert.equal(answer.body?.code, code);
  assert.equal(typeof answer.body?.detail, 'string');
}

/** Settles as `promise` does; rejects if it has not within DEADLINE_MS. */
export async function withDeadline<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`waited ${DEADLINE_MS} ms for ${what}`)), DEADLINE_MS);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}
