import { useState } from 'preact/hooks';
import { api, type Task, type TaskLimits } from './api.js';
import { useMay } from './permissions.js';
import { duration, html, Problem, useAction, useLoad } from './view.js';

const REFRESH_MS = 3000;

function limitsText(limits: TaskLimits): string {
  const parts: string[] = [];
  if (limits.concurrency !== null) parts.push(`${limits.concurrency} at once`);
  if (limits.rateLimit !== null) parts.push(`${limits.rateLimit.max} per ${duration(limits.rateLimit.perMs)}`);
  return parts.length === 0 ? 'none' : parts.join(', ');
}

/** An empty field means "no such limit" (null); the form always sends both fields. */
function LimitsForm({ task, onSaved, canReset }: { task: Task; onSaved: () => void; canReset: boolean }) {
  const [concurrency, setConcurrency] = useState(String(task.limits.concurrency ?? ''));
  const [max, setMax] = useState(String(task.limits.rateLimit?.max ?? ''));
  const [perMs, setPerMs] = useState(String(task.limits.rateLimit?.perMs ?? ''));
  const action = useAction();
  const save = (event: Event) => {
    event.preventDefault();
    const body: TaskLimits = {
      concurrency: concurrency.trim() === '' ? null : Number(concurrency),
      rateLimit: max.trim() === '' && perMs.trim() === '' ? null : { max: Number(max), perMs: Number(perMs) },
    };
    action.run(() => api.setLimits(task.name, body), onSaved);
  };
  const value = (set: (v: string) => void) => (event: Event) => set((event.target as HTMLInputElement).value);
  return html`<form class="limits-form" onSubmit=${save} data-testid=${`limits-${task.name}`}>
    <label
      >At once
      <input
        name="concurrency"
        inputmode="numeric"
        size="5"
        placeholder="no limit"
        value=${concurrency}
        onInput=${value(setConcurrency)}
    /></label>
    <label
      >Starts <input name="max" inputmode="numeric" size="5" placeholder="—" value=${max} onInput=${value(setMax)}
    /></label>
    <label
      >per ms
      <input name="perMs" inputmode="numeric" size="7" placeholder="—" value=${perMs} onInput=${value(setPerMs)}
    /></label>
    <button type="submit" disabled=${action.busy}>Set</button>
    ${
      canReset
        ? html`<button
            type="button"
            class="secondary"
            disabled=${action.busy || task.override === null}
            onClick=${() => action.run(() => api.resetLimits(task.name), onSaved)}
          >
            Module's own
          </button>`
        : null
    }
    <${Problem} error=${action.error} />
  </form>`;
}

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
                    task=${task}
                    onSaved=${tasks.reload}
                    canReset=${may('resetLimits')}
                  />`
                : null
            }
          </section>`,
      )}
    </div>`;
}
