import { getLocation, Source } from 'graphql';
import {
  type AnsweredEntry,
  answeredLocations,
  type ErrorLocation,
  errorLocations,
  errorPath,
  sourceAt,
} from './error-location.js';

describe('sourceAt', () => {
  it.each<[string, ErrorLocation[]]>([
    ['the first column of the first line', [{ line: 1, column: 1 }]],
    ['a column far in', [{ line: 1, column: 42 }]],
    ['a later line', [{ line: 3, column: 7 }]],
    [
      'several, out of order',
      [
        { line: 4, column: 2 },
        { line: 1, column: 30 },
        { line: 4, column: 9 },
      ],
    ],
  ])('gives graphql-js %s back', (_name, locations) => {
    const { body, positions } = sourceAt(locations);
    const source = new Source(body);
    expect(positions.map((position) => getLocation(source, position))).toEqual(locations);
    expect(body.trim()).toBe('');
  });
});

describe('errorLocations and errorPath', () => {
  it.each<[string, unknown, ErrorLocation[] | undefined]>([
    ['graphql-js’ own', [{ line: 2, column: 5 }], [{ line: 2, column: 5 }]],
    ['none', undefined, undefined],
    ['an empty list', [], undefined],
    ['a line 0', [{ line: 0, column: 5 }], undefined],
    ['a column not a number', [{ line: 1, column: '5' }], undefined],
  ])('locations: %s', (_name, value, expected) => {
    expect(errorLocations(value)).toEqual(expected);
  });

  it.each<[string, unknown, (string | number)[] | undefined]>([
    ['names and indexes', ['transfers', 0, 'id'], ['transfers', 0, 'id']],
    ['none', undefined, undefined],
    ['a negative index', ['a', -1], undefined],
    ['an object', ['a', {}], undefined],
  ])('path: %s', (_name, value, expected) => {
    expect(errorPath(value)).toEqual(expected);
  });
});

describe('answeredLocations', () => {
  const atField = [{ line: 1, column: 12 }];
  const entry = { message: 'refused', path: ['createTransfer'], locations: atField };
  it.each<[string, AnsweredEntry[] | undefined, ErrorLocation[] | undefined]>([
    ['no answered errors', undefined, undefined],
    ['its entry (path and message): its locations', [entry], atField],
    [
      'its entry with a toJSON() (Mercurius): the JSON’s',
      [{ ...entry, locations: undefined, toJSON: () => ({ ...entry }) }],
      atField,
    ],
    ['another path', [{ ...entry, path: ['other'] }], undefined],
    ['another message (a formatter’s)', [{ ...entry, message: 'Internal' }], undefined],
    ['its entry without locations', [{ ...entry, locations: undefined }], undefined],
    ['locations that are not graphql-js’', [{ ...entry, locations: [{ line: 0 }] }], undefined],
  ])('%s', (_name, errors, expected) => {
    expect(answeredLocations(errors, ['createTransfer'], 'refused')).toEqual(expected);
  });
});
