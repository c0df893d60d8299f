import { useState } from 'preact/hooks';
import type { TaskLimits } from './api.js';
import { duration, html, Problem, useAction } from './view.js';

/** Limits as a person reads them: "2 at once, 10 per 1.0 s", or "none". */
export function limitsText(limits: TaskLimits | null): string {
  if (limits === null) return 'none';
  const parts: string[] = [];
  if (limits.concurrency !== null) parts.push(`${limits.concurrency} at once`);
  if (limits.rateLimit !== null) parts.push(`${limits.rateLimit.max} per ${duration(limits.rateLimit.perMs)}`);
  return parts.length === 0 ? 'none' : parts.join(', ');
}

export interface LimitsFormProps {
  /** What `data-testid` names the form. */
  testid: string;
  limits: TaskLimits | null;
  save: (limits: TaskLimits) => Promise<unknown>;
  /** The second button (back to a task module's own, or no limits for a group); absent: none shown. */
  reset?: { label: string; run: () => Promise<unknown>; disabled: boolean };
  onSaved: () => void;
}

/** The limits of a task or a group. An empty field means "no such limit" (null); the form always sends both fields. */
export function LimitsForm({ testid, limits, save, reset, onSaved }: LimitsFormProps) {
  const [concurrency, setConcurrency] = useState(String(limits?.concurrency ?? ''));
  const [max, setMax] = useState(String(limits?.rateLimit?.max ?? ''));
  const [perMs, setPerMs] = useState(String(limits?.rateLimit?.perMs ?? ''));
  const action = useAction();
  const submit = (event: Event) => {
    event.preventDefault();
    const body: TaskLimits = {
      concurrency: concurrency.trim() === '' ? null : Number(concurrency),
      rateLimit: max.trim() === '' && perMs.trim() === '' ? null : { max: Number(max), perMs: Number(perMs) },
    };
    action.run(() => save(body), onSaved);
  };
  const value = (set: (v: string) => void) => (event: Event) => set((event.target as HTMLInputElement).value);
  return html`<form class="limits-form" onSubmit=${submit} data-testid=${testid}>
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
      reset === undefined
        ? null
        : html`<button
            type="button"
            class="secondary"
            disabled=${action.busy || reset.disabled}
            onClick=${() => action.run(reset.run, onSaved)}
          >
            ${reset.label}
          </button>`
    }
    <${Problem} error=${action.error} />
  </form>`;
}
