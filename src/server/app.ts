import { createHash, timingSafeEqual } from 'node:crypto';
import type { Socket } from 'node:net';
import fastifySwagger from '@fastify/swagger';
import fastifySwaggerUi from '@fastify/swagger-ui';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import { validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Scheduler } from '../scheduler/scheduler.js';
import type { TaskRegistry } from '../workers/registry.js';
import { parseJsonBody } from './json-body.js';
import { swaggerOptions, swaggerUiOptions } from './openapi.js';
import { ProblemError, problem, problemFromError, sendProblem } from './problems.js';
import { observeAnswer } from './request-log.js';
import { registerJobRoutes } from './routes/jobs.js';
import { registerQueueRoutes } from './routes/queue.js';
import { registerScheduleRoutes } from './routes/schedules.js';
import { registerStatsRoutes } from './routes/stats.js';
import { registerSystemRoutes } from './routes/system.js';
import { registerUiRoutes } from './routes/ui.js';

export interface AppOptions {
  scheduler: Scheduler;
  registry: TaskRegistry;
  apiTokens: string[];
  maxBodyBytes: number;
  /** Answers whether the store responds (for /ready). */
  storeHealthy: () => Promise<boolean>;
  logger?: FastifyBaseLogger;
}

export type KilnApp = FastifyInstance;

/** The HTTP face of Kiln: routes, auth, problem documents and the OpenAPI document. */
export async function buildApp(options: AppOptions): Promise<KilnApp> {
  const app = Fastify({
    ...(options.logger === undefined ? { logger: false } : { loggerInstance: options.logger }),
    bodyLimit: options.maxBodyBytes,
    // One line per request is logged below, with its answer, instead of fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    // While draining, requests still get answers: submissions a 503 problem document.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    routerOptions: { maxParamLength: 200, ignoreTrailingSlash: true },
    clientErrorHandler: answerClientError,
    // Bad URL encoding and the like are answered here, before any route runs.
    frameworkErrors: (error, request, reply) => {
      const { body, headers } = problemFromError(error, request);
      sendProblem(reply, body, headers);
    },
  });
  app.setValidatorCompiler(validatorCompiler);
  // Responses are plain data the handlers shape themselves; the zod response schemas
  // document them in OpenAPI without costing a validation pass per answer.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));

  // An action with an empty JSON body (POST /cancel with a Content-Type) is fine.
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const encoding = request.headers['content-encoding']?.trim().toLowerCase();
    if (encoding !== undefined && encoding !== '' && encoding !== 'identity') {
      done(
        new ProblemError(
          'unsupported_media_type',
          `Content-Encoding ${encoding} is not accepted; send the body uncompressed`,
        ),
        undefined,
      );
      return;
    }
    const text = typeof body === 'string' ? body : body.toString('utf8');
    if (text.trim() === '') {
      done(null, undefined);
      return;
    }
    try {
      done(null, parseJsonBody(text));
    } catch (error) {
      done(error as Error, undefined);
    }
  });

  // Bodies are JSON only: anything else is a 415.
  app.removeContentTypeParser(['text/plain']);

  app.addHook('onRequest', (request, reply, done) => {
    observeAnswer(request, reply, options.scheduler);
    done();
  });

  app.setErrorHandler((error, request, reply) => {
    const { body, headers } = problemFromError(error, request);
    return sendProblem(reply, body, headers);
  });
  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, problem('not_found', `no route ${request.method} ${request.url.split('?')[0]}`)),
  );

  if (options.apiTokens.length > 0) {
    const digests = options.apiTokens.map((token) => sha256(token));
    app.addHook('onRequest', async (request, reply) => {
      // Decided by the route the request matched, not by its raw URL: the router decodes
      // percent-escapes and accepts absolute-form targets, which a prefix test would miss.
      const route = request.routeOptions.url;
      if (route === undefined || !(route.startsWith('/v1/') || route === '/metrics')) return;
      const header = request.headers.authorization;
      const match = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
      const presented = match?.[1] === undefined ? null : sha256(match[1]);
      let ok = false;
      for (const digest of digests) {
        if (presented !== null && timingSafeEqual(presented, digest)) ok = true;
      }
      if (!ok) {
        return sendProblem(
          reply,
          problem(
            'unauthorized',
            header === undefined ? 'the request has no bearer token' : 'the bearer token is not valid',
          ),
          { 'www-authenticate': 'Bearer realm="kiln"' },
        );
      }
    });
  }

  await app.register(fastifySwagger, swaggerOptions(options.apiTokens.length > 0));
  await app.register(fastifySwaggerUi, swaggerUiOptions());

  const typed = app.withTypeProvider<ZodTypeProvider>();
  registerJobRoutes(typed, options.scheduler);
  registerQueueRoutes(typed, options.scheduler);
  registerScheduleRoutes(typed, options.scheduler);
  registerStatsRoutes(typed, options.scheduler);
  registerSystemRoutes(typed, options);
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  await registerUiRoutes(app);

  await app.ready();
  return app;
}

function sha256(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

/** Malformed HTTP that never reaches a route still gets a problem document. */
function answerClientError(error: Error & { code?: string }, socket: Socket): void {
  if (!socket.writable) {
    socket.destroy(error);
    return;
  }
  const tooLarge = error.code === 'HPE_HEADER_OVERFLOW';
  const body = JSON.stringify(
    tooLarge
      ? problem('validation_error', 'the request headers are too large')
      : problem('validation_error', `the request is not valid HTTP (${error.code ?? 'malformed'})`),
  );
  socket.end(
    `HTTP/1.1 400 Bad Request\r\nContent-Type: application/problem+json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}
