import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/** What the test helpers answer for an HTTP request. */
export interface TestResponse {
  status: number;
  headers: Headers;
  body: any; // JSON of any shape: the tests assert on it field by field
  text: string;
}

/** One request to a Kiln at `baseUrl`: a JSON body unless a string is given, the answer parsed when it is JSON. */
export async function requestJson(
  baseUrl: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<TestResponse> {
  const init: RequestInit = { method, headers: { ...headers } };
  if (body !== undefined) {
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
    (init.headers as Record<string, string>)['content-type'] ??= 'application/json';
  }
  const response = await fetch(`${baseUrl}${path}`, init);
  const text = await response.text();
  let parsed: any;
  try {
    parsed = text === '' ? null : JSON.parse(text);
  } catch {
    parsed = null;
  }
  return { status: response.status, headers: response.headers, body: parsed, text };
}

/**
 * Splits complete Server-Sent Events frames off `buffer`: the `data` of each `event:
 * job` frame parsed, and what is left of the buffer (an incomplete frame).
 */
export function takeSseJobs(buffer: string): { jobs: any[]; rest: string } {
  const jobs: any[] = [];
  let rest = buffer;
  for (let end = rest.indexOf('\n\n'); end !== -1; end = rest.indexOf('\n\n')) {
    const frame = rest.slice(0, end);
    rest = rest.slice(end + 2);
    const data = frame
      .split('\n')
      .filter((line) => line.startsWith('data: '))
      .map((line) => line.slice(6))
      .join('\n');
    if (data === '') continue;
    if (!/^event: job$/m.test(frame)) throw new Error(`an SSE frame with data but no "event: job": ${frame}`);
    jobs.push(JSON.parse(data));
  }
  return { jobs, rest };
}

/** `http://127.0.0.1:<port>` of a port that was free a moment ago and has nothing listening now. */
export async function closedPortUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}
