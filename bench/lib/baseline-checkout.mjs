/**
 * Another commit of Kiln built beside this checkout, so that a benchmark can run both on
 * the same machine in the same run: the commit's files from git (`git archive`), this
 * checkout's node_modules when the two lock files are the same (else `npm ci` of its own),
 * and its server compiled (src/ only; the dashboard's static files copied as the build
 * does). Kept in the temp directory by commit and by the Node.js ABI it runs on (its
 * native module is built for one), so that a second run on the same Node.js reuses the build.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT_DIR } from './processes.mjs';

const run = (command, args, options = {}) => {
  const result = spawnSync(command, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, ...options });
  if (result.status !== 0) {
    const output = `${result.stdout ?? ''}${result.stderr ?? ''}`.trim().split('\n').slice(-20).join('\n');
    throw new Error(
      `${command} ${args.join(' ')} failed (${result.error?.message ?? `exit ${result.status}`}):\n${output}`,
    );
  }
  return result.stdout;
};

/** The full hash of `rev` in this repository; an error naming `rev` when git does not hold it. */
export function resolveCommit(rev) {
  const parse = () =>
    spawnSync('git', ['rev-parse', '--verify', '--quiet', `${rev}^{commit}`], { cwd: ROOT_DIR, encoding: 'utf8' });
  let result = parse();
  // A shallow clone lacks the history; fetch it once if its remote answers.
  const shallow = spawnSync('git', ['rev-parse', '--is-shallow-repository'], { cwd: ROOT_DIR, encoding: 'utf8' });
  if (result.status !== 0 && shallow.stdout?.trim() === 'true') {
    spawnSync('git', ['fetch', '--quiet', '--unshallow'], { cwd: ROOT_DIR, stdio: 'ignore', timeout: 120_000 });
    result = parse();
  }
  if (result.status !== 0) {
    throw new Error(`git does not hold commit ${rev} (a shallow clone? fetch its history: git fetch --unshallow)`);
  }
  return result.stdout.trim();
}

/**
 * Builds commit `rev` (once per commit) and answers `{ commit, root, main }`: its full
 * hash, the directory it was built in and its server's entry point.
 */
export function buildCommit(rev) {
  const commit = resolveCommit(rev);
  const root = join(tmpdir(), `kiln-commit-${commit.slice(0, 12)}-node${process.versions.modules}`);
  const main = join(root, 'dist', 'src', 'main.js');
  const built = join(root, '.built');
  if (existsSync(built)) return { commit, root, main };
  rmSync(root, { recursive: true, force: true });
  mkdirSync(root, { recursive: true });
  run('sh', ['-c', `git -C "${ROOT_DIR}" archive --format=tar ${commit} | tar -x -C "${root}"`]);
  const lock = (dir) => readFileSync(join(dir, 'package-lock.json'), 'utf8');
  if (lock(root) === lock(ROOT_DIR) && existsSync(join(ROOT_DIR, 'node_modules'))) {
    symlinkSync(join(ROOT_DIR, 'node_modules'), join(root, 'node_modules'), 'dir');
  } else {
    run('npm', ['ci', '--no-audit', '--no-fund'], { cwd: root });
  }
  // The server only: the tests and the dashboard's scripts are not what is measured.
  writeFileSync(
    join(root, 'tsconfig.server.json'),
    JSON.stringify({ extends: './tsconfig.json', include: ['src/**/*.ts'], exclude: ['src/ui/**'] }),
  );
  run(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.server.json'], {
    cwd: root,
  });
  if (existsSync(join(root, 'src', 'ui', 'static'))) {
    cpSync(join(root, 'src', 'ui', 'static'), join(root, 'dist', 'src', 'ui', 'static'), { recursive: true });
  }
  writeFileSync(built, `${commit}\n`);
  return { commit, root, main };
}
