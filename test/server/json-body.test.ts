import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KilnError } from '../../src/scheduler/errors.js';
import { parseJsonBody } from '../../src/server/json-body.js';

/** The issues parseJsonBody refuses `text` with ([] when it accepts it). */
function refusal(text: string): Array<{ path: string; message: string }> {
  try {
    parseJsonBody(text);
    return [];
  } catch (error) {
    assert.ok(error instanceof KilnError, String(error));
    assert.equal(error.code, 'validation_error');
    return error.issues;
  }
}

const paths = (text: string) => refusal(text).map((issue) => issue.path);

describe('parseJsonBody', () => {
  it('names the path of a number that would change, through arrays, nested arrays and escaped keys', () => {
    assert.deepEqual(paths('[[1,2],[3,1e999]]'), ['1.1']);
    assert.deepEqual(paths('{"a":[{"b":0},{"b":1e-999}]}'), ['a.1.b']);
    assert.deepEqual(paths('{"k\\"ey":{"x\\\\":9007199254740993}}'), ['k"ey.x\\']);
    assert.deepEqual(paths('1e400'), ['body']);
    assert.deepEqual(paths('{"a": 1e400 , "b" : -1E+400,"c":[ 2e-400 ]}'), ['a', 'b', 'c.0']);
  });

  it('reads past strings that hold what looks like numbers, quotes and brackets', () => {
    assert.deepEqual(refusal('{"s":"[:1e999, \\"x\\": 9007199254740993]","n":0,"t":[true,false,null]}'), []);
    assert.deepEqual(paths('{"s":"\\\\","n":[1e999]}'), ['n.0']);
  });

  it('accepts numbers that survive the trip, however written', () => {
    for (const literal of [
      '0',
      '-0',
      '0e-999',
      '0.000e5',
      '5e-324',
      '1.7976931348623157e308',
      '9007199254740992',
      '-9007199254740992',
      '1e21',
      '18014398509481984',
      '0.1',
      '3.141592653589793238462643383279',
    ]) {
      assert.deepEqual(refusal(`{"n":${literal}}`), [], literal);
    }
  });

  it('refuses what changes, with what it would become', () => {
    assert.deepEqual(refusal('{"n":1.8e308}'), [
      { path: 'n', message: 'the number 1.8e308 is too large to store (it would become Infinity)' },
    ]);
    assert.deepEqual(refusal('{"n":-2e-324}'), [
      { path: 'n', message: 'the number -2e-324 is too small to store (it would become 0)' },
    ]);
    assert.deepEqual(refusal('{"n":18014398509481985}'), [
      {
        path: 'n',
        message:
          'the number 18014398509481985 cannot be stored exactly (it would become 18014398509481984); send it as a string',
      },
    ]);
    const long = `1${'0'.repeat(400)}`;
    assert.match(refusal(`{"n":${long}}`)[0]?.message ?? '', /^the number 10{23}…0{8} \(401 characters\) is too large/);
  });

  it('refuses a large number in any notation unless it is exact or the shortest that reads back the same', () => {
    for (const literal of [
      '9.007199254740993e15',
      '9007199254740993.0',
      '1152921504606846977',
      '1152921504606846980',
      '99999999999999991611393',
    ]) {
      assert.match(refusal(`{"n":${literal}}`)[0]?.message ?? '', /cannot be stored exactly/, literal);
    }
  });

  it('refuses __proto__ and constructor.prototype keys wherever they are', () => {
    assert.deepEqual(refusal('{"a":[{"__proto__":1}],"constructor":{"prototype":{}}}'), [
      { path: 'constructor.prototype', message: 'the key constructor.prototype is not accepted' },
      { path: 'a.0.__proto__', message: 'the key __proto__ is not accepted' },
    ]);
    assert.deepEqual(refusal('{"constructor":{"name":"x"},"text":"__proto__ constructor \\u0041"}'), []);
  });

  it('refuses bodies nested deeper than 64 levels', () => {
    assert.deepEqual(paths(`${'['.repeat(65)}${']'.repeat(65)}`), ['body']);
    assert.deepEqual(refusal(`${'['.repeat(64)}${']'.repeat(64)}`), []);
  });

  it('throws SyntaxError for what is not JSON', () => {
    assert.throws(() => parseJsonBody('{"a":'), SyntaxError);
  });
});
