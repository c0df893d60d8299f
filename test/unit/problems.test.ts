import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { FastifyRequest } from 'fastify';
import { KILN_ERROR_CODES, KilnError } from '../../src/scheduler/errors.js';
import { PROBLEM_CODES, problemFromError } from '../../src/server/problems.js';

const logged: unknown[] = [];
const request = { log: { error: (obj: unknown) => logged.push(obj) } } as unknown as FastifyRequest;

describe('problemFromError', () => {
  it('turns an unexpected error into a 500 internal_error that leaks neither message nor stack', () => {
    const secret = new Error('password=hunter2 at /srv/kiln/secret.ts:10');
    const { body } = problemFromError(secret, request);
    assert.equal(body.status, 500);
    assert.equal(body.code, 'internal_error');
    assert.equal(body.title, 'Internal Server Error');
    assert.doesNotMatch(JSON.stringify(body), /hunter2|secret\.ts|at /);
    assert.deepEqual(logged, [{ err: secret }]);
  });

  it('maps every scheduler error code to its documented status', () => {
    for (const code of KILN_ERROR_CODES) {
      const { body, headers } = problemFromError(new KilnError(code, `a ${code}`, { retryAfterSeconds: 3 }), request);
      assert.equal(body.code, code);
      assert.equal(body.status, PROBLEM_CODES[code]);
      assert.equal(body.detail, `a ${code}`);
      assert.equal(headers['retry-after'], '3');
    }
  });

  it('names the fields of a validation failure', () => {
    const error = Object.assign(new Error('bad'), {
      validation: [
        { instancePath: '/payload/iterations', message: 'Too big' },
        { instancePath: '', keyword: 'unrecognized_keys', params: { keys: ['colour', 'size'] }, message: 'x' },
      ],
      validationContext: 'body',
    });
    const { body } = problemFromError(error, request);
    assert.equal(body.code, 'validation_error');
    assert.deepEqual(body.errors, [
      { path: 'payload.iterations', message: 'Too big' },
      { path: 'colour', message: 'is not a known field' },
      { path: 'size', message: 'is not a known field' },
    ]);
  });
});
