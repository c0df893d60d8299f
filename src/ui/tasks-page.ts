import { api } from './api.js';
import { LimitsForm, limitsText } from './limits-form.js';
import { useMay } from './permissions.js';
import { html, Problem, useLoad } from './view.js';

const REFRESH_MS = 3000;

export function TasksPage() {
  const tasks = useLoad(() => api.tasks(), 'tasks', REFRESH_MS);
  const may = useMay();
  return html`<h1>Tasks</h1>
    <${Problem} error=${tasks.error} />
    <div class="task-list">
      ${(tasks.data ?? []).map(
        (task) =>
          html`<section class="card task" data-task=${task.name}>
            <div class="card-head">
              <h2><a href=${`#/jobs?type=${encodeURIComponent(task.name)}`}>${task.name}</a></h2>
              <span class="muted">running ${task.running}${task.tokens === null ? '' : `, ${task.tokens} tokens`}</span>
            </div>
            <p>${task.description}</p>
            <p class="small">
              Limits in force: <strong data-testid="limits">${limitsText(task.limits)}</strong>
              ${task.override === null ? html`<span class="muted"> (the module's own)</span>` : html`<span class="badge">override</span>`}
            </p>
            ${
              may('setLimits')
                ? html`<${LimitsForm}
                    key=${JSON.stringify(task.limits)}
                    testid=${`limits-${task.name}`}
                    limits=${task.limits}
                    save=${(limits: typeof task.limits) => api.setLimits(task.name, limits)}
                    reset=${
                      may('resetLimits')
                        ? {
                            label: "Module's own",
                            run: () => api.resetLimits(task.name),
                            disabled: task.override === null,
                          }
                        : undefined
                    }
                    onSaved=${tasks.reload}
                  />`
                : null
            }
          </section>`,
      )}
    </div>`;
}
