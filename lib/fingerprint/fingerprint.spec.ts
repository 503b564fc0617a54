import { type IdempotencyRequest } from '../shapes/idempotency-options.interface.js';
import { canonicalBody, mediaTypeOf } from './fingerprint.js';
import { canonicalForm } from './form-urlencoded.js';
import { announcesBody, UnreadBodyError } from './unseen-body.js';

const request = (
  contentType: string | undefined,
  parts: { rawBody?: Buffer; body?: unknown; length?: number } = {},
): IdempotencyRequest => ({
  method: 'POST',
  url: '/x',
  headers: {
    ...(contentType && { 'content-type': contentType }),
    ...(parts.length !== undefined && { 'content-length': String(parts.length) }),
  },
  body: parts.body,
  rawBody: parts.rawBody,
});

describe('mediaTypeOf', () => {
  it.each([
    ['application/json; charset=utf-8', 'application/json'],
    [' Text/Plain ', 'text/plain'],
    ['multipart/form-data; boundary=x', 'multipart/form-data'],
    [undefined, ''],
  ])('%j is %j', (header, expected) => {
    expect(mediaTypeOf(header)).toBe(expected);
  });
});

describe('announcesBody', () => {
  it.each<[Record<string, string>, boolean]>([
    [{}, false],
    [{ 'content-length': '0' }, false],
    [{ 'content-length': '12' }, true],
    [{ 'transfer-encoding': 'chunked' }, true],
  ])('%j: %s', (headers, expected) => {
    expect(announcesBody(headers)).toBe(expected);
  });
});

describe('canonicalBody', () => {
  const bytes = Buffer.from('a=1 & b=2');

  it.each<[string, IdempotencyRequest, string | Buffer]>([
    [
      'JSON from its raw bytes',
      request('application/json', { rawBody: Buffer.from('{"b":1,"a":2}') }),
      '{"a":2e0,"b":1e0}',
    ],
    [
      'JSON from its parsed value',
      request('application/json', { body: { b: 1, a: 2 } }),
      '{"a":2e0,"b":1e0}',
    ],
    [
      'a form from its raw bytes',
      request('application/x-www-form-urlencoded', { rawBody: Buffer.from('b=1&a=2') }),
      canonicalForm('a=2&b=1'),
    ],
    [
      'a form parsed as text',
      request('application/x-www-form-urlencoded', { body: 'b=1&a=2' }),
      canonicalForm('a=2&b=1'),
    ],
    [
      'a form from its parsed object',
      request('application/x-www-form-urlencoded', { body: { b: '1', a: '2' } }),
      '{"a":"2","b":"1"}',
    ],
    [
      'text/plain from its raw bytes',
      request('text/plain', { rawBody: bytes, body: 'ignored' }),
      bytes,
    ],
    ['text/plain parsed as text', request('text/plain', { body: 'a=1 & b=2' }), 'a=1 & b=2'],
    ['octet-stream as bytes', request('application/octet-stream', { body: bytes }), bytes],
    ['no body', request(undefined), ''],
    ['an empty raw body', request('application/json', { rawBody: Buffer.alloc(0) }), ''],
  ])('%s', (_name, req, expected) => {
    expect(canonicalBody(req)).toEqual(expected);
  });

  it.each<[string, IdempotencyRequest, string, string]>([
    [
      'a body no parser read',
      request('application/xml', { length: 8 }),
      'no body parser read its application/xml body',
      "register a parser for it (on Express, app.useBodyParser('text') or 'raw')",
    ],
    [
      'a body of no type no parser read',
      request(undefined, { length: 8 }),
      'no body parser read its untyped body',
      'register a parser for it',
    ],
    [
      'a multipart body not parsed yet',
      request('multipart/form-data; boundary=x', { length: 80 }),
      'no body parser read its multipart/form-data body',
      'on Express, write @Idempotent() above @UseInterceptors(FileInterceptor(...)) so that ' +
        'multer reads the upload before the interceptor',
    ],
  ])('refuses %s', (_name, req, message, advice) => {
    let error: unknown;
    try {
      canonicalBody(req);
    } catch (thrown) {
      error = thrown;
    }
    expect(error).toBeInstanceOf(UnreadBodyError);
    expect((error as UnreadBodyError).message).toBe(message);
    expect((error as UnreadBodyError).advice).toContain(advice);
  });
});
