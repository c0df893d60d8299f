/**
 * An attempt's ctx.signal, made when the handler first reads it: most handlers never do,
 * and an AbortController is the dearest object of a short attempt. An abort before the
 * first read is kept, and the signal is then made already aborted with its reason.
 */
export class Abort {
  #controller: AbortController | null = null;
  #reason: Error | null = null;

  get signal(): AbortSignal {
    if (this.#controller === null) {
      this.#controller = new AbortController();
      if (this.#reason !== null) this.#controller.abort(this.#reason);
    }
    return this.#controller.signal;
  }

  abort(reason: Error): void {
    if (this.#reason !== null) return;
    this.#reason = reason;
    this.#controller?.abort(reason);
  }
}
