import { LatencyHistogram } from './latency-histogram.js';
import { STATS_BUCKET_MS, STATS_MAX_WINDOW_SECONDS } from '../../contract/stats.js';

const RING_SIZE = (STATS_MAX_WINDOW_SECONDS * 1000) / STATS_BUCKET_MS;

export interface StatsFigures {
  submitted: number;
  completed: number;
  failed: number;
  waitMsP50: number | null;
  waitMsP99: number | null;
  runMsP50: number | null;
  runMsP99: number | null;
}

export interface StatsBucket extends StatsFigures {
  /** Epoch ms at which the bucket starts. */
  at: number;
}

export interface StatsWindow {
  /** Buckets oldest first, the current (partial) one last; empty ones included. */
  buckets: StatsBucket[];
  totals: StatsFigures;
}

/** One slot of the ring; `index` says which 10-second bucket it holds now. */
interface Slot {
  index: number;
  submitted: number;
  completed: number;
  failed: number;
  wait: LatencyHistogram;
  run: LatencyHistogram;
}

/**
 * This server's recent throughput and latencies for GET /v1/stats, kept in memory:
 * a ring of 360 ten-second buckets (an hour), each with its counts and a histogram
 * of wait times (ready → started) and one of attempt run times. A slot is reused
 * when time comes round to it again, so memory is fixed (≈ 800 KB when every slot
 * has seen samples) and recording costs a few arithmetic operations, no allocation.
 * Slots are made lazily, so an idle server keeps none.
 */
export class JobStats {
  readonly #now: () => number;
  readonly #ring: Array<Slot | undefined> = new Array<Slot | undefined>(RING_SIZE);

  constructor(options: { now?: () => number } = {}) {
    this.#now = options.now ?? Date.now;
  }

  submitted(n = 1): void {
    this.#slot().submitted += n;
  }

  finished(status: 'completed' | 'failed' | 'cancelled'): void {
    if (status === 'completed') this.#slot().completed += 1;
    else if (status === 'failed') this.#slot().failed += 1;
  }

  waited(ms: number): void {
    this.#slot().wait.record(ms);
  }

  ran(ms: number): void {
    this.#slot().run.record(ms);
  }

  /** The last `windowSeconds` (STATS_MIN_WINDOW_SECONDS to STATS_MAX_WINDOW_SECONDS) as whole buckets, the current one included, and their totals. */
  window(windowSeconds: number): StatsWindow {
    const count = Math.min(RING_SIZE, Math.max(1, Math.ceil((windowSeconds * 1000) / STATS_BUCKET_MS)));
    const current = Math.floor(this.#now() / STATS_BUCKET_MS);
    const wait = new LatencyHistogram();
    const run = new LatencyHistogram();
    const totals = { submitted: 0, completed: 0, failed: 0 };
    const buckets: StatsBucket[] = [];
    for (let index = current - count + 1; index <= current; index++) {
      const slot = this.#ring[index % RING_SIZE];
      const at = index * STATS_BUCKET_MS;
      if (slot === undefined || slot.index !== index) {
        buckets.push({ at, ...figures(0, 0, 0, null, null) });
        continue;
      }
      totals.submitted += slot.submitted;
      totals.completed += slot.completed;
      totals.failed += slot.failed;
      wait.add(slot.wait);
      run.add(slot.run);
      buckets.push({ at, ...figures(slot.submitted, slot.completed, slot.failed, slot.wait, slot.run) });
    }
    return { buckets, totals: figures(totals.submitted, totals.completed, totals.failed, wait, run) };
  }

  #slot(): Slot {
    const index = Math.floor(this.#now() / STATS_BUCKET_MS);
    const position = index % RING_SIZE;
    let slot = this.#ring[position];
    if (slot === undefined) {
      slot = {
        index,
        submitted: 0,
        completed: 0,
        failed: 0,
        wait: new LatencyHistogram(),
        run: new LatencyHistogram(),
      };
      this.#ring[position] = slot;
    } else if (slot.index !== index) {
      slot.index = index;
      slot.submitted = 0;
      slot.completed = 0;
      slot.failed = 0;
      slot.wait.clear();
      slot.run.clear();
    }
    return slot;
  }
}

function figures(
  submitted: number,
  completed: number,
  failed: number,
  wait: LatencyHistogram | null,
  run: LatencyHistogram | null,
): StatsFigures {
  return {
    submitted,
    completed,
    failed,
    waitMsP50: rounded(wait?.quantile(0.5) ?? null),
    waitMsP99: rounded(wait?.quantile(0.99) ?? null),
    runMsP50: rounded(run?.quantile(0.5) ?? null),
    runMsP99: rounded(run?.quantile(0.99) ?? null),
  };
}

/** Three significant digits: the histogram is good to ±4.5 %, more digits would be noise. */
function rounded(ms: number | null): number | null {
  return ms === null ? null : Number(ms.toPrecision(3));
}
