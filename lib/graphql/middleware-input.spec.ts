import * as graphql from 'graphql';
import { GraphQLInt, GraphQLList, GraphQLNonNull, type GraphQLOutputType } from 'graphql';
import { fitsListType } from './middleware-input.js';

const list = new GraphQLList(GraphQLInt);

describe('fitsListType', () => {
  it.each<[string, GraphQLOutputType, unknown, boolean]>([
    ['a scalar, any value', GraphQLInt, { cents: 1 }, true],
    ['a list, an array', list, [1, 2], true],
    ['a non-null list, an array', new GraphQLNonNull(list), [], true],
    ['a list, null', list, null, true],
    ['a list, undefined', list, undefined, true],
    ['a list, a record (a jsonb column the middleware maps)', list, { 'A-1': 2 }, false],
    ['a non-null list, a record', new GraphQLNonNull(list), { 'A-1': 2 }, false],
    ['a list, a Map', list, new Map([['A-1', 2]]), false],
    ['a list, a Set', list, new Set([1]), false],
    ['a list, a string', list, 'a,b', false],
    ["a list, a Map's keys() (read once into an array)", list, new Map([['A-1', 2]]).keys(), true],
    [
      'a list, a generator',
      list,
      (function* () {
        yield 1;
      })(),
      true,
    ],
    ["a list, a Set's values()", list, new Set([1]).values(), true],
  ])('%s', (_name, type, value, fits) => {
    expect(fitsListType(graphql, type, value)).toBe(fits);
  });
});
