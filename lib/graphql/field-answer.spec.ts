import { BadRequestException, HttpException, NotFoundException } from '@nestjs/common';
import { GraphQLError } from 'graphql';
import { type StoredResponse } from '../shapes/stored-response.js';
import {
  ANSWER_FORMAT,
  answerStatus,
  decodeAnswer,
  encodeAnswer,
  FIELD_ANSWER_TYPE,
  type FieldAnswer,
  type FieldError,
  fieldError,
} from './field-answer.js';
import { thrownError } from './thrown-error.js';
import * as graphql from 'graphql';

class DeclinedError extends Error {
  override name = 'DeclinedError';
}

describe('fieldError', () => {
  it.each<[string, unknown, FieldError]>([
    ['an Error', new Error('boom'), { kind: 'error', message: 'boom' }],
    [
      'an Error of the app’s own',
      new DeclinedError('declined'),
      { kind: 'error', message: 'declined', name: 'DeclinedError' },
    ],
    [
      'a GraphQLError with extensions',
      new GraphQLError('declined', { extensions: { code: 'DECLINED', at: [1] } }),
      {
        kind: 'graphql',
        message: 'declined',
        name: 'GraphQLError',
        extensions: { code: 'DECLINED', at: [1] },
      },
    ],
    [
      'a GraphQLError with extensions.http headers (a Map, as Apollo Server reads them)',
      new GraphQLError('slow down', {
        extensions: { http: { status: 429, headers: new Map([['retry-after', '7']]) } },
      }),
      {
        kind: 'graphql',
        message: 'slow down',
        name: 'GraphQLError',
        extensions: { http: { status: 429 } },
        httpHeaders: [['retry-after', '7']],
      },
    ],
    [
      'a GraphQLError without',
      new GraphQLError('declined'),
      { kind: 'graphql', message: 'declined', name: 'GraphQLError' },
    ],
    [
      'an HttpException',
      new BadRequestException('too much'),
      {
        kind: 'http',
        message: 'too much',
        name: 'BadRequestException',
        nestClass: true,
        http: {
          status: 400,
          response: { message: 'too much', error: 'Bad Request', statusCode: 400 },
        },
      },
    ],
    [
      'an app exception of its own, named like a Nest one, with a field of its own',
      (() => {
        class ConflictException extends HttpException {
          readonly declineCode = 'insufficient_funds';
          constructor() {
            super('declined', 409);
          }
        }
        return new ConflictException();
      })(),
      {
        kind: 'http',
        message: 'declined',
        name: 'ConflictException',
        props: { declineCode: 'insufficient_funds' },
        http: { status: 409, response: 'declined' },
      },
    ],
    [
      'a Prisma-like error’s code and meta',
      Object.assign(new Error('Unique constraint failed'), {
        code: 'P2002',
        meta: { modelName: 'Transfer', target: ['ref'] },
      }),
      {
        kind: 'error',
        message: 'Unique constraint failed',
        props: { code: 'P2002', meta: { modelName: 'Transfer', target: ['ref'] } },
      },
    ],
    [
      'an HttpException of a string',
      new HttpException('gone', 410),
      {
        kind: 'http',
        message: 'gone',
        name: 'HttpException',
        http: { status: 410, response: 'gone' },
      },
    ],
    [
      'an Error with extensions (Mercurius’ ErrorWithProps)',
      Object.assign(new Error('limited'), { extensions: { code: 'LIMIT' } }),
      { kind: 'error', message: 'limited', extensions: { code: 'LIMIT' } },
    ],
    [
      'an Error with a statusCode (Mercurius’ ErrorWithProps)',
      Object.assign(new Error('pay'), { extensions: { code: 'PAY' }, statusCode: 402 }),
      { kind: 'error', message: 'pay', extensions: { code: 'PAY' }, statusCode: 402 },
    ],
    ['a thrown string', 'nope', { kind: 'error', message: 'nope' }],
    [
      'a driver error’s own code and constraint',
      Object.assign(new Error('duplicate key value'), {
        code: '23505',
        constraint: 'transfers_ref_key',
        detail: undefined,
        cause: new Error('inner'),
      }),
      {
        kind: 'error',
        message: 'duplicate key value',
        props: { code: '23505', constraint: 'transfers_ref_key' },
      },
    ],
  ])('keeps %s', (_name, thrown, expected) => {
    expect(fieldError(thrown)).toEqual(expected);
  });

  it.each<[string, Error, new (...args: never[]) => Error]>([
    [
      'a GraphQLError',
      new GraphQLError('declined', { extensions: { code: 'DECLINED' } }),
      GraphQLError,
    ],
    [
      'a GraphQLError with extensions.http headers',
      new GraphQLError('slow down', {
        extensions: { http: { status: 429, headers: new Map([['retry-after', '7']]) } },
      }),
      GraphQLError,
    ],
    [
      'a GraphQLError at its own place (adversary 74)',
      Object.assign(
        new GraphQLError('over the limit', { extensions: { code: 'BAD_USER_INPUT' } }),
        {
          locations: [{ line: 2, column: 31 }],
          path: ['createTransfer'],
        },
      ),
      GraphQLError,
    ],
    ['an HttpException', new NotFoundException('no such account'), HttpException],
    ['an Error of the app’s own', new DeclinedError('declined'), Error],
    [
      'an Error with extensions',
      Object.assign(new Error('x'), { extensions: { code: 'X' } }),
      Error,
    ],
    [
      'an Error with a statusCode',
      Object.assign(new Error('pay'), { extensions: { code: 'PAY' }, statusCode: 402 }),
      Error,
    ],
  ])('throws %s again as what the drivers read of the first', (_name, thrown, kind) => {
    const again = thrownError(fieldError(thrown), graphql);
    expect(again).toBeInstanceOf(kind);
    expect(fieldError(again)).toEqual(fieldError(thrown));
  });
});

describe('encodeAnswer and decodeAnswer', () => {
  it.each<[string, FieldAnswer, number, string]>([
    [
      'a value, in the form it is stored in',
      { kind: 'data', data: { id: 1, note: 'é' } },
      200,
      `{"data":{"id":1,"note":"é"},"format":${ANSWER_FORMAT}}`,
    ],
    ['no value', { kind: 'data', data: undefined }, 200, '{"data":null,"format":3}'],
    [
      'an error',
      { kind: 'error', error: { kind: 'error', message: 'boom' } },
      500,
      '{"error":{"kind":"error","message":"boom"}}',
    ],
    [
      'an HttpException, by its status',
      {
        kind: 'error',
        error: { kind: 'http', message: 'x', http: { status: 404, response: 'x' } },
      },
      404,
      '{"error":{"kind":"http","message":"x","http":{"status":404,"response":"x"}}}',
    ],
  ])('stores %s', (_name, answer, status, body) => {
    const stored = encodeAnswer(answer);
    expect(stored).toEqual({
      status,
      headers: { 'content-type': FIELD_ANSWER_TYPE },
      body: Buffer.from(body),
    });
    expect(answerStatus(answer)).toBe(status);
    const decoded = decodeAnswer(stored);
    expect(decoded).toEqual(
      answer.kind === 'data'
        ? { kind: 'data', data: answer.data ?? null, format: ANSWER_FORMAT }
        : answer,
    );
  });

  it('keeps the middleware outputs, their members and their errors', () => {
    const answer: FieldAnswer = {
      kind: 'data',
      data: { id: 1 },
      format: ANSWER_FORMAT,
      outputs: { lines: null, tags: ['x'] },
      members: { 'tags.0': 'Tag' },
      errors: { lines: { message: 'bad line B', extensions: { code: 'BAD' } } },
    };
    expect(decodeAnswer(encodeAnswer(answer))).toEqual(answer);
  });

  it('keeps the outputs completed but not kept (`lost`), and drops a malformed list', () => {
    const answer: FieldAnswer = {
      kind: 'data',
      data: { id: 1 },
      format: ANSWER_FORMAT,
      outputs: { note: 'N' },
      lost: ['profile'],
    };
    expect(decodeAnswer(encodeAnswer(answer))).toEqual(answer);
    const malformed = encodeAnswer({ ...answer, lost: [1] as unknown as string[] });
    expect(decodeAnswer(malformed)).toEqual({ ...answer, lost: undefined });
  });

  it('reads a value stored before the stored form said its format as format 1', () => {
    const stored = {
      status: 200,
      headers: { 'content-type': FIELD_ANSWER_TYPE },
      body: Buffer.from('{"data":{"id":1,"createdAt":"2026-03-01T00:00:00.000Z"}}'),
    };
    expect(decodeAnswer(stored)).toEqual({
      kind: 'data',
      data: { id: 1, createdAt: '2026-03-01T00:00:00.000Z' },
      format: 1,
    });
  });

  it('refuses to store a value that is not JSON', () => {
    expect(() => encodeAnswer({ kind: 'data', data: { n: 1n } })).toThrow(TypeError);
  });

  it.each<[string, StoredResponse]>([
    [
      'an HTTP route’s answer',
      { status: 201, headers: { 'content-type': 'application/json' }, body: Buffer.from('{}') },
    ],
    [
      'a body that is not JSON',
      { status: 200, headers: { 'content-type': FIELD_ANSWER_TYPE }, body: Buffer.from('{') },
    ],
    [
      'an error without a message',
      {
        status: 500,
        headers: { 'content-type': FIELD_ANSWER_TYPE },
        body: Buffer.from('{"error":{}}'),
      },
    ],
  ])('reads no field answer from %s', (_name, stored) => {
    expect(decodeAnswer(stored)).toBeUndefined();
  });
});
