import { type TenantId } from '../shapes/idempotency-options.interface.js';
import { resolveIdempotencyOptions, resolveRouteOptions } from '../idempotency-options.js';
import { type RawKey } from '../decisions/key-source.js';
import { type KeyReading, readKey, readTenant, type TenantReading } from './read-scope.js';

const base = resolveIdempotencyOptions({ globalKeys: true }).route;
const required = resolveRouteOptions({}, base);
const optional = resolveRouteOptions({ required: false }, base);
const byBody = resolveRouteOptions({ keyFrom: { body: 'key' } }, base);

/** The reading with a refusal by its code and message. */
function shape(reading: KeyReading | TenantReading) {
  return reading.kind === 'refused'
    ? { kind: 'refused', code: reading.error.code, message: reading.error.message }
    : reading;
}

describe('readKey (the key its source gave: a key, none, or a refusal)', () => {
  it.each<[string, RawKey, typeof required, ReturnType<typeof shape>]>([
    ['a key', 'k1', required, { kind: 'key', key: 'k1' }],
    ['the draft’s quoted key, unquoted', '"k1"', required, { kind: 'key', key: 'k1' }],
    ['one key sent once, as a list', ['k1'], required, { kind: 'key', key: 'k1' }],
    ['no key on an optional route', undefined, optional, { kind: 'keyless' }],
    [
      'no key on a route that requires one',
      undefined,
      required,
      {
        kind: 'refused',
        code: 'key_missing',
        message:
          'The Idempotency-Key header is required on this route; send one key per operation.',
      },
    ],
    [
      'an invalid key on an optional route: refused, not run without one',
      '',
      optional,
      {
        kind: 'refused',
        code: 'key_invalid',
        message: 'The Idempotency-Key header is invalid: it is empty.',
      },
    ],
    [
      'a key sent twice',
      ['k1', 'k1'],
      required,
      {
        kind: 'refused',
        code: 'key_invalid',
        message: 'The Idempotency-Key header is invalid: it was sent more than once.',
      },
    ],
    [
      'a value its source found invalid, named where the route reads it',
      { invalid: 'it is an object, not a string' },
      byBody,
      {
        kind: 'refused',
        code: 'key_invalid',
        message: 'The key field of the body is invalid: it is an object, not a string.',
      },
    ],
  ])('%s', (_name, given, route, expected) => {
    expect(shape(readKey(given, route))).toEqual(expected);
  });
});

describe('readTenant (the resolver’s tenant: an id, or a refusal)', () => {
  const request = { method: 'POST', url: '/orders', headers: {} };
  const refused = (rule: string): ReturnType<typeof shape> => ({
    kind: 'refused',
    code: 'tenant_invalid',
    message:
      `The request carries no valid tenant id: ${rule}. A tenant id is an integer, or 1 to ` +
      '255 characters, not all white space, without control characters or lone surrogates; ' +
      'idempotency keys are scoped per tenant.',
  });

  it.each<[string, TenantId, ReturnType<typeof shape>]>([
    ['a string', 'acme', { kind: 'tenant', tenantId: 'acme' }],
    ['an integer, as its digits', 42, { kind: 'tenant', tenantId: '42' }],
    ['an empty string', '', refused('it is empty')],
    [
      'a number that is not a safe integer',
      1.5,
      refused('it is a number that is not a safe integer'),
    ],
    ['only white space', '  ', refused('it is only white space')],
    [
      'a lone surrogate',
      'acme\ud800',
      refused(
        'it holds a lone surrogate (it is not well-formed Unicode), which would be stored as ' +
          'U+FFFD, the same id as another tenant',
      ),
    ],
  ])('%s', (_name, resolved, expected) => {
    expect(shape(readTenant(request, () => resolved))).toEqual(expected);
  });
});
