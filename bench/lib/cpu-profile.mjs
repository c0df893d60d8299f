/**
 * Reading `node --cpu-prof` profiles: which file is which thread's, and the self time of
 * each function, optionally only over a window of the run.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { ROOT_DIR } from './processes.mjs';

// Node names each profile CPU.<yyyymmdd>.<hhmmss>.<pid>.<thread id>.<sequence>.cpuprofile;
// the thread id is Node's `threadId`: 0 for the main thread, 1 and up for worker threads.
const PROFILE_NAME = /^CPU\.\d{8}\.\d{6}\.(\d+)\.(\d+)\.(\d+)\.cpuprofile$/;

/** The profiles in `dir`, each { path, pid, threadId, sequence }, in the order Node wrote them. */
export function profileFiles(dir) {
  return readdirSync(dir)
    .map((name) => {
      const match = PROFILE_NAME.exec(name);
      if (match === null) return null;
      const [, pid, threadId, sequence] = match.map(Number);
      return { path: join(dir, name), pid, threadId, sequence };
    })
    .filter((file) => file !== null)
    .sort((a, b) => a.sequence - b.sequence);
}

export function readProfile(path) {
  return JSON.parse(readFileSync(path, 'utf8'));
}

function location(frame) {
  const url = frame.url.replace(/^file:\/\//, '');
  if (url === '') return '';
  const file = url.startsWith(ROOT_DIR) ? relative(ROOT_DIR, url) : url;
  return `${file}:${frame.lineNumber + 1}`;
}

/**
 * Self time per function over the samples taken from `fromUs` to `toUs` (the profile's
 * clock: the monotonic clock in µs, as `process.hrtime.bigint() / 1000n` reads it). A
 * sample stands for the time until the next one. Answers { functions: [{ name, location,
 * selfUs }] most first, totalUs, idleUs, busyUs, fromUs, toUs } where `busy` is every
 * sample but `(idle)`: JavaScript, native code, `(program)` and `(garbage collector)`.
 */
export function selfTimes(profile, { fromUs = Number.NEGATIVE_INFINITY, toUs = Number.POSITIVE_INFINITY } = {}) {
  const frames = new Map(profile.nodes.map((node) => [node.id, node.callFrame]));
  const bySample = new Map();
  const { samples, timeDeltas } = profile;
  let at = profile.startTime;
  for (let i = 0; i < samples.length; i++) {
    at += timeDeltas[i] ?? 0;
    if (at < fromUs || at >= toUs) continue;
    const micros = Math.max(0, timeDeltas[i + 1] ?? 0);
    bySample.set(samples[i], (bySample.get(samples[i]) ?? 0) + micros);
  }
  const byFunction = new Map();
  for (const [id, micros] of bySample) {
    const frame = frames.get(id);
    const name = frame.functionName || '(anonymous)';
    const where = location(frame);
    const key = `${name}\t${where}`;
    const entry = byFunction.get(key) ?? { name, location: where, selfUs: 0 };
    entry.selfUs += micros;
    byFunction.set(key, entry);
  }
  const functions = [...byFunction.values()].sort((a, b) => b.selfUs - a.selfUs);
  const totalUs = functions.reduce((sum, f) => sum + f.selfUs, 0);
  const idleUs = functions.filter((f) => f.name === '(idle)').reduce((sum, f) => sum + f.selfUs, 0);
  return {
    functions: functions.filter((f) => f.name !== '(idle)'),
    totalUs,
    idleUs,
    busyUs: totalUs - idleUs,
    fromUs: Math.max(fromUs, profile.startTime),
    toUs: Math.min(toUs, profile.endTime),
  };
}

/** The main thread's profile of the server with `pid`, told from the worker threads' by its thread id (0). */
export function mainThreadProfile(dir, pid) {
  const files = profileFiles(dir).filter((file) => file.pid === pid);
  const main = files.filter((file) => file.threadId === 0);
  if (main.length !== 1) {
    throw new Error(`expected one main-thread profile of process ${pid} in ${dir}, found ${main.length}`);
  }
  return { path: main[0].path, workerProfiles: files.length - 1 };
}
