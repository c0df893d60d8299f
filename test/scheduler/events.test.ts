import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Job } from '../../src/contract/job.js';
import { JobEvents } from '../../src/scheduler/events.js';

function job(id: string, status: Job['status'], attempts = 0, progress: Job['progress'] = null): Job {
  return {
    id,
    type: 't',
    status,
    priority: 5,
    payload: null,
    result: null,
    error: null,
    progress,
    attempts,
    maxAttempts: 3,
    snoozes: 0,
    interruptions: 0,
    timeoutMs: 1000,
    backoff: { initialMs: 100, factor: 2, maxMs: 1000, jitter: 'none' },
    idempotencyKey: null,
    dependsOn: [],
    metadata: {},
    runAt: null,
    createdAt: 0,
    startedAt: null,
    finishedAt: null,
    readyAt: null,
    group: null,
    schedule: null,
    callback: null,
    batch: null,
    trace: null,
  };
}

/** A read of the watched jobs from a table the test holds, counting the ids asked for. */
function table(rows: Map<string, Job>) {
  const asked: string[][] = [];
  return {
    asked,
    read: (ids: string[]) => {
      asked.push([...ids]);
      return Promise.resolve(ids.flatMap((id) => (rows.has(id) ? [rows.get(id) as Job] : [])));
    },
  };
}

describe('JobEvents.sweep: watched jobs read again, for news that never came', () => {
  it('reads every watched job in one call and tells each watcher of a change it did not hear of, once', async () => {
    const events = new JobEvents();
    const heard: [string, string | null][] = [];
    events.subscribe('a', (j) => heard.push(['a', j?.status ?? null]));
    events.subscribe('b', (j) => heard.push(['b', j?.status ?? null]));
    events.publish('a', () => job('a', 'queued'));
    events.publish('b', () => job('b', 'queued'));
    heard.length = 0;
    const rows = new Map([
      ['a', job('a', 'running', 1)],
      ['b', job('b', 'queued')],
    ]);
    const { asked, read } = table(rows);
    await events.sweep(read);
    assert.deepEqual(asked, [['a', 'b']]);
    assert.deepEqual(heard, [['a', 'running']]);
    await events.sweep(read);
    assert.deepEqual(heard, [['a', 'running']], 'what was told is not told again');
    rows.set('a', job('a', 'retrying', 1));
    rows.set('b', job('b', 'queued', 0));
    await events.sweep(read);
    assert.deepEqual(heard, [
      ['a', 'running'],
      ['a', 'retrying'],
    ]);
  });

  it('tells a new attempt of the same status, but not an older progress of the attempt it heard of', async () => {
    const events = new JobEvents();
    const heard: Job[] = [];
    events.subscribe('a', (j) => heard.push(j as Job));
    events.publish('a', () => job('a', 'running', 1, { percent: 50, message: null }));
    heard.length = 0;
    const rows = new Map([['a', job('a', 'running', 1, { percent: 10, message: null })]]);
    await events.sweep(table(rows).read);
    assert.equal(heard.length, 0, 'the stored progress is older than the news');
    rows.set('a', job('a', 'running', 2));
    await events.sweep(table(rows).read);
    assert.deepEqual(
      heard.map((j) => [j.status, j.attempts]),
      [['running', 2]],
    );
  });

  it('drops what it read of a job whose news came while it read (the read may be older)', async () => {
    const events = new JobEvents();
    const heard: string[] = [];
    events.subscribe('a', (j) => heard.push(j?.status ?? 'gone'));
    let answer!: (jobs: Job[]) => void;
    const sweep = events.sweep(
      () =>
        new Promise<Job[]>((resolve) => {
          answer = resolve;
        }),
    );
    events.publish('a', () => job('a', 'completed', 1));
    answer([job('a', 'running', 1)]);
    await sweep;
    assert.deepEqual(heard, ['completed']);
  });

  it('drops what it read before a watcher showed a read of its own (note), and a watch made anew meanwhile', async () => {
    const events = new JobEvents();
    const heard: string[] = [];
    const stop = events.subscribe('a', (j) => heard.push(`first:${j?.status ?? 'gone'}`));
    events.subscribe('b', (j) => heard.push(`b:${j?.status ?? 'gone'}`));
    let answer!: (jobs: Job[]) => void;
    const sweep = events.sweep(
      () =>
        new Promise<Job[]>((resolve) => {
          answer = resolve;
        }),
    );
    // b's event stream read the job itself (newer than the sweep's read) and showed it.
    events.note(job('b', 'running', 1));
    // a's only watcher left, and a new one came: it never heard what the sweep read.
    stop();
    events.subscribe('a', (j) => heard.push(`second:${j?.status ?? 'gone'}`));
    answer([job('a', 'queued'), job('b', 'queued')]);
    await sweep;
    assert.deepEqual(heard, []);
    // The next sweep tells the new watch what it reads, and b nothing it has shown.
    await events.sweep(
      table(
        new Map([
          ['a', job('a', 'queued')],
          ['b', job('b', 'running', 1)],
        ]),
      ).read,
    );
    assert.deepEqual(heard, ['second:queued']);
  });

  it('tells the watchers of a job that is gone, with null, and stops watching it', async () => {
    const events = new JobEvents();
    const heard: (Job | null)[] = [];
    events.subscribe('a', (j) => heard.push(j));
    events.subscribe('a', (j) => heard.push(j));
    await events.sweep(table(new Map()).read);
    assert.deepEqual(heard, [null, null]);
    assert.equal(events.watching('a'), false);
  });

  it('tells a watcher that heard nothing yet what the read found (it drops what it shows already)', async () => {
    const events = new JobEvents();
    const heard: string[] = [];
    events.subscribe('a', (j) => heard.push(j?.status ?? 'gone'));
    const rows = new Map([['a', job('a', 'queued')]]);
    await events.sweep(table(rows).read);
    await events.sweep(table(rows).read);
    assert.deepEqual(heard, ['queued']);
  });

  it('runs one sweep at a time, reads nothing when nothing is watched, and survives a failed read', async () => {
    const events = new JobEvents();
    const { asked, read } = table(new Map([['a', job('a', 'queued')]]));
    await events.sweep(read);
    assert.deepEqual(asked, [], 'nothing watched: no read');
    events.subscribe('a', () => {});
    let answer!: (jobs: Job[]) => void;
    let reads = 0;
    const slow = (): Promise<Job[]> => {
      reads += 1;
      return new Promise((resolve) => (answer = resolve));
    };
    const first = events.sweep(slow);
    await events.sweep(slow);
    assert.equal(reads, 1, 'a sweep while one runs does nothing');
    answer([]);
    await first;
    events.subscribe('b', () => {});
    await events.sweep(() => Promise.reject(new Error('the database is away')));
    assert.equal(events.watching('b'), true, 'a failed read tells nothing and drops no watcher');
  });
});
