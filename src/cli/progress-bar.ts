import type { Job } from '../client/index.js';

const BAR_CELLS = 30;

/**
 * One line redrawn in place (carriage return, erase line) with the progress of a job
 * (`kiln wait`) or of a batch (`kiln batch --wait`) on a terminal. The caller writes plain lines instead when the output is
 * a pipe or a file, where redrawing would leave a mess.
 */
export class ProgressBar {
  #stream: NodeJS.WriteStream;
  #drawn = false;

  constructor(stream: NodeJS.WriteStream) {
    this.#stream = stream;
  }

  draw(job: Job): void {
    const percent = job.status === 'completed' ? 100 : (job.progress?.percent ?? 0);
    const message = job.progress?.message ?? '';
    this.drawLine(percent, `${job.status}${message === '' ? '' : `  ${message}`}`);
  }

  /** A bar at `percent` (0–100) followed by `text`. */
  drawLine(percent: number, text: string): void {
    const shown = Math.min(100, Math.max(0, percent));
    const filled = Math.round((shown / 100) * BAR_CELLS);
    const bar = '█'.repeat(filled) + '░'.repeat(BAR_CELLS - filled);
    const percentText = `${Math.round(shown)}%`.padStart(4);
    let line = `${bar} ${percentText}  ${text}`;
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
