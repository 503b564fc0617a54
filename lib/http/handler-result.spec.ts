import { StreamableFile } from '@nestjs/common';
import { Readable } from 'node:stream';
import { of } from 'rxjs';
import {
  handlerOutcome,
  isCancelled,
  isOuterTimeout,
  isUnwrittenValue,
  onStreamError,
  renderResult,
  resultStream,
  type WrittenAnswer,
} from './handler-result.js';

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

describe('resultStream', () => {
  const readable = Readable.from(['a']);
  const file = new StreamableFile(Readable.from(['b']));
  it.each<[string, unknown, Readable | undefined]>([
    ['a StreamableFile: its stream', file, file.getStream()],
    ['a Readable: itself', readable, readable],
    ['an object', { id: 1 }, undefined],
    ['a string', 'text', undefined],
    ['a Buffer', Buffer.from('x'), undefined],
    ['undefined', undefined, undefined],
  ])('%s', (_name, value, stream) => {
    expect(resultStream(value)).toBe(stream);
  });
});

describe('onStreamError', () => {
  it('reports a failure once, however many errors the stream emits', () => {
    const stream = new Readable({ read() {} });
    const seen: unknown[] = [];
    onStreamError(stream, (error) => seen.push(error));
    stream.emit('error', new Error('first'));
    stream.emit('error', new Error('second'));
    expect(seen).toEqual([new Error('first')]);
  });

  it('reports a stream that had failed before it was watched', async () => {
    const stream = new Readable({ read() {} });
    stream.on('error', () => undefined);
    stream.destroy(new Error('early'));
    await new Promise((resolve) => stream.once('close', resolve));
    const seen: unknown[] = [];
    onStreamError(stream, (error) => seen.push(error));
    expect(seen).toEqual([new Error('early')]);
  });

  it('reports nothing for a stream that completes', async () => {
    const stream = Readable.from(['a', 'b']);
    const seen: unknown[] = [];
    onStreamError(stream, (error) => seen.push(error));
    for await (const chunk of stream) void chunk;
    expect(seen).toEqual([]);
  });
});

describe('isUnwrittenValue', () => {
  it.each<[string, WrittenAnswer, boolean]>([
    ['a value written', { status: 201, returned: true, statusWhenReturned: 200 }, false],
    [
      'a value Nest could not write (500 after it returned)',
      { status: 500, returned: true, statusWhenReturned: 200 },
      true,
    ],
    ['no value returned (undefined): nothing to write', { status: 500, returned: false }, false],
    ['its @HttpCode(503)', { status: 503, returned: true, httpCode: 503 }, false],
    [
      'a 502 it set on @Res({ passthrough: true })',
      { status: 502, returned: true, statusWhenReturned: 502 },
      false,
    ],
    [
      'a 500 after its @HttpCode(202) value',
      { status: 500, returned: true, httpCode: 202, statusWhenReturned: 200 },
      true,
    ],
    [
      'a 4xx is not this by itself',
      { status: 400, returned: true, statusWhenReturned: 200 },
      false,
    ],
    [
      'writing it threw: whatever an app filter then answered',
      { status: 200, returned: true, statusWhenReturned: 200, writeThrew: true },
      true,
    ],
  ])('%s', (_name, answer, expected) => {
    expect(isUnwrittenValue(answer)).toBe(expected);
  });
});

describe('isOuterTimeout', () => {
  it.each<[string, Omit<WrittenAnswer, 'writeThrew'>, boolean]>([
    ['a 408 after its value', { status: 408, returned: true, statusWhenReturned: 200 }, true],
    ['a 504 after its value', { status: 504, returned: true, statusWhenReturned: 200 }, true],
    ['no value yet (the usual outer timeout)', { status: 408, returned: false }, false],
    ['its own @HttpCode(408)', { status: 408, returned: true, httpCode: 408 }, false],
    ['a 504 it set on @Res', { status: 504, returned: true, statusWhenReturned: 504 }, false],
    ['its answer', { status: 201, returned: true, statusWhenReturned: 200 }, false],
    ['a bug’s 500', { status: 500, returned: true, statusWhenReturned: 200 }, false],
  ])('%s', (_name, answer, expected) => {
    expect(isOuterTimeout(answer)).toBe(expected);
  });
});

describe('handlerOutcome: what a handler an inner timeout gave up on settles with', () => {
  it.each<[string, () => unknown, object, boolean]>([
    ['a Promise that resolves', () => Promise.resolve(201), { value: 201 }, false],
    [
      'a Promise that rejects',
      () => Promise.reject(new Error('psp down')),
      { error: 'psp down' },
      false,
    ],
    ['a plain value', () => ({ id: 1 }), { value: { id: 1 } }, false],
    [
      'a Promise of an Observable (cancelled with it)',
      () => Promise.resolve(of(1)),
      { error: 'the Observable the handler resolved to was cancelled by a timeout' },
      true,
    ],
    [
      // Its own error with the same message is still its own: stored as final on GraphQL.
      'a Promise that rejects with the same message',
      () =>
        Promise.reject(
          new Error('the Observable the handler resolved to was cancelled by a timeout'),
        ),
      { error: 'the Observable the handler resolved to was cancelled by a timeout' },
      false,
    ],
  ])('%s', async (_case, make, expected, cancelled) => {
    const outcome = await handlerOutcome({ value: make() });
    const shown =
      outcome && 'error' in outcome ? { error: (outcome.error as Error).message } : outcome;
    expect(shown).toEqual(expected);
    expect(outcome !== undefined && 'error' in outcome && isCancelled(outcome.error)).toBe(
      cancelled,
    );
  });

  it('an Observable: none (unsubscribed, its work is cancelled)', () => {
    expect(handlerOutcome({ value: of(1) })).toBeUndefined();
  });

  it('a handler that threw at once, returning nothing: none', () => {
    expect(handlerOutcome(undefined)).toBeUndefined();
  });
});
