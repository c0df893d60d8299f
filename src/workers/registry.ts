import { type Dirent, existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { extname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { z } from 'zod';
import { JITTER_MODES, JOB_DEFAULTS } from '../contract/job.js';
import { TaskLoadError } from './errors.js';
import type { StandardSchemaV1, TaskDefaults, TaskDefinition } from './task.js';

/** A task as the main thread knows it: everything but the handler, which runs in the threads. */
export interface LoadedTask {
  name: string;
  /** '' when the task has none. */
  description: string;
  schema: StandardSchemaV1 | null;
  /** JSON Schema of the payload (input side); `{}` when unknown. */
  payloadJsonSchema: Record<string, unknown>;
  /** The task's own defaults over JOB_DEFAULTS, field by field (backoff as a whole). */
  defaults: TaskDefaults;
  concurrency: number | null;
  rateLimit: { max: number; perMs: number } | null;
  /** Each attempt runs on a fresh thread (TaskDefinition.isolate). */
  isolate: boolean;
  /** file: URL of the module whose default export is the task. */
  moduleUrl: string;
}

export interface TaskRegistry {
  get(name: string): LoadedTask | undefined;
  /** Sorted by name. */
  list(): LoadedTask[];
  /** name → module file URL, for the threads (ThreadData.modules). */
  modules(): Record<string, string>;
}

export interface PayloadIssue {
  path: string;
  message: string;
}

export type PayloadValidation = { ok: true; value: unknown } | { ok: false; issues: PayloadIssue[] };

export interface LoadTasksOptions {
  /** A directory whose `.js`, `.mjs`, `.ts` and `.mts` files (not recursive) are task modules. */
  tasksDir?: string | undefined;
}

/** Loads the built-in tasks, then those of `tasksDir`; throws TaskLoadError on the first bad module. */
export async function loadTasks(options: LoadTasksOptions = {}): Promise<TaskRegistry> {
  const tasks = new Map<string, LoadedTask>();
  const builtinDir = fileURLToPath(new URL('./tasks/', import.meta.url));
  // Run from compiled JavaScript the built-ins are .js; run from source (a TypeScript loader) they are .ts.
  const builtinExtensions = import.meta.url.endsWith('.ts') ? ['.ts'] : ['.js'];
  const files = await listModules(builtinDir, builtinExtensions);
  if (options.tasksDir !== undefined) {
    const dir = resolve(options.tasksDir);
    const own = await listModules(dir, [...TASK_EXTENSIONS, ...Object.keys(REFUSED_EXTENSIONS)]);
    for (const file of own) {
      const refused = REFUSED_EXTENSIONS[extname(file)];
      if (refused !== undefined) throw new TaskLoadError(file, `task module ${file}: ${refused}`);
    }
    files.push(...own);
  }
  for (const file of files) {
    const task = await loadModule(file);
    const existing = tasks.get(task.name);
    if (existing !== undefined) {
      throw new TaskLoadError(
        file,
        `task "${task.name}" in ${file} is already defined by ${fileURLToPath(existing.moduleUrl)}`,
      );
    }
    tasks.set(task.name, task);
  }
  const sorted = [...tasks.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const modules = Object.fromEntries(sorted.map((task) => [task.name, task.moduleUrl]));
  return {
    get: (name) => tasks.get(name),
    list: () => [...sorted],
    modules: () => ({ ...modules }),
  };
}

/** Validates a payload with the task's Standard Schema; without a schema any payload is accepted as is. */
export async function validatePayload(task: LoadedTask, payload: unknown): Promise<PayloadValidation> {
  if (task.schema === null) return { ok: true, value: payload };
  let result: Awaited<ReturnType<StandardSchemaV1['~standard']['validate']>>;
  try {
    result = await task.schema['~standard'].validate(payload);
  } catch (err) {
    return { ok: false, issues: [{ path: '', message: `the schema of task "${task.name}" threw: ${errorText(err)}` }] };
  }
  if (result.issues === undefined) return { ok: true, value: result.value };
  return {
    ok: false,
    issues: result.issues.map((issue) => ({
      path: (issue.path ?? [])
        .map((segment) => String(typeof segment === 'object' && segment !== null ? segment.key : segment))
        .join('.'),
      message: issue.message,
    })),
  };
}

/** What KILN_TASKS_DIR loads: ES modules, in JavaScript or in TypeScript that Node.js strips. */
const TASK_EXTENSIONS = ['.js', '.mjs', '.ts', '.mts'];
const TYPESCRIPT_EXTENSIONS = ['.ts', '.mts'];

/** Files a reader would take for task modules that cannot be loaded as they are: refused, never ignored. */
const REFUSED_EXTENSIONS: Record<string, string> = {
  '.tsx': 'JSX is not TypeScript that Node.js can strip: rename it .ts if it has no JSX, or compile it to .js',
  '.cts': 'a .cts file is CommonJS and task modules are ES modules: rename it .ts or .mts',
};

async function listModules(dir: string, extensions: string[]): Promise<string[]> {
  let entries: Dirent[];
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (err) {
    throw new TaskLoadError(dir, `tasks directory ${dir}: cannot be read (${errorText(err)})`, { cause: err });
  }
  return entries
    .filter((entry) => entry.isFile() || entry.isSymbolicLink())
    .map((entry) => entry.name)
    .filter((name) => !/\.d\.[cm]?ts$/.test(name) && extensions.some((ext) => name.endsWith(ext)))
    .sort()
    .map((name) => join(dir, name));
}

async function loadModule(file: string): Promise<LoadedTask> {
  const moduleUrl = pathToFileURL(file).href;
  if (TYPESCRIPT_EXTENSIONS.includes(extname(file)) && !process.features.typescript) {
    throw new TaskLoadError(file, `task module ${file}: ${CANNOT_STRIP}`);
  }
  let namespace: Record<string, unknown>;
  try {
    namespace = (await import(moduleUrl)) as Record<string, unknown>;
  } catch (err) {
    throw new TaskLoadError(file, `task module ${file}: import failed: ${importFailure(err)}`, { cause: err });
  }
  if (!('default' in namespace) || namespace.default === undefined) {
    throw new TaskLoadError(file, `task module ${file}: has no default export (expected a task definition object)`);
  }
  const definition = namespace.default;
  const parsed = taskShape.safeParse(definition, { reportInput: true });
  if (!parsed.success) {
    throw new TaskLoadError(file, `task module ${file}: ${describeIssue(parsed.error.issues)}`);
  }
  const task = definition as TaskDefinition;
  const own = task.defaults ?? {};
  return {
    name: task.name,
    description: task.description ?? '',
    schema: task.schema ?? null,
    payloadJsonSchema: task.schema === undefined ? {} : toJsonSchema(task.schema),
    defaults: {
      priority: own.priority ?? JOB_DEFAULTS.priority,
      maxAttempts: own.maxAttempts ?? JOB_DEFAULTS.maxAttempts,
      timeoutMs: own.timeoutMs ?? JOB_DEFAULTS.timeoutMs,
      backoff: { ...(own.backoff ?? JOB_DEFAULTS.backoff) },
    },
    concurrency: task.concurrency ?? null,
    rateLimit: task.rateLimit === undefined ? null : { max: task.rateLimit.max, perMs: task.rateLimit.perMs },
    isolate: task.isolate ?? false,
    moduleUrl,
  };
}

const CANNOT_STRIP =
  `Node.js ${process.version} cannot load TypeScript: run Kiln on Node.js 22.18 or later (24 is the LTS), ` +
  'where types are stripped as modules load, or compile the module to .js';

/**
 * Why an import failed, with what to do when the cause is how Node.js loads TypeScript: it only
 * erases types (no enums, namespaces or parameter properties), needs the `.ts` extension in
 * relative imports, and does not strip files under node_modules.
 */
function importFailure(err: unknown): string {
  const text = errorText(err);
  const code = (err as { code?: unknown } | null)?.code;
  if (code === 'ERR_UNKNOWN_FILE_EXTENSION' && /\.m?ts\b/.test(text)) return `${text}; ${CANNOT_STRIP}`;
  if (code === 'ERR_UNSUPPORTED_TYPESCRIPT_SYNTAX') {
    return (
      `${text}; Node.js only strips types, so write erasable TypeScript (a const object instead of an enum, ` +
      'no namespaces, no parameter properties; tsconfig "erasableSyntaxOnly" checks it) or compile the module to .js'
    );
  }
  if (code === 'ERR_UNSUPPORTED_NODE_MODULES_TYPE_STRIPPING') {
    return `${text}; Node.js does not strip types under node_modules: keep the tasks directory outside it, or compile to .js`;
  }
  const url = (err as { url?: unknown }).url;
  if (code === 'ERR_MODULE_NOT_FOUND' && typeof url === 'string' && url.startsWith('file:')) {
    const missing = fileURLToPath(url);
    const found = TYPESCRIPT_EXTENSIONS.map((ext) => missing + ext).find((candidate) => existsSync(candidate));
    if (found !== undefined) {
      return (
        `${text}; a TypeScript file is imported by its own name: write '${extname(found)}' at the end of the import ` +
        `(tsconfig "allowImportingTsExtensions" or "rewriteRelativeImportExtensions" lets tsc accept it)`
      );
    }
  }
  return text;
}

function toJsonSchema(schema: StandardSchemaV1): Record<string, unknown> {
  if (schema['~standard'].vendor !== 'zod') return {};
  try {
    // The vendor is zod, and z.toJSONSchema reads only the schema's own definition.
    return z.toJSONSchema(schema as unknown as z.ZodType, { io: 'input' }) as Record<string, unknown>;
  } catch {
    return {};
  }
}

const int = (min: number, max: number, what: string) =>
  z
    .number({ error: `must be ${what}` })
    .int({ error: `must be ${what}` })
    .min(min, { error: `must be ${what}` })
    .max(max, { error: `must be ${what}` });

const backoffShape = z
  .object({
    initialMs: z.number({ error: 'must be a number >= 0' }).min(0, { error: 'must be a number >= 0' }),
    factor: z.number({ error: 'must be a number >= 1' }).min(1, { error: 'must be a number >= 1' }),
    maxMs: z.number({ error: 'must be a number >= initialMs' }),
    jitter: z.enum(JITTER_MODES, { error: `must be one of ${JITTER_MODES.map((j) => `"${j}"`).join(', ')}` }),
  })
  .strict()
  .superRefine((backoff, ctx) => {
    if (backoff.maxMs < backoff.initialMs) {
      ctx.addIssue({ code: 'custom', message: 'must be a number >= initialMs', path: ['maxMs'], input: backoff.maxMs });
    }
  });

/** The shape of a task module's default export (task.ts, TaskDefinition), checked when it is loaded. */
const taskShape = z
  .object(
    {
      name: z
        .string({ error: 'must be a string' })
        .regex(/^[A-Za-z0-9._-]{1,100}$/, { error: "must be 1 to 100 letters, digits, '.', '_' or '-'" }),
      description: z.string({ error: 'must be a string' }).optional(),
      schema: z
        .custom<StandardSchemaV1>(isStandardSchema, {
          error: 'must be a Standard Schema (an object with a "~standard.validate" function), e.g. a zod schema',
        })
        .optional(),
      defaults: z
        .object(
          {
            priority: int(0, 9, 'an integer from 0 to 9').optional(),
            maxAttempts: int(1, 100, 'an integer from 1 to 100').optional(),
            timeoutMs: int(1, 86_400_000, 'an integer from 1 to 86400000').optional(),
            backoff: backoffShape.optional(),
          },
          { error: 'must be an object' },
        )
        .strict()
        .optional(),
      concurrency: int(1, Number.MAX_SAFE_INTEGER, 'an integer >= 1').optional(),
      rateLimit: z
        .object(
          {
            max: int(1, Number.MAX_SAFE_INTEGER, 'an integer >= 1'),
            perMs: int(1, Number.MAX_SAFE_INTEGER, 'an integer >= 1'),
          },
          { error: 'must be an object { max, perMs }' },
        )
        .strict()
        .optional(),
      isolate: z.boolean({ error: 'must be true or false' }).optional(),
      handler: z.custom<TaskDefinition['handler']>((value) => typeof value === 'function', {
        error: 'must be a function',
      }),
    },
    { error: 'the default export must be a task definition object' },
  )
  .strict();

function isStandardSchema(value: unknown): value is StandardSchemaV1 {
  if ((typeof value !== 'object' && typeof value !== 'function') || value === null) return false;
  const standard = (value as { '~standard'?: unknown })['~standard'];
  return (
    typeof standard === 'object' &&
    standard !== null &&
    typeof (standard as { validate?: unknown }).validate === 'function'
  );
}

function describeIssue(issues: z.core.$ZodIssue[]): string {
  const issue = issues[0];
  if (issue === undefined) return 'does not fit the task definition shape';
  const path = issue.path.map(String).join('.');
  if (issue.code === 'unrecognized_keys') {
    const keys = issue.keys.map((key) => `"${path === '' ? key : `${path}.${key}`}"`).join(', ');
    return `unknown ${issue.keys.length === 1 ? 'key' : 'keys'} ${keys}`;
  }
  if (path === '') return `${issue.message}, got ${describeValue(issue.input)}`;
  const input = 'input' in issue ? issue.input : undefined;
  return `"${path}" ${issue.message}, got ${describeValue(input)}`;
}

function describeValue(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'string') return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}...` : value);
  if (typeof value === 'number' || typeof value === 'boolean' || value === null) return String(value);
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
