import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { html } from 'htm/preact';
import { asProblem, type JobStatus, type KilnError } from './api.js';

export { html };

/** What a page's data source answers: the last value, the last error, and a way to load again now. */
export interface Loaded<T> {
  data: T | null;
  error: KilnError | null;
  reload: () => void;
}

/**
 * Loads `load()` now, again every `everyMs` (0: never), and whenever `key` changes.
 * A load in flight when the key changes or the page goes away is forgotten.
 */
export function useLoad<T>(load: () => Promise<T>, key: string, everyMs = 0): Loaded<T> {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<KilnError | null>(null);
  const [round, setRound] = useState(0);
  const latest = useRef(load);
  latest.current = load;
  useEffect(() => {
    let live = true;
    latest.current().then(
      (value) => {
        if (!live) return;
        setData(value);
        setError(null);
      },
      (failure: unknown) => {
        if (!live) return;
        setError(asProblem(failure));
      },
    );
    const timer = everyMs > 0 ? setTimeout(() => setRound((n) => n + 1), everyMs) : undefined;
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [key, round]);
  useEffect(() => setData(null), [key]);
  const reload = useCallback(() => setRound((n) => n + 1), []);
  return { data, error, reload };
}

/** Runs an action (a button's), keeping its error to show and telling when it is busy. */
export function useAction(): {
  busy: boolean;
  error: KilnError | null;
  run: (action: () => Promise<unknown>, after?: () => void) => void;
} {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<KilnError | null>(null);
  const run = useCallback((action: () => Promise<unknown>, after?: () => void) => {
    setBusy(true);
    setError(null);
    action().then(
      () => {
        setBusy(false);
        after?.();
      },
      (failure: unknown) => {
        setBusy(false);
        setError(asProblem(failure));
      },
    );
  }, []);
  return { busy, error, run };
}

export function StatusBadge({ status }: { status: JobStatus }) {
  return html`<span class=${`badge status-${status}`} data-status=${status}>${status}</span>`;
}

/** An error answer, said plainly; a 401 is left to the token prompt. */
export function Problem({ error }: { error: KilnError | null }) {
  if (error === null || error.status === 401) return null;
  return html`<p class="problem" role="alert">
    ${error.status === 0 ? '' : html`<strong>${error.status} ${error.code}</strong>: `}${error.message}
  </p>`;
}

export function Section({ title, children }: { title: string; children: ComponentChildren }) {
  return html`<section class="card">
    <h2>${title}</h2>
    ${children}
  </section>`;
}

export function Json({ value }: { value: unknown }) {
  return html`<pre class="json">${JSON.stringify(value, null, 2)}</pre>`;
}

export function time(value: string | number | null | undefined): string {
  if (value === null || value === undefined) return '—';
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
}

/** A duration in milliseconds as a person reads it: 850 ms, 3.2 s, 4.5 min. */
export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '—';
  if (ms === 0) return '0';
  if (ms < 1) return `${ms.toFixed(2)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${(ms / 60_000).toFixed(1)} min`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}

export function shortId(id: string): string {
  return id.length > 13 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id;
}

/** Asks before an action that cannot be undone. */
export function confirmed(question: string): boolean {
  return window.confirm(question);
}
