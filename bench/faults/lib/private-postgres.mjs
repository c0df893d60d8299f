/**
 * A PostgreSQL cluster of a fault run's own (initdb as the `postgres` user in a temp
 * directory, trust auth, 127.0.0.1 on a free port), so that stopping and killing it never
 * touches the shared server. Needs root (to run as `postgres`) and the server binaries
 * under /usr/lib/postgresql/<version>/bin. remove() stops it (immediate) and deletes it.
 */
import { spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../lib/processes.mjs';

/** The newest server's bin directory, or null. */
function binDir() {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  return versions.length === 0 ? null : join(root, versions[0], 'bin');
}

/** Why a private cluster cannot be made here, or null when it can. */
export function privatePostgresUnavailable() {
  if (process.getuid?.() !== 0) return 'not root (initdb and pg_ctl run as the postgres user)';
  if (binDir() === null) return 'no PostgreSQL server binaries under /usr/lib/postgresql';
  if (spawnSync('id', ['-u', 'postgres'], { stdio: 'ignore' }).status !== 0) return 'no postgres user';
  return null;
}

/** The pids of a process's children (/proc, Linux). */
function childrenOf(pid) {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Whether `pid` is alive and still a postgres process (not a reused pid). */
function isPostgresProcess(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('postgres');
  } catch {
    return false;
  }
}

export async function createPrivatePostgres() {
  const bin = binDir();
  const dir = mkdtempSync(join(tmpdir(), 'kiln-fault-pg-'));
  const uid = Number(spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).stdout);
  const gid = Number(spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).stdout);
  chownSync(dir, uid, gid);
  const data = join(dir, 'data');
  const port = await freePort();
  const asPostgres = (tool, args) => {
    const run = spawnSync('runuser', ['-u', 'postgres', '--', join(bin, tool), ...args], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    return { ok: run.status === 0, output: `${run.stdout ?? ''}${run.stderr ?? ''}`.trim() };
  };
  const init = asPostgres('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync']);
  if (!init.ok) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`initdb failed: ${init.output.slice(-2000)}`);
  }
  const orphans = [];
  let removed = false;
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c autovacuum_naptime=1s`;
  const cluster = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    /** pg_ctl start, waiting until it accepts connections; answers whether it did. */
    start() {
      return asPostgres('pg_ctl', ['-D', data, '-o', options, '-l', join(dir, 'log'), '-w', '-t', '30', 'start']);
    },
    /** pg_ctl stop -m immediate: every process ends at once, no checkpoint (recovery at the next start). */
    stop() {
      return asPostgres('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
    },
    /**
     * SIGKILL of the postmaster only; its backends notice and exit on their own. Their
     * pids are kept, so that remove() can end any still there.
     */
    killPostmaster() {
      const pid = Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
      orphans.push(...childrenOf(pid));
      process.kill(pid, 'SIGKILL');
      return pid;
    },
    /** How many of the killed postmaster's children are still alive. */
    orphansAlive() {
      return orphans.filter(isPostgresProcess).length;
    },
    remove() {
      if (removed) return;
      removed = true;
      process.off('exit', cluster.remove);
      asPostgres('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
      for (const pid of orphans.filter(isPostgresProcess)) process.kill(pid, 'SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
  // Also when the run is interrupted (SIGINT and SIGTERM end it through process.exit).
  process.on('exit', cluster.remove);
  const started = cluster.start();
  if (!started.ok) {
    cluster.remove();
    throw new Error(`the private PostgreSQL did not start: ${started.output.slice(-2000)}`);
  }
  return cluster;
}
