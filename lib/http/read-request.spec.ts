import { type IdempotencyRequest } from '../shapes/idempotency-options.interface.js';
import { resolveIdempotencyOptions, resolveRouteOptions } from '../idempotency-options.js';
import { readRequest, type RequestReading } from './read-request.js';

const KEY = '5b2f7a0e-0c1a-4d3e-9f10-2a4b6c8d0e1f';
const base = resolveIdempotencyOptions({ globalKeys: true }).route;
const required = resolveRouteOptions({}, base);
const optional = resolveRouteOptions({ required: false }, base);
const tenant = (request: IdempotencyRequest) => request.headers['x-tenant'] as string;

const request = (
  headers: Record<string, string | string[]>,
  body?: { rawBody: string; type: string },
): IdempotencyRequest => ({
  method: 'POST',
  url: '/orders',
  headers: {
    'x-tenant': 'acme',
    ...headers,
    ...(body && { 'content-type': body.type, 'content-length': String(body.rawBody.length) }),
  },
  rawBody: body && body.type === 'application/json' ? Buffer.from(body.rawBody) : undefined,
});

/** The reading without its fingerprint's bytes, and the refusal by its code and message. */
function shape(reading: RequestReading) {
  switch (reading.kind) {
    case 'keyed':
      return { kind: 'keyed', scope: reading.scope, fingerprintBytes: reading.fingerprint.length };
    case 'keyless':
      return { kind: 'keyless' };
    case 'refused':
      return {
        kind: 'refused',
        code: reading.error.code,
        message: reading.error.message,
        warned: reading.warning !== undefined,
      };
  }
}

describe('readRequest (key, tenant, fingerprint: a value or a refusal)', () => {
  it.each<[string, IdempotencyRequest, typeof required, ReturnType<typeof shape>]>([
    [
      'a key, a tenant, no body',
      request({ 'idempotency-key': KEY }),
      required,
      { kind: 'keyed', scope: { tenantId: 'acme', key: KEY }, fingerprintBytes: 32 },
    ],
    [
      'no key on a route that requires one',
      request({}),
      required,
      {
        kind: 'refused',
        code: 'key_missing',
        message:
          'The Idempotency-Key header is required on this route; send one key per operation.',
        warned: false,
      },
    ],
    ['no key on a route whose key is optional', request({}), optional, { kind: 'keyless' }],
    [
      'an empty key',
      request({ 'idempotency-key': '' }),
      optional,
      {
        kind: 'refused',
        code: 'key_invalid',
        warned: false,
        message: expect.stringMatching(/^The Idempotency-Key header is invalid: /) as string,
      },
    ],
    [
      'two keys',
      request({ 'idempotency-key': [KEY, KEY] }),
      required,
      {
        kind: 'refused',
        code: 'key_invalid',
        warned: false,
        message: expect.stringMatching(/^The Idempotency-Key header is invalid: /) as string,
      },
    ],
    [
      'no tenant',
      request({ 'idempotency-key': KEY, 'x-tenant': '' }),
      required,
      {
        kind: 'refused',
        code: 'tenant_invalid',
        message:
          'The request carries no valid tenant id: it is empty. A tenant id is an integer, or 1 ' +
          'to 255 characters, not all white space, without control characters or lone ' +
          'surrogates; idempotency keys are scoped per tenant.',
        warned: false,
      },
    ],
    [
      'a JSON body with a duplicate name',
      request({ 'idempotency-key': KEY }, { type: 'application/json', rawBody: '{"a":1,"a":2}' }),
      required,
      {
        kind: 'refused',
        code: 'request_invalid',
        warned: false,
        message: expect.stringMatching(/^The request body cannot be fingerprinted: /) as string,
      },
    ],
    [
      'a body no parser read (logged with its advice)',
      request({ 'idempotency-key': KEY }, { type: 'application/xml', rawBody: '<a/>' }),
      required,
      {
        kind: 'refused',
        code: 'request_invalid',
        message:
          'The request body cannot be fingerprinted: no body parser read its application/xml body.',
        warned: true,
      },
    ],
  ])('%s', (_name, given, route, expected) => {
    expect(shape(readRequest(given, route, tenant, 'Orders.create'))).toEqual(expected);
  });

  it('names the route and the advice in the warning of an unread body', () => {
    const reading = readRequest(
      request({ 'idempotency-key': KEY }, { type: 'text/csv', rawBody: 'a,b' }),
      required,
      tenant,
      'Orders.create',
    );
    expect(reading.kind === 'refused' && reading.warning).toMatch(
      /^Orders\.create: refused a request \(400\), no body parser read its text\/csv body, so the fingerprint would leave its body out; if the route takes such bodies: /,
    );
  });

  it('fingerprints the same request the same, and another body differently', () => {
    const read = (rawBody: string) =>
      readRequest(
        request({ 'idempotency-key': KEY }, { type: 'application/json', rawBody }),
        required,
        tenant,
        'Orders.create',
      );
    const [a, b, c] = [read('{"a":1,"b":2}'), read('{"b":2,"a":1}'), read('{"a":2}')];
    if (a.kind !== 'keyed' || b.kind !== 'keyed' || c.kind !== 'keyed') throw new Error('refused');
    expect(a.fingerprint.equals(b.fingerprint)).toBe(true);
    expect(a.fingerprint.equals(c.fingerprint)).toBe(false);
  });
});
