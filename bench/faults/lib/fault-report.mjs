/**
 * What the fault runs share: where their results go, how each ends (a table already
 * printed, one JSON line of its figures, a result file, every child killed, exit 1 on an
 * error of the run itself), and small statistics.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { killAllChildren } from '../../lib/processes.mjs';
import { kilnVersion, machine, RESULTS_DIR } from '../../lib/report.mjs';

export const FAULTS_RESULTS = join(RESULTS_DIR, 'faults');
export const MiB = 2 ** 20;

/**
 * A temp directory of the run's, removed when the process exits, also when SIGINT or
 * SIGTERM end it (through process.exit) before the run's own cleanup.
 */
export function runDirectory() {
  const dir = mkdtempSync(join(tmpdir(), 'kiln-fault-'));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Slope of the least-squares line through [x, y] points; NaN with fewer than two. */
export function linearSlope(points) {
  const n = points.length;
  if (n < 2) return Number.NaN;
  const mx = points.reduce((a, [x]) => a + x, 0) / n;
  const my = points.reduce((a, [, y]) => a + y, 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? Number.NaN : num / den;
}

/** Median of numbers (NaN for none). */
export function median(values) {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/**
 * Runs one fault run's body, which answers its figures; writes them with the date, the
 * machine and the Kiln commit to bench/results/faults/<kind>[.tiny].json, prints them as
 * one JSON line (without the samples), and kills every child, also on an error.
 */
export async function finish(kind, body) {
  const started = Date.now();
  const version = kilnVersion();
  try {
    const figures = await body();
    const seconds = (Date.now() - started) / 1000;
    const { samples: _samples, ...line } = figures;
    mkdirSync(FAULTS_RESULTS, { recursive: true });
    const path = join(FAULTS_RESULTS, `${kind}${figures.size === 'tiny' ? '.tiny' : ''}.json`);
    const document = { kind, date: new Date().toISOString(), machine: machine(), kiln: version, seconds, ...figures };
    writeFileSync(path, `${JSON.stringify(document, null, 2)}\n`);
    console.log(`\n${kind}: done in ${seconds.toFixed(1)} s, wrote ${path}`);
    console.log(JSON.stringify({ kind, seconds, ...line }));
  } catch (error) {
    console.error(`\n${kind}: FAILED: ${error?.stack ?? error}`);
    process.exitCode = 1;
  } finally {
    killAllChildren();
  }
}
