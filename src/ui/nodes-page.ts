import { api } from './api.js';
import { html, Problem, time, useLoad } from './view.js';

const REFRESH_MS = 5000;

/** The servers sharing the store (several with PostgreSQL; this one alone with SQLite). */
export function NodesPage() {
  const nodes = useLoad(() => api.nodes(), 'nodes', REFRESH_MS);
  const list = nodes.data ?? [];
  return html`<h1>Nodes</h1>
    <${Problem} error=${nodes.error} />
    ${
      list.length === 1
        ? html`<p class="muted">
            One server. With <code>KILN_STORE=postgres://…</code> every server sharing the database is listed.
          </p>`
        : null
    }
    <div class="table-wrap">
      <table data-testid="node-table">
        <thead>
          <tr>
            <th>Node</th>
            <th>Host</th>
            <th class="num">PID</th>
            <th>Version</th>
            <th class="num">Threads busy</th>
            <th>Started</th>
            <th>Last seen</th>
          </tr>
        </thead>
        <tbody>
          ${list.map(
            (node) =>
              html`<tr>
                <td class="mono">${node.id}</td>
                <td>${node.host}</td>
                <td class="num">${node.pid}</td>
                <td>${node.version}</td>
                <td class="num">${node.busy} / ${node.threads}</td>
                <td class="nowrap">${time(node.startedAt)}</td>
                <td class="nowrap">${time(node.lastSeenAt)}</td>
              </tr>`,
          )}
        </tbody>
      </table>
    </div>`;
}
