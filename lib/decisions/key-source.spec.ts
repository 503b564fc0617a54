import { type IdempotencyRequest } from '../shapes/idempotency-request.js';
import { type IdempotencyKeySource, keyReader, type RawKey } from './key-source.js';

const request = (headers: IdempotencyRequest['headers'], body?: unknown): IdempotencyRequest => ({
  method: 'POST',
  url: '/charges?op=7',
  headers,
  body,
});

describe('keyReader', () => {
  it.each<[string, IdempotencyKeySource, IdempotencyRequest, RawKey, string]>([
    [
      'a header, by any case of its name',
      { header: 'X-Request-Id' },
      request({ 'x-request-id': 'k1' }),
      'k1',
      'the X-Request-Id header',
    ],
    [
      'a header sent twice',
      { header: 'X-Request-Id' },
      request({ 'x-request-id': ['a', 'b'] }),
      ['a', 'b'],
      'the X-Request-Id header',
    ],
    [
      'a missing header',
      { header: 'X-Request-Id' },
      request({}),
      undefined,
      'the X-Request-Id header',
    ],
    [
      'a body field',
      { body: 'requestId' },
      request({}, { requestId: 'k2' }),
      'k2',
      'the requestId field of the body',
    ],
    [
      'a nested body field',
      { body: 'meta.requestId' },
      request({}, { meta: { requestId: 'k3' } }),
      'k3',
      'the meta.requestId field of the body',
    ],
    [
      'a number in the body, as written',
      { body: 'id' },
      request({}, { id: 42 }),
      '42',
      'the id field of the body',
    ],
    ['a body without it', { body: 'id' }, request({}, {}), undefined, 'the id field of the body'],
    [
      'null in the body',
      { body: 'id' },
      request({}, { id: null }),
      undefined,
      'the id field of the body',
    ],
    [
      'no body at all',
      { body: 'meta.id' },
      request({}),
      undefined,
      'the meta.id field of the body',
    ],
    [
      'a path through a list',
      { body: 'a.b' },
      request({}, { a: [{ b: 'x' }] }),
      undefined,
      'the a.b field of the body',
    ],
    [
      'an inherited name is not a field',
      { body: 'constructor' },
      request({}, {}),
      undefined,
      'the constructor field of the body',
    ],
    [
      'an object in the body',
      { body: 'id' },
      request({}, { id: { a: 1 } }),
      { invalid: 'it is an object, not a string' },
      'the id field of the body',
    ],
    [
      'a list in the body',
      { body: 'id' },
      request({}, { id: ['a'] }),
      { invalid: 'it is a list, not a string' },
      'the id field of the body',
    ],
    [
      'a boolean in the body',
      { body: 'id' },
      request({}, { id: true }),
      { invalid: 'it is a boolean, not a string' },
      'the id field of the body',
    ],
    [
      'a function of the request',
      {
        name: 'the op query parameter',
        read: (r) => new URL(r.url, 'http://x').searchParams.get('op') ?? undefined,
      },
      request({}),
      '7',
      'the op query parameter',
    ],
  ])('%s', (_name, source, req, expected, where) => {
    const reader = keyReader(source);
    expect(reader.read(req)).toEqual(expected);
    expect(reader.where).toBe(where);
  });

  it.each<[string, unknown, string]>([
    ['a header name with a space', { header: 'X Key' }, 'is not a header name'],
    ['an empty body path', { body: '' }, 'is not a field name'],
    ['a body path with an empty part', { body: 'a..b' }, 'is not a field name'],
    ['a function without a name', { read: () => 'k' }, 'keyFrom needs'],
    ['a name without a function', { name: 'x', read: 'k' }, 'keyFrom needs'],
    ['an argument name with a dot', { arg: 'input.key' }, 'is not a GraphQL argument name'],
    ['an argument name starting with a digit', { arg: '1key' }, 'is not a GraphQL argument name'],
  ])('refuses %s', (_name, source, message) => {
    expect(() => keyReader(source as IdempotencyKeySource)).toThrow(message);
  });

  it('documents the header only when the key is in one', () => {
    expect(keyReader({ header: 'X-Request-Id' }).header).toBe('X-Request-Id');
    expect(keyReader({ body: 'id' }).header).toBeUndefined();
  });

  it('reads a GraphQL argument from the field, never from the request', () => {
    const reader = keyReader({ arg: 'idempotencyKey' });
    expect(reader.arg).toBe('idempotencyKey');
    expect(reader.where).toBe('the idempotencyKey argument');
    expect(reader.read(request({ 'idempotency-key': 'k1' }, { idempotencyKey: 'k2' }))).toBe(
      undefined,
    );
  });
});
