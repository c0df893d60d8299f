import { useState } from 'preact/hooks';
import { api, JOB_STATUSES, type JobFilter, type JobStatus } from './api.js';
import { html, Problem, shortId, StatusBadge, time, useLoad } from './view.js';

const PAGE_SIZE = 25;
const REFRESH_MS = 3000;
const TEXT_FILTERS = ['type', 'group', 'schedule'] as const;

function filterOf(query: URLSearchParams): JobFilter {
  const filter: JobFilter = { limit: PAGE_SIZE };
  const status = query.get('status');
  if (status !== null && status !== '') filter.status = status.split(',') as JobStatus[];
  for (const field of TEXT_FILTERS) {
    const value = query.get(field);
    if (value !== null && value !== '') filter[field] = value;
  }
  return filter;
}

/** The job list: filters in the location hash (so a filtered list can be linked), pages by cursor. */
export function JobsPage({ query }: { query: URLSearchParams }) {
  const filter = filterOf(query);
  const filterKey = query.toString();
  // The cursors of the pages up to this one (the last is this page's), for the filter
  // they were given out for: another filter starts again at the first page.
  const [paging, setPaging] = useState<{ filterKey: string; cursors: Array<string | undefined> }>({
    filterKey,
    cursors: [undefined],
  });
  const cursors = paging.filterKey === filterKey ? paging.cursors : [undefined];
  const setCursors = (next: Array<string | undefined>) => setPaging({ filterKey, cursors: next });
  const cursor = cursors.at(-1);
  const page = useLoad(
    () => api.jobs({ ...filter, ...(cursor === undefined ? {} : { cursor }) }),
    `${filterKey}|${cursor ?? ''}`,
    REFRESH_MS,
  );
  const tasks = useLoad(() => api.tasks(), 'tasks');

  const apply = (event: Event) => {
    event.preventDefault();
    const form = new FormData(event.target as HTMLFormElement);
    const next = new URLSearchParams();
    const statuses = form.getAll('status').map(String);
    if (statuses.length > 0) next.set('status', statuses.join(','));
    for (const field of TEXT_FILTERS) {
      const value = String(form.get(field) ?? '').trim();
      if (value !== '') next.set(field, value);
    }
    location.hash = `#/jobs${next.size > 0 ? `?${next.toString()}` : ''}`;
  };

  return html`<h1>Jobs</h1>
    <form class="card filters" onSubmit=${apply} data-testid="job-filters">
      <fieldset class="statuses">
        <legend>Status</legend>
        ${JOB_STATUSES.map(
          (status) =>
            html`<label class="check">
              <input
                type="checkbox"
                name="status"
                value=${status}
                checked=${filter.status?.includes(status) ?? false}
              />
              ${status}
            </label>`,
        )}
      </fieldset>
      <label
        >Type
        <select name="type">
          <option value="">any</option>
          ${(tasks.data ?? []).map(
            (task) => html`<option value=${task.name} selected=${filter.type === task.name}>${task.name}</option>`,
          )}
        </select>
      </label>
      <label>Group <input name="group" value=${filter.group ?? ''} placeholder="any" /></label>
      <label>Schedule <input name="schedule" value=${filter.schedule ?? ''} placeholder="any" /></label>
      <div class="buttons">
        <button type="submit">Apply</button>
        <a class="button secondary" href="#/jobs">Clear</a>
      </div>
    </form>
    <${Problem} error=${page.error} />
    <div class="table-wrap">
      <table class="jobs" data-testid="job-table">
        <thead>
          <tr>
            <th>Job</th>
            <th>Type</th>
            <th>Status</th>
            <th class="num">Priority</th>
            <th class="num">Attempts</th>
            <th>Progress</th>
            <th>Created</th>
          </tr>
        </thead>
        <tbody>
          ${(page.data?.jobs ?? []).map(
            (job) =>
              html`<tr data-job=${job.id}>
                <td class="nowrap">
                  <a href=${`#/jobs/${job.id}`} class="mono" title=${job.id}>${shortId(job.id)}</a>
                </td>
                <td>${job.type}${job.group ? html`<div class="muted small">group ${job.group}</div>` : null}</td>
                <td><${StatusBadge} status=${job.status} /></td>
                <td class="num">${job.priority}</td>
                <td class="num">${job.attempts} / ${job.maxAttempts}</td>
                <td>${job.progress === null ? '—' : `${Math.round(job.progress.percent)} %`}</td>
                <td class="nowrap">${time(job.createdAt)}</td>
              </tr>`,
          )}
        </tbody>
      </table>
    </div>
    ${page.data !== null && page.data.jobs.length === 0 ? html`<p class="muted">No jobs match.</p>` : null}
    <div class="pager">
      <button disabled=${cursors.length <= 1} onClick=${() => setCursors(cursors.slice(0, -1))}>← Newer</button>
      <span class="muted">page ${cursors.length}</span>
      <button
        disabled=${page.data?.nextCursor == null}
        onClick=${() => page.data?.nextCursor && setCursors([...cursors, page.data.nextCursor])}
      >
        Older →
      </button>
    </div>`;
}
