/**
 * Errors of the workers layer. `code` is stable; the message names the file and the
 * reason so that a bad task module stops the server with something a person can act on.
 */

/** A task module could not be loaded: import failure, wrong shape or a name clash. */
export class TaskLoadError extends Error {
  readonly code = 'task_load_error';
  /** The file at fault (a path), or the directory when the directory itself could not be read. */
  readonly file: string;

  constructor(file: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TaskLoadError';
    this.file = file;
  }
}
