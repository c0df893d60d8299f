import type { Job } from '../client/index.js';

const BAR_CELLS = 30;

/**
 * One line redrawn in place (carriage return, erase line) with the job's progress, for
 * `kiln wait` on a terminal. The caller writes plain lines instead when the output is
 * a pipe or a file, where redrawing would leave a mess.
 */
export class ProgressBar {
  #stream: NodeJS.WriteStream;
  #drawn = false;

  constructor(stream: NodeJS.WriteStream) {
    this.#stream = stream;
  }

  draw(job: Job): void {
    const percent = Math.min(100, Math.max(0, job.status === 'completed' ? 100 : (job.progress?.percent ?? 0)));
    const filled = Math.round((percent / 100) * BAR_CELLS);
    const bar = '█'.repeat(filled) + '░'.repeat(BAR_CELLS - filled);
    const message = job.progress?.message ?? '';
    const percentText = `${Math.round(percent)}%`.padStart(4);
    let line = `${bar} ${percentText}  ${job.status}${message === '' ? '' : `  ${message}`}`;
    const columns = this.#stream.columns;
    if (columns !== undefined && columns > 0 && line.length >= columns) line = line.slice(0, columns - 1);
    this.#stream.write(`\r\x1b[2K${line}`);
    this.#drawn = true;
  }

  /** Leaves the last drawing on its line and moves below it. */
  end(): void {
    if (this.#drawn) this.#stream.write('\n');
    this.#drawn = false;
  }
}
