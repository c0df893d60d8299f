import { api } from './api.js';
import { useMay } from './permissions.js';
import { html, Problem, time, useAction, useLoad } from './view.js';

const REFRESH_MS = 5000;

export function SchedulesPage() {
  const schedules = useLoad(() => api.schedules(), 'schedules', REFRESH_MS);
  const action = useAction();
  const may = useMay();
  const list = schedules.data ?? [];
  return html`<h1>Schedules</h1>
    <${Problem} error=${schedules.error ?? action.error} />
    ${
      schedules.data !== null && list.length === 0
        ? html`<p class="muted">No schedules. Create one with <code>PUT /v1/schedules/{name}</code>.</p>`
        : null
    }
    <div class="table-wrap">
      <table data-testid="schedule-table">
        <thead>
          <tr>
            <th>Name</th>
            <th>Cron</th>
            <th>Job type</th>
            <th>State</th>
            <th>Next run</th>
            <th>Last run</th>
            <th>Actions</th>
          </tr>
        </thead>
        <tbody>
          ${list.map(
            (schedule) =>
              html`<tr data-schedule=${schedule.name}>
                <td><a href=${`#/jobs?schedule=${encodeURIComponent(schedule.name)}`}>${schedule.name}</a></td>
                <td class="mono nowrap">
                  ${schedule.cron}${schedule.timezone ? html` <span class="muted">${schedule.timezone}</span>` : null}
                </td>
                <td>${schedule.job.type}</td>
                <td data-testid="schedule-state">${schedule.paused ? 'paused' : 'active'}</td>
                <td class="nowrap">${time(schedule.nextRunAt)}</td>
                <td class="nowrap">
                  ${
                    schedule.lastJobId === null
                      ? time(schedule.lastRunAt)
                      : html`<a href=${`#/jobs/${schedule.lastJobId}`}>${time(schedule.lastRunAt)}</a>`
                  }
                </td>
                <td class="row-actions">
                  ${
                    may(schedule.paused ? 'resumeSchedule' : 'pauseSchedule')
                      ? html`<button
                          disabled=${action.busy}
                          onClick=${() =>
                            action.run(
                              () =>
                                schedule.paused ? api.resumeSchedule(schedule.name) : api.pauseSchedule(schedule.name),
                              schedules.reload,
                            )}
                        >
                          ${schedule.paused ? 'Resume' : 'Pause'}
                        </button>`
                      : null
                  }
                  ${
                    may('triggerSchedule')
                      ? html`<button
                          disabled=${action.busy}
                          onClick=${() =>
                            action.run(async () => {
                              const job = await api.triggerSchedule(schedule.name);
                              location.hash = `#/jobs/${job.id}`;
                            })}
                        >
                          Trigger now
                        </button>`
                      : null
                  }
                </td>
              </tr>`,
          )}
        </tbody>
      </table>
    </div>`;
}
