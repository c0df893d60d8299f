import { useState } from 'preact/hooks';
import { api } from './api.js';
import { LimitsForm, limitsText } from './limits-form.js';
import { useMay } from './permissions.js';
import { html, Problem, useLoad } from './view.js';

const REFRESH_MS = 3000;

/** The groups with queued or running jobs or limits (GET /v1/groups), each with its limits. */
export function GroupsPage() {
  const groups = useLoad(() => api.groups(), 'groups', REFRESH_MS);
  const may = useMay();
  const [newGroup, setNewGroup] = useState('');
  const list = groups.data ?? [];
  return html`<h1>Groups</h1>
    <${Problem} error=${groups.error} />
    ${groups.data !== null && list.length === 0 ? html`<p class="muted">No group has jobs or limits.</p>` : null}
    <div class="task-list">
      ${list.map(
        (group) =>
          html`<section class="card task" data-group=${group.name}>
            <div class="card-head">
              <h2><a href=${`#/jobs?group=${encodeURIComponent(group.name)}`}>${group.name}</a></h2>
              <span class="muted" data-testid="group-counts">running ${group.running}, queued ${group.queued}</span>
            </div>
            <p class="small">Limits: <strong data-testid="limits">${limitsText(group.limits)}</strong></p>
            ${
              may('setGroupLimits')
                ? html`<${LimitsForm}
                    key=${JSON.stringify(group.limits)}
                    testid=${`group-limits-${group.name}`}
                    limits=${group.limits}
                    save=${(limits: NonNullable<typeof group.limits>) => api.setGroupLimits(group.name, limits)}
                    reset=${
                      may('resetGroupLimits')
                        ? {
                            label: 'No limits',
                            run: () => api.resetGroupLimits(group.name),
                            disabled: group.limits === null,
                          }
                        : undefined
                    }
                    onSaved=${groups.reload}
                  />`
                : null
            }
          </section>`,
      )}
    </div>
    ${
      may('setGroupLimits')
        ? html`<section class="card" data-testid="new-group-limits">
            <h2>Limit another group</h2>
            <label
              >Group
              <input
                name="group"
                size="20"
                placeholder="tenant-a"
                value=${newGroup}
                onInput=${(event: Event) => setNewGroup((event.target as HTMLInputElement).value)}
            /></label>
            <${LimitsForm}
              key=${newGroup}
              testid="group-limits-new"
              limits=${null}
              save=${(limits: NonNullable<(typeof list)[number]['limits']>) =>
                api.setGroupLimits(newGroup.trim(), limits)}
              onSaved=${() => {
                setNewGroup('');
                groups.reload();
              }}
            />
          </section>`
        : null
    }`;
}
