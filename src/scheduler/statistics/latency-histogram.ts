/**
 * A fixed-size histogram of durations on a log scale: eight bins per doubling, from
 * 2^-7 ms (≈ 8 µs) to 2^27 ms (≈ 37 hours), so a percentile read from it is within
 * ±4.5 % of a sample (clamped to the smallest and largest seen, which are exact).
 * Recording is O(1) and allocates nothing; two histograms merge by adding their bins.
 *
 * Why not a library: HdrHistogram (hdr-histogram-js) keeps thousands of counters per
 * histogram for the precision it promises, and DDSketch (@datadog/sketches-js) grows
 * its store as values arrive (allocation on the hot path) and brings protobufjs along.
 * Kiln keeps two histograms per 10-second bucket for an hour (720), so a fixed layout
 * of 274 counters each, merged by addition, is both smaller and simpler.
 */

const BINS_PER_DOUBLING = 8;
const MIN_EXPONENT = -7;
const MAX_EXPONENT = 27;
/** Bin 0 holds everything below 2^MIN_EXPONENT ms, the last bin everything from 2^MAX_EXPONENT ms. */
export const HISTOGRAM_BINS = (MAX_EXPONENT - MIN_EXPONENT) * BINS_PER_DOUBLING + 2;

export class LatencyHistogram {
  readonly #bins = new Uint32Array(HISTOGRAM_BINS);
  #count = 0;
  #min = Number.POSITIVE_INFINITY;
  #max = Number.NEGATIVE_INFINITY;

  get count(): number {
    return this.#count;
  }

  record(ms: number): void {
    const value = Number.isFinite(ms) && ms > 0 ? ms : 0;
    this.#bins[binOf(value)]! += 1;
    this.#count += 1;
    if (value < this.#min) this.#min = value;
    if (value > this.#max) this.#max = value;
  }

  /** Adds another histogram's samples to this one. */
  add(other: LatencyHistogram): void {
    if (other.#count === 0) return;
    for (let bin = 0; bin < HISTOGRAM_BINS; bin++) this.#bins[bin]! += other.#bins[bin]!;
    this.#count += other.#count;
    if (other.#min < this.#min) this.#min = other.#min;
    if (other.#max > this.#max) this.#max = other.#max;
  }

  clear(): void {
    if (this.#count === 0) return;
    this.#bins.fill(0);
    this.#count = 0;
    this.#min = Number.POSITIVE_INFINITY;
    this.#max = Number.NEGATIVE_INFINITY;
  }

  /**
   * The value at quantile `q` (0–1) by nearest rank: the middle of the bin that holds
   * the rank-th smallest sample, clamped to [min, max]; the first and last ranks are
   * the smallest and largest samples themselves. Null when empty.
   */
  quantile(q: number): number | null {
    if (this.#count === 0) return null;
    const rank = Math.min(this.#count, Math.max(1, Math.ceil(q * this.#count)));
    if (rank === this.#count) return this.#max;
    if (rank === 1) return this.#min;
    let seen = 0;
    for (let bin = 0; bin < HISTOGRAM_BINS - 1; bin++) {
      seen += this.#bins[bin]!;
      if (seen >= rank) return Math.min(this.#max, Math.max(this.#min, middleOf(bin)));
    }
    return this.#max;
  }
}

function binOf(ms: number): number {
  if (ms <= 0) return 0;
  const position = Math.floor((Math.log2(ms) - MIN_EXPONENT) * BINS_PER_DOUBLING);
  if (position < 0) return 0;
  return Math.min(HISTOGRAM_BINS - 1, position + 1);
}

/** The geometric middle of a bin (for the open-ended ends: their finite edge). */
function middleOf(bin: number): number {
  if (bin === 0) return 2 ** MIN_EXPONENT;
  if (bin === HISTOGRAM_BINS - 1) return 2 ** MAX_EXPONENT;
  return 2 ** (MIN_EXPONENT + (bin - 1 + 0.5) / BINS_PER_DOUBLING);
}
