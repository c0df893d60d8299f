import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { collect } from '../support/cli.js';
import { closedPortUrl } from '../support/http.js';
import { killAllKilns, type KilnProcess, spawnKiln } from '../support/kiln-process.js';
import { repoRoot } from '../support/paths.js';

/**
 * The README's two-minute tour, pasted as it is: every shell block runs in bash (curl
 * and jq, as a reader has them) against a real server on a real SQLite file, in order,
 * the shell variables of one block kept for the next, the server killed by the tour's
 * own `kill -9` and started again where the tour says so. What each block prints must be
 * what the README shows after it, once the values no run repeats are masked: ids, times,
 * the salt and hash of a password, a cursor, and the live details a run may catch at
 * another moment (a job still queued where the README caught it running, its attempt
 * counts, the progress events a stream opened a moment later no longer sees, a thread
 * still stopping after a cancel, the few microseconds a spin overran).
 */
const README = readFileSync(join(repoRoot, 'README.md'), 'utf8');
const README_URL = 'http://127.0.0.1:3000';

interface Step {
  script: string;
  expected: string;
  /** The README's text between the block before and this step's own. */
  prose: string;
}

/** The tour's shell blocks, each with the output block that follows it and the text before it. */
function tourSteps(): Step[] {
  const start = README.indexOf('## A two-minute tour');
  const end = README.indexOf('\n## ', start + 1);
  assert.ok(start >= 0 && end > start, 'the README has its tour');
  const tour = README.slice(start, end);
  let last = 0;
  const blocks = [...tour.matchAll(/```(\w*)\n([\s\S]*?)```/g)].map((m) => {
    const prose = tour.slice(last, m.index);
    last = m.index + m[0].length;
    return { lang: m[1] ?? '', body: m[2] ?? '', prose };
  });
  const steps: Step[] = [];
  for (let i = 0; i < blocks.length; i++) {
    const block = blocks[i] as { lang: string; body: string; prose: string };
    if (block.lang !== 'sh') continue;
    const next = blocks[i + 1];
    assert.ok(next !== undefined && next.lang !== 'sh', `the block after the README's step ${steps.length + 1}`);
    steps.push({ script: block.body, expected: next.body, prose: block.prose });
  }
  return steps;
}

/**
 * The variables the README says to start the server again with ("Start it again with
 * `KILN_API_TOKENS_FILE=tokens.json npm start`"), files named relative to the tour's directory.
 */
function restartEnv(prose: string, dir: string): Record<string, string> {
  const line = /Start it again(?: with `((?:[A-Z_]+=\S+ )*)npm start`| \(`npm start`\))/.exec(prose);
  assert.ok(line !== null, `the README says how to start the server again:\n${prose}`);
  const env: Record<string, string> = {};
  for (const pair of (line[1] ?? '').trim().split(' ').filter(Boolean)) {
    const [name = '', value = ''] = pair.split('=', 2);
    env[name] = name.endsWith('_FILE') ? join(dir, value) : value;
  }
  return env;
}

/** What no two runs print alike, masked; the rest must be the same to the letter. */
function masked(text: string): string {
  return (
    text
      // HTTP headers as curl -i prints them: a terminal shows no carriage returns.
      .replaceAll('\r\n', '\n')
      .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, '<id>')
      .replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/g, '<time>')
      .replace(/^Date: .*$/gm, 'Date: <date>')
      // A password's hash and its random salt; a list cursor (the base64 of an id).
      .replace(/"[0-9a-f]{64}"/g, '"<hex>"')
      .replace(/"[A-Za-z0-9+/]{22}=="/g, '"<salt>"')
      .replace(/"[A-Za-z0-9+/]{48}"/g, '"<cursor>"')
      // Where a job stood when a command happened to look, and how many attempts it had made.
      .replace(/"status":"(queued|running|retrying)"/g, '"status":"<live>"')
      .replace(/"(attempts|attempt)":\d+/g, '"$1":<n>')
      .replace(/"progress":(null|\{"percent":\d+,"message":null\})/g, '"progress":<progress>')
      // A spin ends at the first look at the clock past its end: later on a busy machine.
      .replace(/"spunMs":[\d.]+/g, '"spunMs":<ms>')
      // A thread whose attempt was just cancelled is busy until it has stopped, and is
      // counted again once its replacement has started.
      .replace(/"busy":\d+/g, '"busy":<n>')
      .replace(/"threads":\{"size":\d+/g, '"threads":{"size":<n>')
      .replace(/^kiln_pool_busy_threads \d+$/gm, 'kiln_pool_busy_threads <n>')
  );
}

/** Runs one block in bash with the variables the earlier blocks left; answers its stdout. */
function runBlock(script: string, dir: string): Promise<{ stdout: string; stderr: string; code: number | null }> {
  const wrapped = [
    'source ./tour-vars.sh 2>/dev/null',
    script,
    'status=$?',
    'declare -p B FIRST ID A S 2>/dev/null > ./tour-vars.sh',
    'exit $status',
  ].join('\n');
  return collect(spawn('bash', ['--noprofile', '--norc', '-c', wrapped], { cwd: dir, stdio: 'pipe' }));
}

describe('the README tour, pasted as it is', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kiln-tour-'));
  after(async () => {
    await killAllKilns();
    rmSync(dir, { recursive: true, force: true });
  });

  it('prints what the README shows, step by step, across the kill and the restart', { timeout: 240_000 }, async (t) => {
    const url = await closedPortUrl();
    const env = {
      PORT: new URL(url).port,
      KILN_STORE: `sqlite:${join(dir, 'kiln.db')}`,
    };
    let server: KilnProcess = await spawnKiln(env);
    const steps = tourSteps();
    assert.ok(steps.length >= 10, `the tour has its steps (${steps.length})`);
    for (const [n, step] of steps.entries()) {
      const script = step.script.replaceAll(README_URL, url);
      const run = await runBlock(script, dir);
      assert.equal(run.code, 0, `step ${n + 1} exits 0: ${run.stderr}`);
      const expected = masked(step.expected).trimEnd();
      const actual = masked(run.stdout).trimEnd();
      if (script.includes('/events')) {
        // A stream shows the job from the moment it opens: each line one the README shows,
        // ending as the README's ends.
        const lines = new Set(expected.split('\n'));
        for (const line of actual.split('\n')) assert.ok(lines.has(line), `step ${n + 1}: ${line}\nin\n${actual}`);
        assert.equal(actual.split('\n').at(-1), expected.split('\n').at(-1), `step ${n + 1} ends as the README's`);
      } else {
        assert.equal(actual, expected, `step ${n + 1}:\n${script}`);
      }
      if (/^kill /m.test(script)) {
        // "Start it again": the same file on the same port, with what the README adds.
        const exit = await server.exited;
        if (script.includes('kill -9')) assert.equal(exit.signal, 'SIGKILL');
        else assert.deepEqual(exit, { code: 0, signal: null }, 'a kill drains and exits 0');
        const following = steps[n + 1];
        assert.ok(following !== undefined, `a step follows the kill of step ${n + 1}`);
        server = await spawnKiln({ ...env, ...restartEnv(following.prose, dir) });
      }
    }
    t.diagnostic(`${steps.length} steps replayed`);
  });
});
