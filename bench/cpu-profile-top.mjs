/**
 * Summarizes a `node --cpu-prof` profile (e.g. one a benchmark wrote with --cpu-prof to
 * bench/results/profiles/): the functions with the most self time, and the share of
 * time the thread was idle (waiting on I/O or timers). Node names a profile
 * CPU.<date>.<time>.<pid>.<thread id>.<n>.cpuprofile; thread id 0 is the main thread.
 *
 *   node bench/cpu-profile-top.mjs <file.cpuprofile> [--top N]
 */
import { basename } from 'node:path';
import { parseArgs } from 'node:util';
import { readProfile, selfTimes } from './lib/cpu-profile.mjs';

const { values, positionals } = parseArgs({
  options: { top: { type: 'string', default: '25' } },
  allowPositionals: true,
  strict: true,
});
if (positionals.length !== 1) {
  console.error('usage: node bench/cpu-profile-top.mjs <file.cpuprofile> [--top N]');
  process.exit(2);
}
const threadId = /^CPU\.\d+\.\d+\.\d+\.(\d+)\./.exec(basename(positionals[0]))?.[1];
const thread = threadId === undefined ? 'thread' : threadId === '0' ? 'main thread' : `worker thread ${threadId}`;
const { functions, totalUs, idleUs, busyUs } = selfTimes(readProfile(positionals[0]));
console.log(
  `profile: ${(totalUs / 1e6).toFixed(2)} s sampled, ${thread} busy ${(busyUs / 1e6).toFixed(2)} s (${((busyUs / totalUs) * 100).toFixed(1)} %), idle ${((idleUs / totalUs) * 100).toFixed(1)} %`,
);
console.log('self ms   % busy  function  (file:line)');
for (const f of functions.slice(0, Number(values.top))) {
  console.log(
    `${(f.selfUs / 1000).toFixed(1).padStart(8)}  ${((f.selfUs / busyUs) * 100).toFixed(1).padStart(5)} %  ${f.name}${f.location === '' ? '' : `  (${f.location})`}`,
  );
}
