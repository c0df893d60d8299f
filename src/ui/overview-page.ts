import { useMemo, useState } from 'preact/hooks';
import { api, JOB_STATUSES, type Stats } from './api.js';
import { Chart } from './chart.js';
import { useMay } from './permissions.js';
import { duration, html, Problem, Section, useAction, useLoad } from './view.js';

const REFRESH_MS = 2000;
const WINDOWS = [
  { seconds: 300, label: '5 min' },
  { seconds: 900, label: '15 min' },
  { seconds: 3600, label: '1 hour' },
];

/** The stats as uPlot columns: x in epoch seconds, then one column per series. */
function columns(stats: Stats | null, pick: Array<(b: Stats['buckets'][number]) => number | null>) {
  const buckets = stats?.buckets ?? [];
  return [buckets.map((b) => Date.parse(b.at) / 1000), ...pick.map((f) => buckets.map(f))];
}

export function OverviewPage() {
  const queue = useLoad(() => api.queue(), 'queue', REFRESH_MS);
  const [windowSeconds, setWindowSeconds] = useState(900);
  const stats = useLoad(() => api.stats(windowSeconds), `stats:${windowSeconds}`, REFRESH_MS * 2);
  const action = useAction();
  const may = useMay();
  const q = queue.data;
  const s = stats.data;
  const perSecond = (n: number) => n / (s?.bucketSeconds ?? 10);
  const throughput = useMemo(
    () => columns(s, [(b) => perSecond(b.submitted), (b) => perSecond(b.completed), (b) => perSecond(b.failed)]),
    [s],
  );
  const latency = useMemo(
    () => columns(s, [(b) => b.waitMsP50, (b) => b.waitMsP99, (b) => b.runMsP50, (b) => b.runMsP99]),
    [s],
  );

  return html`<h1>Overview</h1>
    <${Problem} error=${queue.error ?? action.error} />
    ${
      q === null
        ? html`<p class="muted">Loading…</p>`
        : html`<div class="grid">
            <${Section} title="Queue">
              <dl class="facts">
                <div>
                  <dt>Dispatch</dt>
                  <dd data-testid="paused">${q.paused ? 'paused' : 'running'}</dd>
                </div>
                <div>
                  <dt>Threads busy</dt>
                  <dd data-testid="threads">${q.threads.busy} / ${q.threads.size}</dd>
                </div>
                <div>
                  <dt>Pending</dt>
                  <dd data-testid="pending">${q.pending} / ${q.capacity}</dd>
                </div>
              </dl>
              ${
                may(q.paused ? 'resume' : 'pause')
                  ? html`<button
                      disabled=${action.busy}
                      onClick=${() => action.run(() => (q.paused ? api.resume() : api.pause()), queue.reload)}
                    >
                      ${q.paused ? 'Resume dispatch' : 'Pause dispatch'}
                    </button>`
                  : null
              }
            <//>
            <${Section} title="Jobs by status">
              <ul class="counts">
                ${JOB_STATUSES.map(
                  (status) =>
                    html`<li>
                      <a
                        href=${`#/jobs?status=${status}`}
                        class=${`count status-${status}`}
                        data-testid=${`count-${status}`}
                      >
                        <span class="number">${q.byStatus[status] ?? 0}</span>
                        <span class="label">${status}</span>
                      </a>
                    </li>`,
                )}
              </ul>
            <//>
            <${Section} title="Queued by priority">
              <ul class="priorities">
                ${Object.entries(q.byPriority)
                  .sort(([a], [b]) => Number(b) - Number(a))
                  .map(([priority, n]) => {
                    const widest = Math.max(1, ...Object.values(q.byPriority));
                    return html`<li>
                      <span class="priority">${priority}</span>
                      <span class="bar"><span style=${`width: ${(100 * n) / widest}%`}></span></span>
                      <span class="number" data-testid=${`priority-${priority}`}>${n}</span>
                    </li>`;
                  })}
              </ul>
            <//>
          </div>`
    }
    <section class="card">
      <div class="card-head">
        <h2>Throughput and latency <span class="muted">(this server)</span></h2>
        <div class="segmented" role="group" aria-label="Window">
          ${WINDOWS.map(
            (w) =>
              html`<button
                class=${w.seconds === windowSeconds ? 'active' : ''}
                onClick=${() => setWindowSeconds(w.seconds)}
              >
                ${w.label}
              </button>`,
          )}
        </div>
      </div>
      <${Problem} error=${stats.error} />
      ${
        s === null
          ? null
          : html`<dl class="facts">
              <div>
                <dt>Submitted</dt>
                <dd data-testid="total-submitted">${s.totals.submitted}</dd>
              </div>
              <div>
                <dt>Completed</dt>
                <dd data-testid="total-completed">${s.totals.completed}</dd>
              </div>
              <div>
                <dt>Failed</dt>
                <dd>${s.totals.failed}</dd>
              </div>
              <div>
                <dt>Wait p50 / p99</dt>
                <dd>${duration(s.totals.waitMsP50)} / ${duration(s.totals.waitMsP99)}</dd>
              </div>
              <div>
                <dt>Run p50 / p99</dt>
                <dd>${duration(s.totals.runMsP50)} / ${duration(s.totals.runMsP99)}</dd>
              </div>
            </dl>`
      }
      <div class="charts">
        <${Chart}
          title="Jobs per second"
          testId="chart-throughput"
          unit=${(v: number) => (v >= 10 ? v.toFixed(0) : v.toFixed(1))}
          series=${[
            { label: 'submitted', color: '#0969da' },
            { label: 'completed', color: '#1a7f37' },
            { label: 'failed', color: '#cf222e' },
          ]}
          data=${throughput}
        />
        <${Chart}
          title="Wait (ready → started) and run time"
          testId="chart-latency"
          gaps
          unit=${duration}
          series=${[
            { label: 'wait p50', color: '#8250df' },
            { label: 'wait p99', color: '#8250df', dash: [6, 4] },
            { label: 'run p50', color: '#bc4c00' },
            { label: 'run p99', color: '#bc4c00', dash: [6, 4] },
          ]}
          data=${latency}
        />
      </div>
    </section>`;
}
