/**
 * Load generator (a child process of a benchmark): autocannon against one URL (or one
 * server and a list of paths, each connection going through them in turn) for a fixed
 * time after a short warm-up.
 *
 * Input: one JSON argument { url, method, body, paths, connections, durationSeconds, warmupSeconds,
 * serverPid }. Output: one JSON line { requestsPerSecond, latencyP50Ms, latencyP99Ms, ok, non2xx,
 * errors, timeouts }, and with `serverPid` the server's time on a core during the measured
 * run, µs per 2xx answer: `serverCpuUsPerAnswer` (all its threads) and `serverMainCpuUsPerAnswer`.
 */
import autocannon from 'autocannon';
import { perJob, threadTimes } from '../lib/thread-cpu.mjs';

const input = JSON.parse(process.argv[2] ?? '{}');
const {
  url,
  method = 'POST',
  body,
  paths,
  connections = 100,
  durationSeconds = 10,
  warmupSeconds = 1,
  serverPid = null,
} = input;
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
const before = serverPid === null ? null : threadTimes(serverPid);
const result = await autocannon({ ...request, duration: durationSeconds });
const after = serverPid === null ? null : threadTimes(serverPid);

/** The server's µs on a core per 2xx answer between the readings, of all its threads and of its main thread. */
function serverCpu() {
  // No thread counts as a worker (nice at least Infinity): every thread but the main one is `rest`.
  const { mainUs, restUs } = perJob(serverPid, Number.POSITIVE_INFINITY, before, after, Math.max(1, result['2xx']));
  return { serverCpuUsPerAnswer: mainUs + restUs, serverMainCpuUsPerAnswer: mainUs };
}
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
    ...(serverPid === null ? {} : serverCpu()),
  })}\n`,
);
