import { type IncomingMessage, maxHeaderSize, STATUS_CODES, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import fastifySwagger from '@fastify/swagger';
import fastifySwaggerUi from '@fastify/swagger-ui';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import { validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { ApiToken } from '../api-tokens.js';
import type { Scheduler } from '../scheduler/scheduler.js';
import type { TaskRegistry } from '../workers/registry.js';
import { registerAuth } from './auth.js';
import { parseJsonBody } from './json-body.js';
import { swaggerOptions, swaggerUiOptions } from './openapi.js';
import {
  PROBLEM_CONTENT_TYPE,
  type Problem,
  ProblemError,
  problem,
  problemFromError,
  sendProblem,
} from './problems.js';
import { observeAnswer } from './request-log.js';
import { registerBatchRoutes } from './routes/batches.js';
import { registerGroupRoutes } from './routes/groups.js';
import { registerJobRoutes } from './routes/jobs.js';
import { registerQueueRoutes } from './routes/queue.js';
import { registerScheduleRoutes } from './routes/schedules.js';
import { registerStatsRoutes } from './routes/stats.js';
import { registerSystemRoutes } from './routes/system.js';
import { registerUiRoutes } from './routes/ui.js';

/** How often the server looks for requests that have taken longer than the bound to arrive. */
const REQUEST_TIMEOUT_CHECK_MS = 1000;

export interface AppOptions {
  scheduler: Scheduler;
  registry: TaskRegistry;
  apiTokens: readonly ApiToken[];
  maxBodyBytes: number;
  /** How long a request may take to arrive, headers and body; answers may take longer. */
  requestTimeoutMs: number;
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
    // Node counts this until the whole request has arrived, so long polls and event
    // streams (long answers) are not cut; a client that never finishes its headers or
    // body is answered 408 and disconnected.
    requestTimeout: options.requestTimeoutMs,
    // Given to the server's constructor too, which checks headersTimeout against it.
    http: {
      requestTimeout: options.requestTimeoutMs,
      headersTimeout: options.requestTimeoutMs,
      connectionsCheckingInterval: REQUEST_TIMEOUT_CHECK_MS,
      // Answered below with a problem document instead of Node's empty 400.
      requireHostHeader: false,
    },
    // One line per request is logged with its answer (request-log.ts), instead of fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    // While draining, requests still get answers: submissions a 503 problem document.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    routerOptions: { maxParamLength: 200, ignoreTrailingSlash: true },
    clientErrorHandler: clientErrorAnswerer(options.requestTimeoutMs),
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
    const { httpVersionMajor, httpVersionMinor } = request.raw;
    if (request.headers.host === undefined && (httpVersionMajor > 1 || httpVersionMinor >= 1)) {
      sendProblem(reply, problem('validation_error', 'the request has no Host header, which HTTP/1.1 requires'), {
        connection: 'close',
      });
      return;
    }
    done();
  });
  app.server.on('checkExpectation', answerExpectation);

  app.setErrorHandler((error, request, reply) => {
    const { body, headers } = problemFromError(error, request);
    return sendProblem(reply, body, headers);
  });
  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, problem('not_found', `no route ${request.method} ${request.url.split('?')[0]}`)),
  );

  registerAuth(app, options.apiTokens);

  await app.register(fastifySwagger, swaggerOptions(options.apiTokens.length > 0));
  await app.register(fastifySwaggerUi, swaggerUiOptions());

  const typed = app.withTypeProvider<ZodTypeProvider>();
  registerJobRoutes(typed, options.scheduler);
  registerBatchRoutes(typed, options.scheduler);
  registerQueueRoutes(typed, options.scheduler);
  registerGroupRoutes(typed, options.scheduler);
  registerScheduleRoutes(typed, options.scheduler);
  registerStatsRoutes(typed, options.scheduler);
  registerSystemRoutes(typed, options);
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  await registerUiRoutes(app);

  await app.ready();
  return app;
}

/** Malformed HTTP that never reaches a route, or that does not arrive in time, still gets a problem document. */
function clientErrorAnswerer(requestTimeoutMs: number) {
  return (error: Error & { code?: string }, socket: Socket): void => {
    // A socket already writing an answer cannot be given another one in the middle of it.
    const answering = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (!socket.writable || answering?.headersSent === true) {
      socket.destroy(error);
      return;
    }
    const body = clientProblem(error.code ?? 'malformed', requestTimeoutMs);
    const text = JSON.stringify(body);
    const answer = `HTTP/1.1 ${body.status} ${STATUS_CODES[body.status] ?? 'Error'}\r\nContent-Type: ${PROBLEM_CONTENT_TYPE}\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`;
    // A request that timed out is still being read: the socket is closed once the answer
    // is out, or a client that never closes its side would hold it. After a parse error
    // Node closes the socket itself, and closing it sooner could reset the connection
    // before the client has read the answer.
    if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') socket.end(answer, () => socket.destroy());
    else socket.end(answer);
  };
}

/** Node's error codes for requests it cannot read, and how each is answered. */
function clientProblem(code: string, requestTimeoutMs: number): Problem {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return problem('headers_too_large', `the request headers are larger than ${maxHeaderSize} bytes`);
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return problem('request_timeout', `the request did not arrive in full within ${requestTimeoutMs} ms`);
    default:
      return problem('validation_error', `the request is not valid HTTP (${code})`);
  }
}

/** An Expect other than 100-continue, which Node would answer with an empty 417. */
function answerExpectation(request: IncomingMessage, response: ServerResponse): void {
  const text = JSON.stringify(
    problem(
      'expectation_failed',
      `the server cannot meet Expect: ${request.headers.expect ?? ''}; only 100-continue is supported`,
    ),
  );
  response.writeHead(417, {
    'content-type': PROBLEM_CONTENT_TYPE,
    'content-length': Buffer.byteLength(text),
    connection: 'close',
  });
  response.end(text);
}
