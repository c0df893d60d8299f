import type { Batch, Group, Job, JobSummary, Queue, Schedule, Task } from '../client/index.js';

/** How the CLI shows the API's objects to people: aligned tables and `field  value` blocks. */

export function table(header: string[], rows: string[][]): string {
  const widths = header.map((title, column) =>
    Math.max(title.length, ...rows.map((row) => (row[column] ?? '').length)),
  );
  const line = (cells: string[]) =>
    cells
      .map((cell, column) => (column === cells.length - 1 ? cell : cell.padEnd(widths[column] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n') + '\n';
}

function block(fields: Array<[string, string | null]>): string {
  const shown = fields.filter((field): field is [string, string] => field[1] !== null);
  const width = Math.max(...shown.map(([name]) => name.length));
  return (
    shown
      .map(([name, value]) => `${name.padEnd(width)}  ${value.replace(/\n/g, `\n${' '.repeat(width + 2)}`)}`)
      .join('\n') + '\n'
  );
}

export function progressText(job: Pick<Job, 'progress'>): string | null {
  if (job.progress === null) return null;
  const percent = `${Math.round(job.progress.percent)}%`;
  return job.progress.message === null ? percent : `${percent} ${job.progress.message}`;
}

export function formatJob(job: Job | JobSummary): string {
  const result = 'result' in job && job.result !== null ? JSON.stringify(job.result, null, 2) : null;
  return block([
    ['id', job.id],
    ['type', job.type],
    ['status', job.status],
    ['priority', String(job.priority)],
    ['group', job.group],
    ['schedule', job.schedule],
    ['callback', job.callback === null ? null : job.callback.url],
    ['attempts', `${job.attempts} of ${job.maxAttempts}`],
    ['snoozes', job.snoozes === 0 ? null : String(job.snoozes)],
    ['progress', progressText(job)],
    ['depends on', job.dependsOn.length === 0 ? null : job.dependsOn.join(', ')],
    ['run at', job.runAt],
    ['created', job.createdAt],
    ['started', job.startedAt],
    ['finished', job.finishedAt],
    ['error', job.error === null ? null : `${job.error.code}: ${job.error.message} (attempt ${job.error.attempt})`],
    ['result', result],
  ]);
}

/** One line per job change, for `watch` and for `wait` when its output is not a terminal. */
export function jobLine(job: Job): string {
  return [new Date().toISOString(), job.id, job.status, progressText(job)].filter((part) => part !== null).join('  ');
}

export function jobTable(jobs: JobSummary[]): string {
  // Groups and schedules get a column only when a listed job has one.
  const withGroups = jobs.some((job) => job.group !== null);
  const withSchedules = jobs.some((job) => job.schedule !== null);
  const header = [
    'ID',
    'TYPE',
    'STATUS',
    'PRI',
    'ATTEMPTS',
    ...(withGroups ? ['GROUP'] : []),
    ...(withSchedules ? ['SCHEDULE'] : []),
    'CREATED',
  ];
  const rows = jobs.map((job) => [
    job.id,
    job.type,
    job.status,
    String(job.priority),
    `${job.attempts}/${job.maxAttempts}`,
    ...(withGroups ? [job.group ?? '-'] : []),
    ...(withSchedules ? [job.schedule ?? '-'] : []),
    job.createdAt,
  ]);
  return table(header, rows);
}

export function formatQueue(queue: Queue): string {
  const counts = (record: Record<string, number>) =>
    Object.entries(record)
      .filter(([, count]) => count > 0)
      .map(([key, count]) => `${key} ${count}`)
      .join(', ') || 'none';
  return block([
    ['paused', queue.paused ? 'yes' : 'no'],
    ['pending', `${queue.pending} of ${queue.capacity}`],
    ['threads', `${queue.threads.busy} of ${queue.threads.size} busy`],
    ['by status', counts(queue.byStatus)],
    ['queued by priority', counts(queue.byPriority)],
  ]);
}

function rateText(rate: { max: number; perMs: number } | null): string {
  return rate === null ? '-' : `${rate.max}/${rate.perMs}ms`;
}

export function taskTable(tasks: Task[]): string {
  const rows = tasks.map((task) => [
    task.name,
    task.limits.concurrency === null ? '-' : String(task.limits.concurrency),
    rateText(task.limits.rateLimit),
    String(task.running),
    task.override === null ? '' : 'override',
    task.description,
  ]);
  return table(['NAME', 'CONCURRENCY', 'RATE', 'RUNNING', 'LIMITS', 'DESCRIPTION'], rows);
}

export function formatTask(task: Task): string {
  return block([
    ['name', task.name],
    ['concurrency', task.limits.concurrency === null ? 'none' : String(task.limits.concurrency)],
    ['rate limit', task.limits.rateLimit === null ? 'none' : rateText(task.limits.rateLimit)],
    ['override', task.override === null ? 'none' : JSON.stringify(task.override)],
    ['running', String(task.running)],
  ]);
}

export function groupTable(groups: Group[]): string {
  const rows = groups.map((group) => [
    group.name,
    group.limits?.concurrency == null ? '-' : String(group.limits.concurrency),
    rateText(group.limits?.rateLimit ?? null),
    String(group.running),
    String(group.queued),
  ]);
  return table(['GROUP', 'CONCURRENCY', 'RATE', 'RUNNING', 'QUEUED'], rows);
}

export function formatGroup(group: Group): string {
  return block([
    ['group', group.name],
    ['concurrency', group.limits?.concurrency == null ? 'none' : String(group.limits.concurrency)],
    ['rate limit', group.limits?.rateLimit == null ? 'none' : rateText(group.limits.rateLimit)],
    ['running', String(group.running)],
    ['queued', String(group.queued)],
  ]);
}

export function scheduleTable(schedules: Schedule[]): string {
  const rows = schedules.map((schedule) => [
    schedule.name,
    schedule.cron,
    schedule.timezone,
    String(schedule.job.type),
    schedule.paused ? 'paused' : (schedule.nextRunAt ?? '-'),
    schedule.lastJobId ?? '-',
  ]);
  return table(['NAME', 'CRON', 'TIMEZONE', 'TYPE', 'NEXT RUN', 'LAST JOB'], rows);
}

export function formatSchedule(schedule: Schedule): string {
  return block([
    ['name', schedule.name],
    ['cron', `${schedule.cron} (${schedule.timezone})`],
    ['job', JSON.stringify(schedule.job)],
    ['overlap', schedule.overlap],
    ['catch up', schedule.catchUp],
    ['paused', schedule.paused ? 'yes' : 'no'],
    ['next run', schedule.nextRunAt],
    ['last run', schedule.lastRunAt],
    ['last job', schedule.lastJobId],
  ]);
}

/** How far a batch is: its finished jobs of those still counted, by status. */
export function batchProgress(batch: Batch): { done: number; counted: number; percent: number } {
  const counts = batch.counts;
  const done = counts.completed + counts.failed + counts.cancelled;
  const counted = Object.values(counts).reduce((sum, n) => sum + n, 0);
  return { done, counted, percent: counted === 0 ? 100 : (done / counted) * 100 };
}

/** A batch in one line: how many of its jobs are finished, and its counts that are not zero. */
export function batchLine(batch: Batch): string {
  const { done, counted } = batchProgress(batch);
  const counts = Object.entries(batch.counts)
    .filter(([, n]) => n > 0)
    .map(([status, n]) => `${status} ${n}`)
    .join(', ');
  return `${done}/${counted} finished${counts === '' ? '' : `  (${counts})`}`;
}

export function formatBatch(batch: Batch): string {
  return block([
    ['id', batch.id],
    ['total', String(batch.total)],
    ['progress', batchLine(batch)],
    ...Object.entries(batch.counts).map(([status, n]): [string, string] => [status, String(n)]),
    ['created', batch.createdAt],
    ['finished', batch.finishedAt],
    ['callback', batch.callback === null ? null : batch.callback.url],
  ]);
}
