import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request a receiver got: its headers and its body exactly as the bytes came. */
export interface Received {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  rawBody: string;
}

/** How the receiver answers the n-th request (0-based); by default 204. */
export type Answer = (request: Received, n: number, response: ServerResponse) => void;

export interface Receiver {
  url: string;
  received: Received[];
  /** Resolves with the request number `n` (0-based) once it has come. */
  request(n: number): Promise<Received>;
  answer: Answer;
  close(): Promise<void>;
}

/** A callback receiver: a real node:http server on 127.0.0.1 that keeps what it gets. */
export async function startReceiver(
  answer: Answer = (_r, _n, response) => response.writeHead(204).end(),
): Promise<Receiver> {
  const received: Received[] = [];
  const waiting = new Map<number, ((request: Received) => void)[]>();
  const open = new Set<ServerResponse>();
  const receiver: Receiver = {
    url: '',
    received,
    answer,
    request(n) {
      const already = received[n];
      if (already !== undefined) return Promise.resolve(already);
      return new Promise((resolve) => {
        const list = waiting.get(n) ?? [];
        list.push(resolve);
        waiting.set(n, list);
      });
    },
    async close() {
      for (const response of open) response.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const entry: Received = {
        method: request.method ?? '',
        path: request.url ?? '',
        headers: request.headers,
        rawBody: Buffer.concat(chunks).toString('utf8'),
      };
      const n = received.length;
      received.push(entry);
      open.add(response);
      response.on('close', () => open.delete(response));
      receiver.answer(entry, n, response);
      for (const resolve of waiting.get(n) ?? []) resolve(entry);
      waiting.delete(n);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return receiver;
}

/**
 * What a receiver does with Kiln-Signature: recompute the HMAC-SHA256 of
 * "<t>.<raw body>" with the shared secret, compare in constant time, and refuse a
 * timestamp more than `toleranceSeconds` away from now (a replay).
 */
export function verifySignature(
  secret: string,
  header: string | undefined,
  rawBody: string,
  nowSeconds = Math.floor(Date.now() / 1000),
  toleranceSeconds = 300,
): boolean {
  if (header === undefined) return false;
  const parts = new Map(
    header.split(',').map((part) => {
      const at = part.indexOf('=');
      return [part.slice(0, at).trim(), part.slice(at + 1).trim()] as const;
    }),
  );
  const t = Number(parts.get('t'));
  const given = parts.get('v1');
  if (!Number.isInteger(t) || given === undefined || !/^[0-9a-f]{64}$/.test(given)) return false;
  if (Math.abs(nowSeconds - t) > toleranceSeconds) return false;
  const expected = createHmac('sha256', secret).update(`${t}.${rawBody}`).digest();
  return timingSafeEqual(expected, Buffer.from(given, 'hex'));
}
