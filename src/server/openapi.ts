import { STATUS_CODES } from 'node:http';
import type { FastifyDynamicSwaggerOptions } from '@fastify/swagger';
import type { FastifySwaggerUiOptions } from '@fastify/swagger-ui';
import { jsonSchemaTransform, jsonSchemaTransformObject } from 'fastify-type-provider-zod';
import { PROBLEM_CODES, type ProblemCode } from '../contract/problem-codes.js';
import { problemSchema } from '../contract/schemas.js';
import type { Scope } from '../contract/scopes.js';

/**
 * How the OpenAPI document tells the truth about every route, whoever wrote the route.
 * A route lists its error statuses with `problemResponses(…)` (or `problemSchema` per
 * status); the document then declares each as `application/problem+json` with the
 * status fixed and `code` limited to the codes that status can carry (the table in
 * problems.ts), plus the headers such answers carry: `WWW-Authenticate` on a 401,
 * `Retry-After` on a 429 or 503. A response entry may declare `headers` of its own
 * (`Location` on a 201), which are kept. The scope a route declares (`config.scope`,
 * read by the auth hook too) becomes the operation's `x-kiln-scope`, its bearer
 * security requirement and a line of its description; such an operation answers 401,
 * and 403 unless `read` is enough (every token may read). A request schema's single `examples` entry
 * becomes the body Swagger UI fills in, so it must be a request that succeeds as is.
 */

type ProblemStatus = (typeof PROBLEM_CODES)[ProblemCode];

const PROBLEM_REF = '#/components/schemas/Problem';

/** The problem responses of a route, one per status it can answer with. */
export function problemResponses<S extends ProblemStatus>(...statuses: S[]): Record<S, typeof problemSchema> {
  return Object.fromEntries(statuses.map((status) => [status, problemSchema])) as Record<S, typeof problemSchema>;
}

/** The codes a problem of this status carries. */
export function problemCodesOf(status: number): ProblemCode[] {
  return (Object.keys(PROBLEM_CODES) as ProblemCode[]).filter((code) => PROBLEM_CODES[code] === status);
}

/** Headers every problem of a status carries (API.md, "Errors"). */
const PROBLEM_HEADERS: Partial<Record<number, Record<string, HeaderObject>>> = {
  401: {
    'WWW-Authenticate': { description: 'Always `Bearer realm="kiln"`.', schema: { type: 'string' } },
  },
  429: { 'Retry-After': { description: 'Seconds to wait before trying again.', schema: { type: 'integer' } } },
  503: { 'Retry-After': { description: 'Seconds to wait before trying again.', schema: { type: 'integer' } } },
};

interface HeaderObject {
  description: string;
  schema: Record<string, unknown>;
}

/** A route's schema as @fastify/swagger hands it to the transform: route-declared headers kept, its scope told. */
function transformRoute(secured: boolean): FastifyDynamicSwaggerOptions['transform'] {
  return (input) => {
    const output = jsonSchemaTransform(input);
    const schema = output.schema as Record<string, unknown> & { response?: Record<string, Record<string, unknown>> };
    const scope = (input.route.config as { scope?: Scope } | undefined)?.scope;
    if (scope !== undefined) {
      schema['x-kiln-scope'] = scope;
      const line = `Needs a token with the scope \`${scope}\` (or one that includes it).`;
      schema.description = typeof schema.description === 'string' ? `${schema.description}\n\n${line}` : line;
      if (secured) schema.security = [{ bearer: [scope] }];
    }
    const declared = (input.schema as { response?: Record<string, unknown> } | undefined)?.response;
    const response = schema.response;
    if (declared === undefined || response === undefined) return output;
    for (const [status, entry] of Object.entries(declared)) {
      const headers = (entry as { headers?: unknown }).headers;
      const transformed = response[status];
      if (headers !== undefined && transformed !== undefined) transformed.headers = headers;
    }
    return output;
  };
}

/** The parts of an OpenAPI document the pass below reads and writes. */
interface ResponseObject {
  description?: string;
  content?: Record<string, { schema?: { $ref?: string } }>;
  headers?: Record<string, unknown>;
}
interface OpenApiDocument {
  paths?: Record<string, Record<string, { responses?: Record<string, ResponseObject>; 'x-kiln-scope'?: Scope }>>;
  components?: { schemas?: Record<string, unknown> };
}

/** The whole document, after every route's: problem responses made precise. */
const transformDocument: FastifyDynamicSwaggerOptions['transformObject'] = (input) => {
  const document = jsonSchemaTransformObject(input) as OpenApiDocument;
  const components = (document.components ??= {});
  const schemas = (components.schemas ??= {});
  for (const operations of Object.values(document.paths ?? {})) {
    for (const operation of Object.values(operations)) {
      const scope = operation['x-kiln-scope'];
      if (scope !== undefined) {
        const responses = (operation.responses ??= {});
        const refused = scope === 'read' ? ['401'] : ['401', '403'];
        for (const status of refused) {
          responses[status] ??= { content: { 'application/json': { schema: { $ref: PROBLEM_REF } } } };
        }
      }
      for (const [status, response] of Object.entries(operation.responses ?? {})) {
        if (response.content?.['application/json']?.schema?.$ref !== PROBLEM_REF) continue;
        const code = Number(status);
        const codes = problemCodesOf(code);
        const name = `Problem${status}`;
        schemas[name] ??= {
          allOf: [
            { $ref: PROBLEM_REF },
            { type: 'object', properties: { status: { const: code }, code: { enum: codes } } },
          ],
        };
        response.description = `${STATUS_CODES[code] ?? 'Error'}: ${codes.join(', ')}`;
        response.content = { 'application/problem+json': { schema: { $ref: `#/components/schemas/${name}` } } };
        const headers = PROBLEM_HEADERS[code];
        if (headers !== undefined) response.headers = { ...response.headers, ...headers };
      }
    }
  }
  return document as ReturnType<typeof jsonSchemaTransformObject>;
};

/** @fastify/swagger's options: the document's header and the transforms above. */
export function swaggerOptions(secured: boolean): FastifyDynamicSwaggerOptions {
  return {
    openapi: {
      openapi: '3.1.0',
      // The version of the HTTP contract (docs/API.md, "version 1"), not of the package.
      info: { title: 'Kiln', description: 'A job queue service for CPU-bound work.', version: '1.0.0' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: secured ? [{ bearer: [] }] : [],
    },
    transform: transformRoute(secured),
    transformObject: transformDocument,
  };
}

const LOGO_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40" viewBox="0 0 120 40">
<rect width="40" height="40" rx="8" fill="#b4461e"/><path d="M10 30h20l-4-16h-12z" fill="#ffd9a0"/>
<text x="48" y="28" font-family="sans-serif" font-size="22" font-weight="700" fill="#ffffff">Kiln</text></svg>`;

const FAVICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="32" height="32" viewBox="0 0 40 40">
<rect width="40" height="40" rx="8" fill="#b4461e"/><path d="M10 30h20l-4-16h-12z" fill="#ffd9a0"/></svg>`;

/** The /docs page: Kiln's name, logo and icon instead of the framework's. */
export function swaggerUiOptions(): FastifySwaggerUiOptions {
  return {
    routePrefix: '/docs',
    logo: { type: 'image/svg+xml', content: LOGO_SVG, href: '/docs', target: '_self' },
    theme: {
      title: 'Kiln API',
      favicon: [{ filename: 'kiln.svg', rel: 'icon', sizes: 'any', type: 'image/svg+xml', content: FAVICON_SVG }],
    },
  };
}
