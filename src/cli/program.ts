import { Command, Option } from 'commander';
import {
  DEFAULT_URL,
  isFinished,
  type Job,
  KilnClient,
  type KilnError,
  type JobRequest,
  type JobStatus,
  type JobSummary,
  type LimitsOverride,
} from '../client/index.js';
import {
  batchLine,
  batchProgress,
  formatBatch,
  formatGroup,
  formatJob,
  formatQueue,
  formatSchedule,
  formatTask,
  jobLine,
  jobTable,
  groupTable,
  scheduleTable,
  taskTable,
} from './output.js';
import {
  integer,
  limitValue,
  parseJson,
  rateValue,
  scheduleRequest,
  type ScheduleOptions,
  submitFields,
  type SubmitOptions,
  UsageError,
} from './options.js';
import { ProgressBar } from './progress-bar.js';

/**
 * The `kiln` command line: every operation of the HTTP API through the typed client,
 * human output by default and JSON with --json.
 *
 * Exit codes: 0 done (for commands that wait, the job completed); 1 the job failed or
 * was cancelled; 2 the command line is wrong; 3 an HTTP error or the server cannot be
 * reached; 4 the token may not do this (403 forbidden). The problem's detail is
 * printed on stderr.
 */

export const EXIT = { ok: 0, jobFailed: 1, usage: 2, http: 3, refused: 4 } as const;

/** The exit code of a failed request: a refusal of the token's scope is told apart from other failures. */
export function exitCodeOf(error: KilnError): number {
  return error.status === 403 && error.code === 'forbidden' ? EXIT.refused : EXIT.http;
}

export interface CliIo {
  stdout: NodeJS.WriteStream;
  stderr: NodeJS.WriteStream;
  readStdin(): Promise<string>;
}

interface GlobalOptions {
  url?: string;
  token?: string;
  json?: boolean;
}

/** How long `kiln batch --wait` holds one long poll before it reads the batch again. */
const BATCH_WAIT_SECONDS = 5;

/** An unfinished job of the batch, running ones first, then queued, then the rest; null when none is. */
async function nextToEnd(client: KilnClient, batch: string): Promise<string | null> {
  const rounds: JobStatus[][] = [['running'], ['queued'], ['retrying', 'waiting', 'scheduled']];
  for (const status of rounds) {
    const page = await client.listPage({ batch, status, pageSize: 1 });
    const job = page.jobs[0];
    if (job !== undefined) return job.id;
  }
  return null;
}

export function buildProgram(io: CliIo, setExitCode: (code: number) => void): Command {
  const program = new Command('kiln')
    .description('Kiln, a job queue for CPU-bound work: the server and a client of its HTTP API.')
    .addOption(new Option('--url <url>', `where Kiln serves (default ${DEFAULT_URL})`).env('KILN_URL'))
    .addOption(new Option('--token <token>', 'bearer token').env('KILN_TOKEN'))
    .option('--json', 'print JSON for scripts instead of text for people')
    .showHelpAfterError('(kiln --help lists the commands)')
    .exitOverride()
    .configureOutput({
      writeOut: (text) => io.stdout.write(text),
      writeErr: (text) => io.stderr.write(text),
    })
    .addHelpText(
      'after',
      `
Exit codes:
  0  done (for submit --wait, wait and watch: the job completed; for batch --wait: all completed)
  1  the job (for batch --wait: a job of the batch) failed or was cancelled
  2  the command line is wrong
  3  an HTTP error (its problem detail is printed) or the server cannot be reached
  4  the token may not do this: it lacks the scope (the detail names it)`,
    );

  const globals = (command: Command): GlobalOptions => command.optsWithGlobals<GlobalOptions>();
  const clientOf = (command: Command) => {
    const options = globals(command);
    return new KilnClient({
      url: options.url ?? DEFAULT_URL,
      ...(options.token === undefined || options.token === '' ? {} : { token: options.token }),
    });
  };
  const print = (command: Command, value: unknown, human: string) => {
    io.stdout.write(globals(command).json === true ? `${JSON.stringify(value, null, 2)}\n` : human);
  };
  /** Shows a job that has ended (or is as far as it got) and sets the exit code by its status. */
  const finish = (command: Command, job: Job) => {
    print(command, job, formatJob(job));
    setExitCode(job.status === 'completed' ? EXIT.ok : isFinished(job) ? EXIT.jobFailed : EXIT.http);
  };

  /** Until the job is finished: a bar on a terminal, a line per change otherwise; JSON waits quietly. */
  const waitFor = async (command: Command, id: string): Promise<void> => {
    const client = clientOf(command);
    if (globals(command).json === true) {
      finish(command, await client.wait(id));
      return;
    }
    const bar = io.stdout.isTTY ? new ProgressBar(io.stdout) : null;
    let last: Job | null = null;
    try {
      for await (const job of client.events(id)) {
        last = job;
        if (bar !== null) bar.draw(job);
        else io.stdout.write(`${jobLine(job)}\n`);
      }
    } finally {
      bar?.end();
    }
    // A stream that ended early (a draining server closes them) is followed up by long polls.
    finish(command, last !== null && isFinished(last) ? last : await client.wait(id));
  };

  program
    .command('serve')
    .description('run the Kiln server (as npm start does), configured by the environment (KILN_*, PORT, HOST)')
    .action(async () => {
      // The server's entry point starts serving when loaded, and is loaded only here,
      // so that the other commands never load the server's modules.
      await import('../main.js');
    });

  program
    .command('submit')
    .description('submit a job; PAYLOAD is JSON, or - to read it from stdin')
    .argument('<type>', 'a registered task name')
    .argument('[payload]', 'the payload as JSON, or - for stdin')
    .option('-p, --priority <n>', 'priority 0–9, higher runs first', integer(0, 9))
    .option('-w, --wait', 'wait until the job is finished; the exit code tells how it ended')
    .option('--group <name>', 'who the job is for (fair share between groups)')
    .option('--delay <ms>', 'run no sooner than this many milliseconds from now', integer(0))
    .option('--run-at <time>', 'run no sooner than this RFC 3339 time')
    .option('--idempotency-key <key>', 'a replay with the same key answers the first job')
    .option('--max-attempts <n>', 'attempts before the job fails', integer(1, 100))
    .option('--timeout <ms>', 'time limit of each attempt in milliseconds', integer(1))
    .option('--depends-on <ids>', 'comma-separated job ids that must complete first')
    .option('--metadata <json>', 'your own labels, a JSON object')
    .option('--dedupe [key]', 'share the work of an unfinished job with the same payload (or key)')
    .option('--reuse <ms>', 'with --dedupe: answer a result completed this recently', integer(0))
    .option('--callback <url>', 'POST the job to this URL when it is finished')
    .action(async (type: string, payloadArgument: string | undefined, options: SubmitOptions, command: Command) => {
      const request: JobRequest = { type, ...(await submitFields(options)) };
      if (payloadArgument !== undefined) {
        request.payload = parseJson(payloadArgument === '-' ? await io.readStdin() : payloadArgument, 'PAYLOAD');
      }
      const job = await clientOf(command).submit(request);
      if (options.wait === true) {
        if (globals(command).json !== true) io.stderr.write(`${job.id}\n`);
        await waitFor(command, job.id);
        return;
      }
      print(command, job, `${job.id}  ${job.type}  ${job.status}\n`);
    });

  program
    .command('batch')
    .description(
      'show a batch: its jobs counted by status; --wait until all are finished (a progress bar on a terminal)',
    )
    .argument('<id>')
    .option('-w, --wait', 'wait until every job of the batch is finished; exit 1 if one failed or was cancelled')
    .action(async (id: string, options: { wait?: boolean }, command: Command) => {
      const client = clientOf(command);
      let batch = await client.batch(id);
      if (options.wait === true) {
        const json = globals(command).json === true;
        const bar = !json && io.stdout.isTTY ? new ProgressBar(io.stdout) : null;
        let shown = '';
        try {
          for (;;) {
            const line = batchLine(batch);
            if (line !== shown && !json) {
              if (bar !== null) bar.drawLine(batchProgress(batch).percent, line);
              else io.stdout.write(`${new Date().toISOString()}  ${batch.id}  ${line}\n`);
              shown = line;
            }
            if (batch.finishedAt !== null) break;
            // Long-polls the unfinished job likeliest to end next; the batch is read again when
            // it ends, or after a few seconds, so the others' ends show meanwhile.
            const next = await nextToEnd(client, id);
            if (next !== null) await client.get(next, { wait: BATCH_WAIT_SECONDS });
            batch = await client.batch(id);
          }
        } finally {
          bar?.end();
        }
        const { counts } = batch;
        setExitCode(counts.failed + counts.cancelled > 0 ? EXIT.jobFailed : EXIT.ok);
      }
      print(command, batch, formatBatch(batch));
    });

  program
    .command('get')
    .description('show a job: status, progress, result or error')
    .argument('<id>')
    .action(async (id: string, _options: unknown, command: Command) => {
      const job = await clientOf(command).get(id);
      print(command, job, formatJob(job));
    });

  program
    .command('wait')
    .description('wait until a job is finished (a progress bar on a terminal); the exit code tells how it ended')
    .argument('<id>')
    .action(async (id: string, _options: unknown, command: Command) => waitFor(command, id));

  program
    .command('watch')
    .description("follow a job's events until it is finished: a line (or with --json a JSON object) per change")
    .argument('<id>')
    .action(async (id: string, _options: unknown, command: Command) => {
      const json = globals(command).json === true;
      let last: Job | null = null;
      for await (const job of clientOf(command).events(id)) {
        last = job;
        io.stdout.write(json ? `${JSON.stringify(job)}\n` : `${jobLine(job)}\n`);
      }
      if (last === null || !isFinished(last)) {
        io.stderr.write('kiln: the event stream ended before the job finished\n');
        setExitCode(EXIT.http);
        return;
      }
      setExitCode(last.status === 'completed' ? EXIT.ok : EXIT.jobFailed);
    });

  program
    .command('list')
    .description('list jobs, newest first')
    .option('--status <statuses>', 'comma-separated statuses')
    .option('--type <type>', 'only jobs of this task')
    .option('--group <group>', 'only jobs of this group')
    .option('--schedule <name>', 'only jobs made by this schedule')
    .option('--batch <id>', 'only jobs created in this batch')
    .option('-n, --limit <n>', 'show at most this many jobs', integer(1), 50)
    .action(async (options: ListOptions, command: Command) => {
      const jobs: JobSummary[] = [];
      // Fields left undefined are left out of the query.
      const filter = {
        status: options.status?.split(',') as JobStatus[] | undefined,
        type: options.type,
        group: options.group,
        schedule: options.schedule,
        batch: options.batch,
        pageSize: Math.min(500, options.limit),
      };
      for await (const job of clientOf(command).list(filter)) {
        jobs.push(job);
        if (jobs.length >= options.limit) break;
      }
      print(command, jobs, jobs.length === 0 ? 'no jobs\n' : jobTable(jobs));
    });

  const jobActions = [
    ['cancel', 'cancel a job that is not finished', (client: KilnClient, id: string) => client.cancel(id)],
    [
      'retry',
      'give a failed or cancelled job a fresh attempt budget',
      (client: KilnClient, id: string) => client.retry(id),
    ],
  ] as const;
  for (const [verb, description, act] of jobActions) {
    program
      .command(verb)
      .description(description)
      .argument('<id>')
      .action(async (id: string, _options: unknown, command: Command) => {
        const job = await act(clientOf(command), id);
        print(command, job, `${job.id}  ${job.status}\n`);
      });
  }

  program
    .command('rm')
    .description("remove a finished job's record")
    .argument('<id>')
    .action(async (id: string, _options: unknown, command: Command) => {
      await clientOf(command).remove(id);
      print(command, { id, removed: true }, `${id}  removed\n`);
    });

  const queueActions = [
    ['queue', 'queue depth, capacity and threads', (client: KilnClient) => client.queue()],
    [
      'pause',
      'stop dispatching (running attempts finish; submissions are still taken)',
      (client: KilnClient) => client.pause(),
    ],
    ['resume', 'restart dispatching', (client: KilnClient) => client.resume()],
  ] as const;
  for (const [verb, description, act] of queueActions) {
    program
      .command(verb)
      .description(description)
      .action(async (_options: unknown, command: Command) => {
        const queue = await act(clientOf(command));
        print(command, queue, formatQueue(queue));
      });
  }

  const tasks = program.command('tasks').description('the registered tasks and their limits');
  tasks
    .command('list', { isDefault: true })
    .description('list the tasks with the limits in force')
    .action(async (_options: unknown, command: Command) => {
      const list = await clientOf(command).tasks();
      print(command, list, taskTable(list));
    });
  tasks
    .command('limits')
    .description("override a task's limits at run time, or --reset to the module's own")
    .argument('<name>')
    .option('--concurrency <n|none>', 'attempts running at once at most; none removes the limit', limitValue)
    .option('--rate <max/perMs|none>', 'attempts started per window, e.g. 10/1000; none removes it', rateValue)
    .option('--reset', "drop the override: back to the module's limits")
    .action(async (name: string, options: LimitOptions, command: Command) => {
      const client = clientOf(command);
      const given = options.concurrency !== undefined || options.rate !== undefined;
      if (options.reset === true && given) throw new UsageError('give --reset or new limits, not both');
      if (options.reset !== true && !given) throw new UsageError('give --concurrency, --rate or --reset');
      const limits: LimitsOverride = {
        ...(options.concurrency === undefined
          ? {}
          : { concurrency: options.concurrency === 'none' ? null : options.concurrency }),
        ...(options.rate === undefined ? {} : { rateLimit: options.rate === 'none' ? null : options.rate }),
      };
      const task =
        options.reset === true ? await client.clearTaskLimits(name) : await client.setTaskLimits(name, limits);
      print(command, task, formatTask(task));
    });

  const groups = program.command('groups').description('the groups with jobs or limits, and their limits');
  groups
    .command('list', { isDefault: true })
    .description('list the groups with queued or running jobs or limits')
    .action(async (_options: unknown, command: Command) => {
      const list = await clientOf(command).groups();
      print(command, list, list.length === 0 ? 'no groups\n' : groupTable(list));
    });
  groups
    .command('limits')
    .description("set a group's limits, or --reset to remove them")
    .argument('<group>')
    .option('--concurrency <n|none>', 'attempts running at once at most; none: no such limit', limitValue)
    .option('--rate <max/perMs|none>', 'attempts started per window, e.g. 10/1000; none: no such limit', rateValue)
    .option('--reset', "remove the group's limits")
    .action(async (name: string, options: LimitOptions, command: Command) => {
      const client = clientOf(command);
      const given = options.concurrency !== undefined || options.rate !== undefined;
      if (options.reset === true && given) throw new UsageError('give --reset or new limits, not both');
      if (options.reset !== true && !given) throw new UsageError('give --concurrency, --rate or --reset');
      if (options.reset === true) {
        await client.clearGroupLimits(name);
        const group = (await client.groups()).find((entry) => entry.name === name) ?? {
          name,
          limits: null,
          running: 0,
          queued: 0,
        };
        print(command, group, formatGroup(group));
        return;
      }
      const limits: LimitsOverride = {
        ...(options.concurrency === undefined
          ? {}
          : { concurrency: options.concurrency === 'none' ? null : options.concurrency }),
        ...(options.rate === undefined ? {} : { rateLimit: options.rate === 'none' ? null : options.rate }),
      };
      const group = await client.setGroupLimits(name, limits);
      print(command, group, formatGroup(group));
    });

  const schedules = program.command('schedules').description('jobs made on a cron timetable');
  schedules
    .command('list', { isDefault: true })
    .description('list the schedules')
    .action(async (_options: unknown, command: Command) => {
      const list = await clientOf(command).schedules();
      print(command, list, list.length === 0 ? 'no schedules\n' : scheduleTable(list));
    });
  schedules
    .command('get')
    .description('show a schedule')
    .argument('<name>')
    .action(async (name: string, _options: unknown, command: Command) => {
      const schedule = await clientOf(command).schedule(name);
      print(command, schedule, formatSchedule(schedule));
    });
  schedules
    .command('put')
    .description(
      'create or replace a schedule: BODY is the JSON of PUT /v1/schedules/{name} (- for stdin), or use the options',
    )
    .argument('<name>')
    .argument('[body]', 'the schedule as JSON, or - for stdin')
    .option('--cron <expression>', 'five fields, or six with leading seconds')
    .option('--timezone <zone>', 'an IANA time zone (default UTC)')
    .option('--type <type>', 'the task of the jobs it makes')
    .option('--payload <json>', 'their payload')
    .option('--overlap <mode>', 'allow, or skip while its last job is unfinished')
    .option('--catch-up <mode>', 'none, or last: one job for the latest tick missed while no server ran')
    .option('--paused', 'create it paused')
    .action(async (name: string, bodyArgument: string | undefined, options: ScheduleOptions, command: Command) => {
      const body = scheduleRequest(
        bodyArgument === undefined ? {} : parseJson(bodyArgument === '-' ? await io.readStdin() : bodyArgument, 'BODY'),
        options,
      );
      const { schedule, created } = await clientOf(command).putSchedule(name, body);
      print(command, schedule, `${schedule.name}  ${created ? 'created' : 'replaced'}\n${formatSchedule(schedule)}`);
    });
  schedules
    .command('rm')
    .description('remove a schedule')
    .argument('<name>')
    .action(async (name: string, _options: unknown, command: Command) => {
      await clientOf(command).removeSchedule(name);
      print(command, { name, removed: true }, `${name}  removed\n`);
    });
  for (const [verb, description] of [
    ['pause', 'stop making jobs'],
    ['resume', 'make jobs again'],
  ] as const) {
    schedules
      .command(verb)
      .description(description)
      .argument('<name>')
      .action(async (name: string, _options: unknown, command: Command) => {
        const client = clientOf(command);
        const schedule = verb === 'pause' ? await client.pauseSchedule(name) : await client.resumeSchedule(name);
        print(command, schedule, formatSchedule(schedule));
      });
  }
  schedules
    .command('trigger')
    .description('make one job now, whatever the timetable says')
    .argument('<name>')
    .action(async (name: string, _options: unknown, command: Command) => {
      const job = await clientOf(command).triggerSchedule(name);
      print(command, job, `${job.id}  ${job.type}  ${job.status}\n`);
    });

  return program;
}

// ── options ────────────────────────────────────────────────────────────────

interface ListOptions {
  status?: string;
  type?: string;
  group?: string;
  schedule?: string;
  batch?: string;
  limit: number;
}

interface LimitOptions {
  concurrency?: number | 'none';
  rate?: { max: number; perMs: number } | 'none';
  reset?: boolean;
}
