import { createServer, get as httpGet } from 'node:http';
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

/** An open GET /v1/jobs/{id}/events. */
export interface JobStream {
  /** Settles when the stream has ended (the server closed it, or `stop`), with every job it showed. */
  ended: Promise<any[]>;
  /** Closes the stream. */
  stop(): void;
}

/**
 * Follows a job's event stream: `onJob` hears each job it shows. Rejects `ended` if the
 * answer is not 200. node:http rather than fetch: destroying the request closes the
 * socket at once, where a cancelled fetch body leaves the connection open for seconds.
 */
export function followJobEvents(url: string, id: string, onJob: (job: any) => void = () => {}): JobStream {
  const shown: any[] = [];
  let request!: ReturnType<typeof httpGet>;
  const ended = new Promise<any[]>((resolve, reject) => {
    request = httpGet(`${url}/v1/jobs/${id}/events`, (response) => {
      if (response.statusCode !== 200) {
        request.destroy();
        reject(new Error(`GET /v1/jobs/${id}/events: ${response.statusCode}`));
        return;
      }
      response.setEncoding('utf8');
      let buffer = '';
      response.on('data', (chunk: string) => {
        buffer += chunk;
        const taken = takeSseJobs(buffer);
        buffer = taken.rest;
        for (const job of taken.jobs) {
          shown.push(job);
          onJob(job);
        }
      });
      response.on('close', () => resolve(shown));
    });
    request.on('error', reject);
  });
  // A stream stopped before its answer came rejects, and its caller may not be waiting.
  ended.catch(() => {});
  return { ended, stop: () => request.destroy() };
}

/** `http://127.0.0.1:<port>` of a port that was free a moment ago and has nothing listening now. */
export async function closedPortUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}
