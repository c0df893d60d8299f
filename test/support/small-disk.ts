import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmdirSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A real file system of a few MiB (a tmpfs), to fill up for real. Mounting needs root:
 * elsewhere the tests that need one are skipped, except under CI, which runs them as
 * root and must not skip them silently.
 */
export interface SmallDisk {
  /** The mounted directory. */
  dir: string;
  /** Writes a filler file until the file system answers ENOSPC. */
  fill(): void;
  /** Deletes the filler: the space is back. */
  free(): void;
  /** Unmounts and removes the directory (call after closing every file in it). */
  remove(): void;
}

/** Why tests on a small disk cannot run here, or false when they can. */
export function smallDiskSkip(): string | false {
  if (process.env.CI === 'true') return false;
  return process.getuid?.() === 0 ? false : 'mounting a tmpfs needs root';
}

export function mountSmallDisk(sizeMiB: number): SmallDisk {
  const dir = mkdtempSync(join(tmpdir(), 'kiln-small-disk-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${sizeMiB}m`, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (error) {
    rmdirSync(dir);
    throw new Error(`mounting a ${sizeMiB} MiB tmpfs on ${dir} failed (tests on a full disk need root)`, {
      cause: error,
    });
  }
  const filler = join(dir, 'filler');
  return {
    dir,
    fill() {
      const fd = openSync(filler, 'a');
      const chunk = Buffer.alloc(64 * 1024, 1);
      try {
        for (;;) {
          try {
            writeSync(fd, chunk);
          } catch (error) {
            if ((error as NodeJS.ErrnoException).code === 'ENOSPC') break;
            throw error;
          }
        }
        // The last chunk may not have fit whole: take the bytes that are left too.
        for (;;) {
          try {
            writeSync(fd, chunk, 0, 512);
          } catch (error) {
            if ((error as NodeJS.ErrnoException).code === 'ENOSPC') return;
            throw error;
          }
        }
      } finally {
        closeSync(fd);
      }
    },
    free() {
      rmSync(filler, { force: true });
    },
    remove() {
      execFileSync('umount', [dir]);
      rmdirSync(dir);
    },
  };
}
