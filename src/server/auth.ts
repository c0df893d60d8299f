import { timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { type ApiToken, sha256 } from '../api-tokens.js';
import { grants, type Scope } from '../contract/scopes.js';
import { problem, sendProblem } from './problems.js';

/**
 * Who may call what (API.md, "Authentication"). Each route declares the scope it needs
 * in its options (`config: { scope }`); this hook, the OpenAPI document (and through it
 * the client and the dashboard) and the request log read that declaration and nothing
 * else. A route under /v1 or /metrics that declares none stops the server at start, so
 * no reader is left to guess what such a route needs.
 */

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The scope a token needs for this route: required under /v1 and /metrics; a route without one is open. */
    scope?: Scope;
  }
  interface FastifyRequest {
    /** The token the request was let in with (null: none, the API is open or the route is). */
    apiToken: Pick<ApiToken, 'name' | 'scopes'> | null;
  }
}

/** Whether a route is one tokens guard: the API under /v1, and /metrics. */
function guarded(url: string): boolean {
  return url === '/v1' || url.startsWith('/v1/') || url === '/metrics';
}

/** The scope the request's route needs, or null for an open route (or no route: a 404 follows). */
export function scopeOf(request: FastifyRequest): Scope | null {
  if (request.routeOptions.url === undefined) return null;
  return request.routeOptions.config.scope ?? null;
}

/** The route as API.md and the OpenAPI document write it: `/v1/jobs/{id}/cancel`. */
export function operationOf(request: FastifyRequest): string {
  const route = (request.routeOptions.url ?? request.url.split('?')[0] ?? '').replace(/:(\w+)/g, '{$1}');
  return `${request.method} ${route}`;
}

export function registerAuth(app: FastifyInstance, tokens: readonly ApiToken[]): void {
  app.decorateRequest('apiToken', null);
  // Checked with or without tokens, so that a route missing its scope fails every test that starts a server.
  app.addHook('onRoute', (route) => {
    if (route.config?.scope === undefined && guarded(route.url)) {
      throw new Error(`${String(route.method)} ${route.url} declares no scope: give it config: { scope }`);
    }
  });
  if (tokens.length === 0) return;
  app.addHook('onRequest', async (request, reply) => {
    // Decided by the route the request matched, not by its raw URL: the router decodes
    // percent-escapes and accepts absolute-form targets, which a prefix test would miss.
    const needed = scopeOf(request);
    if (needed === null) return;
    const header = request.headers.authorization;
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
    const token = match?.[1] === undefined ? null : find(tokens, sha256(match[1]));
    if (token === null) {
      return sendProblem(
        reply,
        problem(
          'unauthorized',
          header === undefined ? 'the request has no bearer token' : 'the bearer token is not valid',
        ),
        { 'www-authenticate': 'Bearer realm="kiln"' },
      );
    }
    // Name and scopes only: the digest stays here.
    request.apiToken = { name: token.name, scopes: token.scopes };
    if (!grants(token.scopes, needed)) {
      return sendProblem(
        reply,
        problem(
          'forbidden',
          `${operationOf(request)} needs the scope ${needed}; the token "${token.name}" has ${token.scopes.join(', ')}`,
        ),
      );
    }
  });
}

/** The token whose digest is `presented`; every digest is compared, in constant time. */
function find(tokens: readonly ApiToken[], presented: Buffer): ApiToken | null {
  let found: ApiToken | null = null;
  for (const token of tokens) {
    if (timingSafeEqual(presented, token.digest) && found === null) found = token;
  }
  return found;
}
