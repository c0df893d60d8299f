/**
 * Load generator (a child process of a benchmark): autocannon against one URL (or one
 * server and a list of paths, each connection going through them in turn) for a fixed
 * time after a short warm-up.
 *
 * Input: one JSON argument { url, method, body, paths, connections, durationSeconds, warmupSeconds }.
 * Output: one JSON line { requestsPerSecond, latencyP50Ms, latencyP99Ms, ok, non2xx, errors, timeouts }.
 */
import autocannon from 'autocannon';

const input = JSON.parse(process.argv[2] ?? '{}');
const { url, method = 'POST', body, paths, connections = 100, durationSeconds = 10, warmupSeconds = 1 } = input;
const request = {
  url,
  method,
  connections,
  ...(paths === undefined ? {} : { requests: paths.map((path) => ({ method, path })) }),
  headers: body === undefined ? {} : { 'content-type': 'application/json' },
  ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  timeout: 30,
};
if (warmupSeconds > 0) await autocannon({ ...request, duration: warmupSeconds });
const result = await autocannon({ ...request, duration: durationSeconds });
process.stdout.write(
  `${JSON.stringify({
    requestsPerSecond: result['2xx'] / result.duration,
    latencyP50Ms: result.latency.p50,
    latencyP99Ms: result.latency.p99,
    ok: result['2xx'],
    non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    durationSeconds: result.duration,
  })}\n`,
);
