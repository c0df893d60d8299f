import { api, type Batch, JOB_STATUSES, TERMINAL_STATUSES } from './api.js';
import { useMay } from './permissions.js';
import { confirmed, html, Problem, Section, StatusBadge, time, useAction, useLoad } from './view.js';

/** How often an unfinished batch is read again. */
const REFRESH_MS = 1000;

/** How far a batch is: its finished jobs of those still counted. */
function progressOf(batch: Batch): { done: number; counted: number } {
  const counted = JOB_STATUSES.reduce((sum, status) => sum + batch.counts[status], 0);
  const done = TERMINAL_STATUSES.reduce((sum, status) => sum + batch.counts[status], 0);
  return { done, counted };
}

/**
 * One batch (POST /v1/jobs/batch): its progress, its jobs counted by status (each
 * count links to those jobs), and a button that cancels what is unfinished. Read again
 * every second until every job of it is finished.
 */
export function BatchPage({ id }: { id: string }) {
  const action = useAction();
  const may = useMay();
  const loaded = useLoad(() => api.batch(id), id, REFRESH_MS);
  const batch = loaded.data;
  if (batch === null) {
    return html`<h1>Batch</h1>
      ${
        loaded.error?.status === 404
          ? html`<p class="problem">No batch ${id}.</p>`
          : html`<${Problem} error=${loaded.error} />`
      }
      ${loaded.error === null ? html`<p class="muted">Loading…</p>` : null}`;
  }
  const { done, counted } = progressOf(batch);
  const finished = batch.finishedAt !== null;
  const jobsOf = (status?: string) =>
    `#/jobs?batch=${encodeURIComponent(batch.id)}${status === undefined ? '' : `&status=${status}`}`;
  return html`<h1 class="job-title">
      <span>Batch <span class="mono small">${batch.id}</span></span>
      <span class=${`badge status-${finished ? 'completed' : 'running'}`} data-testid="batch-state"
        >${finished ? 'finished' : 'unfinished'}</span
      >
    </h1>
    <div class="actions">
      ${
        may('cancelBatch')
          ? html`<button
              class="danger"
              disabled=${finished || action.busy}
              onClick=${() =>
                confirmed('Cancel every unfinished job of this batch?') &&
                action.run(() => api.cancelBatch(id), loaded.reload)}
            >
              Cancel unfinished
            </button>`
          : null
      }
      <a class="button secondary" href=${jobsOf()}>Its jobs</a>
    </div>
    <${Problem} error=${action.error ?? loaded.error} />
    <div class="grid">
      <${Section} title="Progress">
        <div class="progress" data-testid="batch-progress">
          <div class="progress-label">Finished <span data-testid="batch-done">${done} of ${counted}</span></div>
          <progress max=${Math.max(counted, 1)} value=${counted === 0 ? 1 : done}></progress>
        </div>
        <dl class="facts wide">
          <div>
            <dt>Created jobs</dt>
            <dd data-testid="batch-total">${batch.total}</dd>
          </div>
          <div>
            <dt>Created</dt>
            <dd>${time(batch.createdAt)}</dd>
          </div>
          <div>
            <dt>Finished</dt>
            <dd data-testid="batch-finished">${time(batch.finishedAt)}</dd>
          </div>
          <div>
            <dt>Callback</dt>
            <dd>${batch.callback === null ? '—' : html`<code>${batch.callback.url}</code>`}</dd>
          </div>
        </dl>
      <//>
      <${Section} title="Jobs by status">
        <table data-testid="batch-counts">
          <tbody>
            ${JOB_STATUSES.map(
              (status) =>
                html`<tr data-status=${status}>
                  <td><${StatusBadge} status=${status} /></td>
                  <td class="num">
                    ${batch.counts[status] === 0 ? '0' : html`<a href=${jobsOf(status)}>${batch.counts[status]}</a>`}
                  </td>
                </tr>`,
            )}
          </tbody>
        </table>
      <//>
    </div>`;
}
