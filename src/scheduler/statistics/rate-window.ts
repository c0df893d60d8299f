/** Events per second over a sliding window of whole seconds, in O(window) memory. */
export class RateWindow {
  readonly #counts: number[];
  readonly #seconds: number[];

  constructor(windowSeconds: number) {
    this.#counts = new Array<number>(windowSeconds).fill(0);
    this.#seconds = new Array<number>(windowSeconds).fill(-1);
  }

  add(nowMs: number, n = 1): void {
    const second = Math.floor(nowMs / 1000);
    const slot = second % this.#counts.length;
    if (this.#seconds[slot] !== second) {
      this.#seconds[slot] = second;
      this.#counts[slot] = 0;
    }
    this.#counts[slot] = (this.#counts[slot] ?? 0) + n;
  }

  perSecond(nowMs: number): number {
    const second = Math.floor(nowMs / 1000);
    let total = 0;
    for (let slot = 0; slot < this.#counts.length; slot++) {
      const age = second - (this.#seconds[slot] ?? -1);
      if (age >= 0 && age < this.#counts.length) total += this.#counts[slot] ?? 0;
    }
    return total / this.#counts.length;
  }
}
