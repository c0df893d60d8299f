import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { FastifyRequest } from 'fastify';
import { KILN_ERROR_CODES, KilnError } from '../../src/scheduler/errors.js';
import { PROBLEM_CODES, type ProblemCode } from '../../src/contract/problem-codes.js';
import { problem, problemFromError } from '../../src/server/problems.js';
import { type DocumentedCode, documentedProblemCodes } from '../support/api-doc.js';

const logged: unknown[] = [];
const request = { log: { error: (obj: unknown) => logged.push(obj) } } as unknown as FastifyRequest;

/**
 * Codes docs/API.md documents for features that are not built yet, so the server
 * cannot produce them: code → the missing feature. Keep it to what is really missing;
 * a code listed here that the server produces, or that the page does not document,
 * fails the test.
 */
const DOCUMENTED_NOT_YET_PRODUCED = new Map<string, string>();

const documented: DocumentedCode[] = documentedProblemCodes();

/** A code as docs/API.md documents it, "section: status" per row. */
function documentedAs(code: string): string[] {
  return documented.filter((row) => row.code === code).map((row) => `${row.section}: ${row.status}`);
}

/** The one status docs/API.md gives `code`, or null when it gives none or several. */
function documentedStatus(code: string): number | null {
  const statuses = new Set(documented.filter((row) => row.code === code).map((row) => row.status));
  return statuses.size === 1 ? ([...statuses][0] ?? null) : null;
}

describe('problem codes in the code and in docs/API.md', () => {
  it('reads the Errors table of docs/API.md', () => {
    const errors = documented.filter((row) => row.section === 'Errors');
    assert.ok(errors.length >= 10, `the Errors table has ${errors.length} rows: ${JSON.stringify(errors)}`);
    assert.ok(errors.some((row) => row.code === 'validation_error' && row.status === 400));
  });

  it('documents every code the server produces, with the status it answers', () => {
    const wrong = Object.entries(PROBLEM_CODES)
      .filter(([code, status]) => documentedStatus(code) !== status)
      .map(
        ([code, status]) => `${code}: the server answers ${status}, docs/API.md has [${documentedAs(code).join(', ')}]`,
      );
    assert.deepEqual(wrong, []);
  });

  it('produces every documented code with the documented status, and no code of a feature not built yet', () => {
    const wrong: string[] = [];
    for (const row of documented) {
      const produced = Object.hasOwn(PROBLEM_CODES, row.code) ? problem(row.code as ProblemCode, 'x').status : null;
      const notBuilt = DOCUMENTED_NOT_YET_PRODUCED.get(row.code);
      const expected = notBuilt === undefined ? row.status : null;
      if (produced !== expected) {
        const documentedFor = notBuilt === undefined ? '' : ` for ${notBuilt}, listed as not built yet`;
        wrong.push(
          `${row.code}: docs/API.md (${row.section}) gives ${row.status}${documentedFor}; the server answers ${produced ?? 'never'}`,
        );
      }
    }
    for (const code of DOCUMENTED_NOT_YET_PRODUCED.keys()) {
      if (documentedAs(code).length === 0) wrong.push(`${code}: listed as not built yet, but not in docs/API.md`);
    }
    assert.deepEqual(wrong, []);
  });
});

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

  it('maps every scheduler error code to the status docs/API.md gives it', () => {
    for (const code of KILN_ERROR_CODES) {
      const { body, headers } = problemFromError(new KilnError(code, `a ${code}`, { retryAfterSeconds: 3 }), request);
      assert.equal(body.code, code);
      assert.notEqual(documentedStatus(code), null, `${code} has one status in docs/API.md`);
      assert.equal(body.status, documentedStatus(code), code);
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
