import { type IdempotencyRequest } from '../shapes/idempotency-options.interface.js';
import { resolveIdempotencyOptions, resolveRouteOptions } from '../idempotency-options.js';
import { type GraphqlField } from './graphql-field.js';
import { type FieldReading, fieldFingerprint, readField } from './read-field.js';

const base = resolveIdempotencyOptions({ globalKeys: true }).route;
const required = resolveRouteOptions({}, base);
const optional = resolveRouteOptions({ required: false }, base);
const byArg = resolveRouteOptions({ keyFrom: { arg: 'idempotencyKey' } }, base);
const tenant = (request: IdempotencyRequest) => request.headers['x-tenant'] as string;

const field = (
  headers: Record<string, string>,
  args: Record<string, unknown> = { amount: 5 },
  responseKey = 'createTransfer',
): GraphqlField => ({
  operation: 'mutation',
  root: true,
  fieldName: 'createTransfer',
  responseKey,
  args,
  request: { method: 'POST', url: '/graphql', headers: { 'x-tenant': 'acme', ...headers } },
});

/** The reading without its fingerprint, and the refusal by its code and message. */
function shape(reading: FieldReading) {
  switch (reading.kind) {
    case 'keyed':
      return { kind: 'keyed', scope: reading.scope };
    case 'keyless':
      return { kind: 'keyless' };
    case 'refused':
      return { kind: 'refused', code: reading.error.code, message: reading.error.message };
  }
}

const long = 'k'.repeat(250);

describe('readField', () => {
  it.each<[string, GraphqlField, typeof required, ReturnType<typeof shape>]>([
    [
      'a header key: stored with the field’s name in the answer',
      field({ 'idempotency-key': 'k1' }),
      required,
      { kind: 'keyed', scope: { tenantId: 'acme', key: 'k1:createTransfer' } },
    ],
    [
      'a header key on an aliased field: stored with the alias',
      field({ 'idempotency-key': 'k1' }, undefined, 'second'),
      required,
      { kind: 'keyed', scope: { tenantId: 'acme', key: 'k1:second' } },
    ],
    [
      'an argument key: stored as it is, whatever the header',
      field({ 'idempotency-key': 'k1' }, { amount: 5, idempotencyKey: 'a-1' }, 'second'),
      byArg,
      { kind: 'keyed', scope: { tenantId: 'acme', key: 'a-1' } },
    ],
    [
      'an argument key that is a number, as written',
      field({}, { idempotencyKey: 42 }),
      byArg,
      { kind: 'keyed', scope: { tenantId: 'acme', key: '42' } },
    ],
    [
      'no header',
      field({}),
      required,
      {
        kind: 'refused',
        code: 'key_missing',
        message:
          'The Idempotency-Key header is required on this route; send one key per operation.',
      },
    ],
    ['no header on an optional key', field({}), optional, { kind: 'keyless' }],
    [
      'no argument',
      field({ 'idempotency-key': 'k1' }),
      byArg,
      {
        kind: 'refused',
        code: 'key_missing',
        message:
          'The idempotencyKey argument is required on this route; send one key per operation.',
      },
    ],
    [
      'an argument that is an object',
      field({}, { idempotencyKey: { id: 'x' } }),
      byArg,
      {
        kind: 'refused',
        code: 'key_invalid',
        message: 'The idempotencyKey argument is invalid: it is an object, not a string.',
      },
    ],
    [
      'an empty argument',
      field({}, { idempotencyKey: '' }),
      byArg,
      {
        kind: 'refused',
        code: 'key_invalid',
        message: 'The idempotencyKey argument is invalid: it is empty.',
      },
    ],
    [
      'an argument of 256 characters',
      field({}, { idempotencyKey: 'k'.repeat(256) }),
      byArg,
      {
        kind: 'refused',
        code: 'key_invalid',
        message: 'The idempotencyKey argument is invalid: it is longer than 255 characters.',
      },
    ],
    [
      'a header key that the field’s name makes too long',
      field({ 'idempotency-key': long }, undefined, 'transfer'),
      required,
      {
        kind: 'refused',
        code: 'key_invalid',
        message:
          'The Idempotency-Key header is invalid: with the field\'s name in the answer ("transfer") after it, it is longer than 255 characters.',
      },
    ],
    [
      'a header key of 255 characters with a one-letter alias: 257',
      field({ 'idempotency-key': 'k'.repeat(255) }, undefined, 'a'),
      required,
      {
        kind: 'refused',
        code: 'key_invalid',
        message:
          'The Idempotency-Key header is invalid: with the field\'s name in the answer ("a") after it, it is longer than 255 characters.',
      },
    ],
    [
      'a header key of 253 characters with a one-letter alias: 255',
      field({ 'idempotency-key': 'k'.repeat(253) }, undefined, 'a'),
      required,
      { kind: 'keyed', scope: { tenantId: 'acme', key: `${'k'.repeat(253)}:a` } },
    ],
  ])('%s', (_name, given, route, expected) => {
    expect(shape(readField(given, route, tenant))).toEqual(expected);
  });

  // A batch of two operations in one HTTP request: a key of the whole request would name
  // both; with no key at all there is nothing to share (adversary 74).
  const batched = (headers: Record<string, string>, bodies: unknown[]): GraphqlField => {
    const one = field(headers);
    return { ...one, request: { ...one.request!, body: bodies } };
  };
  const byBody = resolveRouteOptions({ keyFrom: { body: 'requestId' }, required: false }, base);
  const shared = {
    kind: 'refused',
    code: 'key_invalid',
    message: expect.stringContaining('shared by every operation of a batched request') as string,
  };

  it.each<[string, GraphqlField, typeof required, unknown]>([
    ['a header key in a batch', batched({ 'idempotency-key': 'k1' }, [{}, {}]), required, shared],
    [
      'a header key in a batch, the key optional',
      batched({ 'idempotency-key': 'k1' }, [{}, {}]),
      optional,
      shared,
    ],
    ['no key in a batch, the key optional', batched({}, [{}, {}]), optional, { kind: 'keyless' }],
    [
      'no key in a batch, the key required',
      batched({}, [{}, {}]),
      required,
      { kind: 'refused', code: 'key_missing', message: expect.any(String) as string },
    ],
    [
      'a body key in one operation of a batch, optional: never run without it',
      batched({}, [{}, { requestId: 'r1' }]),
      byBody,
      shared,
    ],
  ])('%s', (_name, given, route, expected) => {
    expect(shape(readField(given, route, tenant))).toEqual(expected);
  });

  it('refuses a tenant the resolver cannot give', () => {
    const reading = readField(field({ 'idempotency-key': 'k1', 'x-tenant': '' }), required, tenant);
    expect(shape(reading)).toMatchObject({ kind: 'refused', code: 'tenant_invalid' });
  });
});

describe('fieldFingerprint', () => {
  const of = (args: Record<string, unknown>, name = 'createTransfer', alias = name) =>
    fieldFingerprint({ ...field({}, args, alias), fieldName: name }, required).toString('hex');

  it.each<[string, Record<string, unknown>, Record<string, unknown>, boolean]>([
    ['the same arguments in another order', { a: 1, b: 'x' }, { b: 'x', a: 1 }, true],
    ['a number spelled otherwise', { a: 1 }, { a: 1.0 }, true],
    ['nested input objects in another order', { i: { x: 1, y: 2 } }, { i: { y: 2, x: 1 } }, true],
    [
      'input objects GraphQL made without a prototype',
      { i: Object.assign(Object.create(null) as object, { x: 1 }) },
      { i: { x: 1 } },
      true,
    ],
    ['another value', { a: 1 }, { a: 2 }, false],
    ['an argument more', { a: 1 }, { a: 1, b: null }, false],
    ['a list in another order', { l: [1, 2] }, { l: [2, 1] }, false],
  ])('%s: same fingerprint is %s', (_name, first, second, same) => {
    expect(of(first) === of(second)).toBe(same);
  });

  it('differs by the field’s name, not by its alias', () => {
    expect(of({ a: 1 }, 'createTransfer', 'x')).toBe(of({ a: 1 }, 'createTransfer', 'y'));
    expect(of({ a: 1 }, 'createTransfer')).not.toBe(of({ a: 1 }, 'refundTransfer'));
  });
});
