import { renderResult } from './handler-result.js';

describe('renderResult', () => {
  it.each<[string, unknown, string, Record<string, string>, string, string | undefined]>([
    [
      'an object on Express',
      { id: 1 },
      'express',
      {},
      '{"id":1}',
      'application/json; charset=utf-8',
    ],
    ['an array on Fastify', [1, 2], 'fastify', {}, '[1,2]', 'application/json; charset=utf-8'],
    ['a string on Express', 'hi', 'express', {}, 'hi', 'text/html; charset=utf-8'],
    ['a string on Fastify', 'hi', 'fastify', {}, 'hi', 'text/plain; charset=utf-8'],
    ['a number on Express', 42, 'express', {}, '42', 'text/html; charset=utf-8'],
    ['a number on Fastify', 42, 'fastify', {}, '42', 'application/json; charset=utf-8'],
    ['undefined', undefined, 'express', {}, '', undefined],
    ['null', null, 'fastify', {}, '', undefined],
    [
      'a @Header() content type',
      'a,b',
      'express',
      { 'content-type': 'text/csv' },
      'a,b',
      'text/csv',
    ],
  ])('%s', (_name, value, adapter, headers, body, type) => {
    const response = renderResult(value, 201, headers, adapter);
    expect(response.status).toBe(201);
    expect(response.body.toString()).toBe(body);
    expect(response.headers['content-type']).toBe(type);
  });

  it('keeps a Location set with @Header()', () => {
    const response = renderResult({ id: 1 }, 202, { location: '/x/1' }, 'express');
    expect(response.headers).toEqual({
      location: '/x/1',
      'content-type': 'application/json; charset=utf-8',
    });
  });
});
