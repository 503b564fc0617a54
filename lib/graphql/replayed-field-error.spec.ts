import * as graphql from 'graphql';
import { ForbiddenException } from '@nestjs/common';
import { type StoredFieldError } from './field-answer.js';
import { errorUnder, extensionsAgain, fieldErrorAgain } from './replayed-field-error.js';

describe('errorUnder', () => {
  const errors: Record<string, StoredFieldError> = {
    'lines.1': { message: 'item' },
    note: { message: 'own' },
    'notes.0.body': { message: 'deep' },
  };
  it.each<{ key: string; expected: unknown }>([
    { key: 'note', expected: { error: { message: 'own' }, steps: [] } },
    { key: 'lines', expected: { error: { message: 'item' }, steps: [1] } },
    { key: 'lines.1', expected: { error: { message: 'item' }, steps: [] } },
    { key: 'notes', expected: { error: { message: 'deep' }, steps: [0, 'body'] } },
    // `note` is not under `notes`, nor `notes` under `note`.
    { key: 'lines.0', expected: undefined },
    { key: 'tags', expected: undefined },
  ])('at $key: $expected', ({ key, expected }) => {
    expect(errorUnder(errors, key)).toEqual(expected);
  });
});

describe('fieldErrorAgain', () => {
  it('at its place: what was thrown, of its kind', () => {
    const stored: StoredFieldError = {
      message: 'staff only',
      thrown: {
        kind: 'http',
        message: 'staff only',
        name: 'ForbiddenException',
        nestClass: true,
        http: {
          status: 403,
          response: { message: 'staff only', error: 'Forbidden', statusCode: 403 },
        },
      },
    };
    const error = fieldErrorAgain(graphql, stored, undefined);
    expect(error).toBeInstanceOf(ForbiddenException);
    expect((error as ForbiddenException).getStatus()).toBe(403);
  });

  it('at its place, graphql-js words only (a record stored before `thrown`)', () => {
    const error = fieldErrorAgain(
      graphql,
      { message: 'bad', extensions: { code: 'B' } },
      undefined,
    );
    expect(error).toBeInstanceOf(graphql.GraphQLError);
    expect(error).toMatchObject({ message: 'bad', extensions: { code: 'B' }, path: undefined });
  });

  it('under its place: located at its path and its first locations', () => {
    const stored: StoredFieldError = {
      message: 'Cannot return null for non-nullable field Order.tags.',
      locations: [{ line: 2, column: 5 }],
    };
    const error = fieldErrorAgain(graphql, stored, ['b', 'tags', 1]) as graphql.GraphQLError;
    expect(error.path).toEqual(['b', 'tags', 1]);
    expect(error.locations).toEqual([{ line: 2, column: 5 }]);
    // graphql-js keeps a located error as it is.
    expect(graphql.locatedError(error, [], ['b', 'tags'])).toBe(error);
  });
});

describe('extensionsAgain', () => {
  const http = { status: 429, headers: {} };
  it.each<{ name: string; stored: StoredFieldError; expected: unknown }>([
    {
      name: 'an Apollo status and headers: the headers a Map again',
      stored: {
        message: 'quota',
        extensions: { code: 'RATE_LIMITED', http },
        thrown: {
          kind: 'error',
          message: 'quota',
          extensions: { code: 'RATE_LIMITED', http: { status: 429 } },
          httpHeaders: [['retry-after', '30']],
        },
      },
      expected: {
        code: 'RATE_LIMITED',
        http: { status: 429, headers: new Map([['retry-after', '30']]) },
      },
    },
    {
      name: 'no headers: the stored extensions',
      stored: { message: 'x', extensions: { code: 'X' }, thrown: { kind: 'error', message: 'x' } },
      expected: { code: 'X' },
    },
    { name: 'nothing thrown stored', stored: { message: 'x' }, expected: undefined },
  ])('$name', ({ stored, expected }) => {
    expect(extensionsAgain(stored)).toEqual(expected);
  });

  it('made again under the field: its headers a Map', () => {
    const error = fieldErrorAgain(
      graphql,
      {
        message: 'quota',
        extensions: { http: { status: 429, headers: {} } },
        thrown: { kind: 'error', message: 'quota', httpHeaders: [['retry-after', '30']] },
      },
      ['createOrder', 'shipping', 'street'],
    );
    expect((error as graphql.GraphQLError).extensions.http).toEqual({
      status: 429,
      headers: new Map([['retry-after', '30']]),
    });
  });
});
