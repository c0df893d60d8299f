import { useEffect, useState } from 'preact/hooks';
import { api, asProblem, type Job, type KilnError, TERMINAL_STATUSES, watchJob } from './api.js';
import { useMay } from './permissions.js';
import { confirmed, duration, html, Json, Problem, Section, StatusBadge, time, useAction, useLoad } from './view.js';

/** How long to wait before following a job's events again after the stream broke off, unless the server said (`retry:`). */
const RECONNECT_MS = 2000;
/** How often the deliveries of a job's callback are read again. */
const CALLBACKS_REFRESH_MS = 3000;

/**
 * One job: loaded once, then followed over its event stream (progress and status live)
 * until it is finished; an action that makes it unfinished again (retry) follows it anew.
 */
export function JobPage({ id }: { id: string }) {
  const [job, setJob] = useState<Job | null>(null);
  const [error, setError] = useState<KilnError | null>(null);
  const [live, setLive] = useState(false);
  // Bumped to read and follow the job again (after an action, or a broken stream).
  const [round, setRound] = useState(0);
  const action = useAction();
  const may = useMay();

  useEffect(() => {
    const stop = new AbortController();
    let reconnect: ReturnType<typeof setTimeout> | undefined;
    const follow = async () => {
      const first = await api.job(id);
      if (stop.signal.aborted) return;
      setJob(first);
      setError(null);
      if (TERMINAL_STATUSES.includes(first.status)) return;
      setLive(true);
      let last = first;
      let retryMs = RECONNECT_MS;
      await watchJob(
        id,
        (next) => {
          last = next;
          setJob(next);
        },
        stop.signal,
        (ms) => {
          retryMs = ms;
        },
      );
      // A stream that ends before the job does (its server is draining): follow it again.
      if (!stop.signal.aborted && !TERMINAL_STATUSES.includes(last.status)) {
        reconnect = setTimeout(() => setRound((n) => n + 1), retryMs);
      }
    };
    follow()
      .catch((failure: unknown) => {
        if (stop.signal.aborted) return;
        const problem = asProblem(failure);
        setError(problem);
        if (problem.status !== 404 && problem.status !== 401) {
          reconnect = setTimeout(() => setRound((n) => n + 1), RECONNECT_MS);
        }
      })
      .finally(() => {
        if (!stop.signal.aborted) setLive(false);
      });
    return () => {
      stop.abort();
      clearTimeout(reconnect);
    };
  }, [id, round]);

  const again = () => setRound((n) => n + 1);
  if (job === null) {
    return html`<h1>Job</h1>
      ${error?.status === 404 ? html`<p class="problem">No job ${id}.</p>` : html`<${Problem} error=${error} />`}
      ${error === null ? html`<p class="muted">Loading…</p>` : null}`;
  }
  const terminal = TERMINAL_STATUSES.includes(job.status);
  const canRetry = job.status === 'failed' || job.status === 'cancelled';
  return html`<h1 class="job-title">
      <span>Job <span class="mono small">${job.id}</span></span>
      <${StatusBadge} status=${job.status} />
      ${live ? html`<span class="live" title="following the job's events">live</span>` : null}
    </h1>
    <div class="actions">
      ${
        may('cancel')
          ? html`<button
              class="danger"
              disabled=${terminal || action.busy}
              onClick=${() => confirmed('Cancel this job?') && action.run(() => api.cancel(id), again)}
            >
              Cancel
            </button>`
          : null
      }
      ${
        may('retry')
          ? html`<button disabled=${!canRetry || action.busy} onClick=${() => action.run(() => api.retry(id), again)}>
              Retry
            </button>`
          : null
      }
      ${
        may('remove')
          ? html`<button
              class="secondary"
              disabled=${!terminal || action.busy}
              onClick=${() =>
                confirmed('Delete this job’s record?') &&
                action.run(
                  () => api.remove(id),
                  () => {
                    location.hash = '#/jobs';
                  },
                )}
            >
              Delete
            </button>`
          : null
      }
    </div>
    <${Problem} error=${action.error ?? error} />
    <div class="grid">
      <${Section} title="State">
        <dl class="facts wide">
          <div>
            <dt>Type</dt>
            <dd>${job.type}</dd>
          </div>
          <div>
            <dt>Priority</dt>
            <dd>${job.priority}</dd>
          </div>
          <div>
            <dt>Attempts</dt>
            <dd data-testid="attempts">${job.attempts} of ${job.maxAttempts}</dd>
          </div>
          <div>
            <dt>Snoozes</dt>
            <dd data-testid="snoozes">${job.snoozes}</dd>
          </div>
          <div>
            <dt>Timeout</dt>
            <dd>${duration(job.timeoutMs)}</dd>
          </div>
          ${filterRow('Group', 'job-group', 'group', job.group)}
          ${filterRow('Schedule', 'job-schedule', 'schedule', job.schedule)}
          ${
            job.batch == null
              ? null
              : html`<div>
                  <dt>Batch</dt>
                  <dd data-testid="job-batch"><a class="mono" href=${`#/batches/${job.batch}`}>${job.batch}</a></dd>
                </div>`
          }
          <div>
            <dt>Created</dt>
            <dd>${time(job.createdAt)}</dd>
          </div>
          <div>
            <dt>Started</dt>
            <dd>${time(job.startedAt)}</dd>
          </div>
          <div>
            <dt>Finished</dt>
            <dd>${time(job.finishedAt)}</dd>
          </div>
          ${
            job.runAt === null
              ? null
              : html`<div>
                  <dt>Next run</dt>
                  <dd data-testid="next-run">${time(job.runAt)}</dd>
                </div>`
          }
          ${
            job.idempotencyKey === null
              ? null
              : html`<div>
                  <dt>Idempotency key</dt>
                  <dd class="mono">${job.idempotencyKey}</dd>
                </div>`
          }
        </dl>
        <div class="progress" data-testid="progress">
          <div class="progress-label">
            Progress
            <span data-testid="progress-percent"
              >${job.progress === null ? '—' : `${Math.round(job.progress.percent)} %`}</span
            >
            ${job.progress?.message ? html`<span class="muted">${job.progress.message}</span>` : null}
          </div>
          <progress max="100" value=${job.progress?.percent ?? 0}></progress>
        </div>
      <//>
      ${
        job.error === null
          ? null
          : html`<section class="card error-card" data-testid="job-error">
              <h2>${terminal && job.status !== 'completed' ? 'Error' : 'Last error'}</h2>
              <p><code>${job.error.code}</code> on attempt ${job.error.attempt}</p>
              <pre class="error-message">${job.error.message}</pre>
            </section>`
      }
      <${Section} title="Dependencies">
        ${
          job.dependsOn.length === 0
            ? html`<p class="muted">None.</p>`
            : html`<ul class="links">
                ${job.dependsOn.map((dep) => html`<li><a class="mono" href=${`#/jobs/${dep}`}>${dep}</a></li>`)}
              </ul>`
        }
      <//>
    </div>
    <div class="grid two">
      <${Section} title="Payload"><${Json} value=${job.payload} /><//>
      <${Section} title="Result">
        ${
          job.result === null
            ? html`<p class="muted">${terminal ? 'None.' : 'None yet.'}</p>`
            : html`<${Json} value=${job.result} />`
        }
      <//>
    </div>
    ${
      Object.keys(job.metadata).length === 0
        ? null
        : html`<${Section} title="Metadata"><${Json} value=${job.metadata} /><//>`
    }
    ${job.callback ? html`<${Callbacks} id=${job.id} url=${job.callback.url} status=${job.status} />` : null}`;
}

/**
 * A row of the job's facts whose value links to the job list filtered by it (`—` for
 * none); nothing when the server does not send the field.
 */
function filterRow(label: string, testId: string, filter: 'group' | 'schedule', value: string | null | undefined) {
  if (value === undefined) return null;
  return html`<div>
    <dt>${label}</dt>
    <dd data-testid=${testId}>
      ${value === null ? '—' : html`<a href=${`#/jobs?${filter}=${encodeURIComponent(value)}`}>${value}</a>`}
    </dd>
  </div>`;
}

function Callbacks({ id, url, status }: { id: string; url: string; status: string }) {
  // Deliveries go on after the job ends (retries with backoff): read again every few seconds.
  const deliveries = useLoad(() => api.callbacks(id), `${id}:${status}`, CALLBACKS_REFRESH_MS);
  return html`<${Section} title="Callback">
    <p>Posts to <code>${url}</code>.</p>
    <${Problem} error=${deliveries.error} />
    ${
      deliveries.data === null || deliveries.data.length === 0
        ? null
        : html`<div class="table-wrap">
            <table data-testid="deliveries">
              <thead>
                <tr>
                  <th>Event</th>
                  <th>Attempt</th>
                  <th>Status</th>
                  <th>HTTP</th>
                  <th>Error</th>
                  <th>At</th>
                </tr>
              </thead>
              <tbody>
                ${deliveries.data.map(
                  (d) =>
                    html`<tr>
                      <td>${d.event}</td>
                      <td class="num">${d.attempt}</td>
                      <td>${d.status}</td>
                      <td class="num">${d.httpStatus ?? '—'}</td>
                      <td>${d.error ?? ''}</td>
                      <td>${time(d.at)}</td>
                    </tr>`,
                )}
              </tbody>
            </table>
          </div>`
    }
  <//>`;
}
