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
  const batch = query.get('batch');
  if (batch !== null && batch !== '') filter.batch = batch;
  return filter;
}

/** The filter form's fields as the user has set them, for the filter in the location they began from. */
interface Draft {
  filterKey: string;
  status: JobStatus[];
  type: string;
  group: string;
  schedule: string;
}

function draftOf(filterKey: string, filter: JobFilter): Draft {
  return {
    filterKey,
    status: filter.status ?? [],
    type: filter.type ?? '',
    group: filter.group ?? '',
    schedule: filter.schedule ?? '',
  };
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
  // What the form shows is its own state, begun from the filter in the location: the list
  // refreshes every few seconds, and a render from the location would undo what the user
  // has ticked or typed but not yet applied.
  const [draft, setDraft] = useState<Draft>(() => draftOf(filterKey, filter));
  const form = draft.filterKey === filterKey ? draft : draftOf(filterKey, filter);
  const edit = (change: Partial<Draft>) => setDraft({ ...form, ...change });
  const toggle = (status: JobStatus, on: boolean) =>
    edit({ status: on ? [...form.status, status] : form.status.filter((each) => each !== status) });
  const text = (field: (typeof TEXT_FILTERS)[number]) => (event: Event) =>
    edit({ [field]: (event.target as HTMLInputElement | HTMLSelectElement).value });

  const apply = (event: Event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    // The batch a list was opened for (from a batch's page) stays in the filter.
    if (filter.batch !== undefined) next.set('batch', filter.batch);
    const statuses = JOB_STATUSES.filter((status) => form.status.includes(status));
    if (statuses.length > 0) next.set('status', statuses.join(','));
    for (const field of TEXT_FILTERS) {
      const value = form[field].trim();
      if (value !== '') next.set(field, value);
    }
    location.hash = `#/jobs${next.size > 0 ? `?${next.toString()}` : ''}`;
  };

  return html`<h1>Jobs</h1>
    ${
      filter.batch === undefined
        ? null
        : html`<p data-testid="batch-filter">
            Of batch <a class="mono" href=${`#/batches/${encodeURIComponent(filter.batch)}`}>${filter.batch}</a>
          </p>`
    }
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
                checked=${form.status.includes(status)}
                onChange=${(event: Event) => toggle(status, (event.target as HTMLInputElement).checked)}
              />
              ${status}
            </label>`,
        )}
      </fieldset>
      <label
        >Type
        <select name="type" onChange=${text('type')}>
          <option value="" selected=${form.type === ''}>any</option>
          ${(tasks.data ?? []).map(
            (task) => html`<option value=${task.name} selected=${form.type === task.name}>${task.name}</option>`,
          )}
        </select>
      </label>
      <label>Group <input name="group" value=${form.group} onInput=${text('group')} placeholder="any" /></label>
      <label
        >Schedule <input name="schedule" value=${form.schedule} onInput=${text('schedule')} placeholder="any"
      /></label>
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
