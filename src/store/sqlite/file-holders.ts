import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { resolve } from 'node:path';

/** A process that has a file open. */
export interface FileHolder {
  pid: number;
  /** Its command line, as /proc shows it. */
  command: string;
}

/**
 * The other processes that have `path` (or its `-wal`/`-shm` companions) open, read from
 * /proc/<pid>/fd. Used only to name the holder when the file's lock is refused, so it
 * answers an empty list where /proc is missing (not Linux) or a process is not readable.
 */
export function fileHolders(path: string, self: number = process.pid): FileHolder[] {
  const absolute = resolve(path);
  const names = new Set([absolute, `${absolute}-wal`, `${absolute}-shm`]);
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((entry) => /^\d+$/.test(entry));
  } catch {
    return [];
  }
  const holders: FileHolder[] = [];
  for (const entry of pids) {
    const pid = Number(entry);
    if (pid === self) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue; // gone meanwhile, or another user's
    }
    const holds = fds.some((fd) => {
      try {
        return names.has(readlinkSync(`/proc/${pid}/fd/${fd}`));
      } catch {
        return false;
      }
    });
    if (holds) holders.push({ pid, command: commandOf(pid) });
  }
  return holders;
}

function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
  } catch {
    return '';
  }
}
