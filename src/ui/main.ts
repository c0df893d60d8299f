import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import {
  api,
  forgetToken,
  KilnError,
  loadPermissions,
  onUnauthorized,
  type Permissions,
  saveToken,
  storedToken,
} from './api.js';
import { BatchPage } from './batch-page.js';
import { JobPage } from './job-page.js';
import { JobsPage } from './jobs-page.js';
import { NodesPage } from './nodes-page.js';
import { OverviewPage } from './overview-page.js';
import { NO_PERMISSIONS, PermissionsContext } from './permissions.js';
import { SchedulesPage } from './schedules-page.js';
import { TasksPage } from './tasks-page.js';
import { GroupsPage } from './groups-page.js';
import { html } from './view.js';

/** Where the page is: the part of the location hash before `?`, and its query. */
interface Route {
  path: string;
  query: URLSearchParams;
}

function currentRoute(): Route {
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path = '/', search = ''] = hash.split('?', 2);
  return { path, query: new URLSearchParams(search) };
}

function useRoute(): Route {
  const [route, setRoute] = useState(currentRoute);
  useEffect(() => {
    const onChange = () => setRoute(currentRoute());
    window.addEventListener('hashchange', onChange);
    return () => window.removeEventListener('hashchange', onChange);
  }, []);
  return route;
}

const NAV = [
  { href: '#/', label: 'Overview', match: (path: string) => path === '/' },
  { href: '#/jobs', label: 'Jobs', match: (path: string) => path.startsWith('/jobs') || path.startsWith('/batches') },
  { href: '#/tasks', label: 'Tasks', match: (path: string) => path === '/tasks' },
  { href: '#/groups', label: 'Groups', match: (path: string) => path === '/groups' },
  { href: '#/schedules', label: 'Schedules', match: (path: string) => path === '/schedules' },
  { href: '#/nodes', label: 'Nodes', match: (path: string) => path === '/nodes' },
];

function Page({ route }: { route: Route }) {
  const { path, query } = route;
  if (path === '/') return html`<${OverviewPage} />`;
  if (path === '/jobs') return html`<${JobsPage} query=${query} />`;
  if (path.startsWith('/jobs/')) return html`<${JobPage} id=${decodeURIComponent(path.slice(6))} />`;
  if (path.startsWith('/batches/')) return html`<${BatchPage} id=${decodeURIComponent(path.slice(9))} />`;
  if (path === '/tasks') return html`<${TasksPage} />`;
  if (path === '/groups') return html`<${GroupsPage} />`;
  if (path === '/schedules') return html`<${SchedulesPage} />`;
  if (path === '/nodes') return html`<${NodesPage} />`;
  return html`<p class="problem">No page ${path}. <a href="#/">Back to the overview</a>.</p>`;
}

/**
 * Shown when the server answers 401: the token is kept in sessionStorage, for this
 * tab only, and checked with one request before the pages load again.
 */
function TokenPrompt({ onAccepted }: { onAccepted: () => void }) {
  const [token, setToken] = useState('');
  const [message, setMessage] = useState<string | null>(
    storedToken() === null ? null : 'The server did not accept the token.',
  );
  const submit = (event: Event) => {
    event.preventDefault();
    saveToken(token.trim());
    api.queue().then(onAccepted, (error: unknown) => {
      forgetToken();
      setMessage(
        error instanceof KilnError && error.status === 401
          ? 'The server did not accept the token.'
          : `The server could not be asked: ${String(error)}`,
      );
    });
  };
  return html`<form class="card token-prompt" data-testid="token-prompt" onSubmit=${submit}>
    <h2>API token</h2>
    <p>
      This Kiln asks for a bearer token (one of <code>KILN_API_TOKENS</code>). It is kept for this browser tab only.
    </p>
    <label
      >Token
      <input
        type="password"
        name="token"
        autocomplete="off"
        required
        value=${token}
        onInput=${(event: Event) => setToken((event.target as HTMLInputElement).value)}
    /></label>
    <button type="submit">Sign in</button>
    ${message === null ? null : html`<p class="problem" role="alert">${message}</p>`}
  </form>`;
}

function App() {
  const route = useRoute();
  const [needToken, setNeedToken] = useState(false);
  // Bumped when a token is accepted: the page is mounted afresh and loads again.
  const [session, setSession] = useState(0);
  // What the token may do, asked again whenever a token is accepted.
  const [permissions, setPermissions] = useState<Permissions>(NO_PERMISSIONS);
  // The token is gone (forgotten, or refused): so is what it could do, before the next
  // token's page renders, which would otherwise show the old token's buttons until its
  // own permissions arrive.
  const askForToken = () => {
    setPermissions(NO_PERMISSIONS);
    setNeedToken(true);
  };
  useEffect(() => onUnauthorized(askForToken), []);
  useEffect(() => {
    if (needToken) return undefined;
    let current = true;
    loadPermissions().then(
      (loaded) => current && setPermissions(loaded),
      // Unknown: every action is shown, and the server refuses what the token may not do.
      () => current && setPermissions({ token: null, scopes: [], may: () => true }),
    );
    return () => {
      current = false;
    };
  }, [session, needToken]);
  const signOut = () => {
    forgetToken();
    askForToken();
  };
  return html`<header class="top">
      <a class="brand" href="#/">Kiln</a>
      <nav>
        ${NAV.map(
          (item) => html`<a href=${item.href} class=${item.match(route.path) ? 'active' : ''}>${item.label}</a>`,
        )}
      </nav>
      ${
        permissions.token === null || needToken
          ? null
          : html`<span class="token-name" data-testid="token-name" title="the token's scopes"
              >${permissions.token} (${permissions.scopes.join(', ')})</span
            >`
      }
      ${
        storedToken() === null || needToken
          ? null
          : html`<button class="link sign-out" onClick=${signOut}>Forget token</button>`
      }
    </header>
    <main>
      ${
        needToken
          ? html`<${TokenPrompt}
              onAccepted=${() => {
                setNeedToken(false);
                setSession((n) => n + 1);
              }}
            />`
          : html`<${PermissionsContext.Provider} value=${permissions}>
              <${Page} key=${`${session}:${route.path}`} route=${route} />
            <//>`
      }
    </main>`;
}

const root = document.getElementById('app');
if (root !== null) render(html`<${App} />`, root);
