import { type ErrorEntry, type OwnLocated, locatedAsFirst } from './jit-located.js';

describe('locatedAsFirst', () => {
  const noted: OwnLocated[] = [
    {
      path: ['createTransfer'],
      message: 'amount over the limit',
      locations: [{ line: 1, column: 41 }],
    },
  ];
  const entryOf = (
    entry: ErrorEntry,
    locations: readonly unknown[],
    path?: readonly (string | number)[],
  ) => ({ ...entry, locations, ...(path ? { path } : {}) });
  const underField: OwnLocated = {
    path: ['a', 'tags'],
    message: 'Cannot return null for non-nullable field Order.tags.',
    locations: [{ line: 1, column: 20 }],
    ownPath: ['a', 'tags', 1],
  };
  const at = (column: number) => [{ line: 1, column }];

  it.each<{
    name: string;
    errors: ErrorEntry[] | undefined;
    noted: OwnLocated[];
    expected: unknown;
  }>([
    {
      name: 'graphql-jit located the replay at the field: the first answer’s locations back',
      errors: [{ message: 'amount over the limit', path: ['createTransfer'], locations: at(12) }],
      noted,
      expected: [{ message: 'amount over the limit', path: ['createTransfer'], locations: at(41) }],
    },
    {
      name: 'graphql-js kept them already: nothing changes',
      errors: [{ message: 'amount over the limit', path: ['createTransfer'], locations: at(41) }],
      noted,
      expected: undefined,
    },
    {
      name: 'another field’s error with the same message: left as it is',
      errors: [{ message: 'amount over the limit', path: ['b'], locations: at(12) }],
      noted,
      expected: undefined,
    },
    {
      name: 'the app’s formatter changed the message: left as it is',
      errors: [{ message: 'refused', path: ['createTransfer'], locations: at(12) }],
      noted,
      expected: undefined,
    },
    {
      name: 'no replay noted: left as it is',
      errors: [{ message: 'amount over the limit', path: ['createTransfer'], locations: at(12) }],
      noted: [],
      expected: undefined,
    },
    {
      name: 'a middleware field’s error under it, located at the field: its own path back',
      errors: [{ message: underField.message, path: ['a', 'tags'], locations: at(20) }],
      noted: [underField],
      expected: [{ message: underField.message, path: ['a', 'tags', 1], locations: at(20) }],
    },
    {
      name: 'that error where it belongs already: nothing changes',
      errors: [{ message: underField.message, path: ['a', 'tags', 1], locations: at(20) }],
      noted: [{ ...underField, path: ['a', 'tags', 1] }],
      expected: undefined,
    },
    { name: 'no errors', errors: undefined, noted, expected: undefined },
  ])('$name', ({ errors, noted: replays, expected }) => {
    expect(locatedAsFirst(errors, replays, entryOf)).toEqual(expected);
  });
});
