import * as graphql from 'graphql';
import {
  fieldPlace,
  type HeldMember,
  isPlace,
  laterHeld,
  laterRead,
  type Place,
  placeOfPath,
} from './read-places.js';

/** The field nodes of `primary` in `{ <selection> }`, aliases included. */
function nodesOf(selection: string): graphql.FieldNode[] {
  const document = graphql.parse(`{ ${selection} }`);
  const [operation] = document.definitions as [graphql.OperationDefinitionNode];
  return operation.selectionSet.selections as graphql.FieldNode[];
}

describe('fieldPlace', () => {
  it.each<{ name: string; selection: string; expected: Place }>([
    { name: 'a field by its name', selection: 'primary { id }', expected: [['o'], ['primary']] },
    {
      name: 'a field under an alias: by the alias GraphQL answers it at',
      selection: 'main: primary { id }',
      expected: [['o'], ['main']],
    },
    {
      name: 'a field under two aliases (stored once): both keys, once each',
      selection: 'a: primary { id } b: primary { url } a: primary { sku }',
      expected: [['o'], ['a', 'b']],
    },
  ])('$name', ({ selection, expected }) => {
    expect(fieldPlace([['o']], nodesOf(selection))).toEqual(expected);
  });
});

describe('placeOfPath', () => {
  it.each<{ name: string; path: (string | number)[]; expected: Place }>([
    { name: 'the root field', path: ['placeOrder'], expected: [['placeOrder']] },
    {
      name: 'keys and list indexes',
      path: ['placeOrder', 'lines', 0, 'tags', 2],
      expected: [['placeOrder'], ['lines'], 0, ['tags'], 2],
    },
  ])('$name', ({ path, expected }) => {
    expect(placeOfPath(path)).toEqual(expected);
  });
});

describe('isPlace', () => {
  const primary: Place = [['placeOrder'], ['primary']];
  const firstLine: Place = [['placeOrder'], ['lines'], 0];
  it.each<{ name: string; place: Place; path: (string | number)[]; expected: boolean }>([
    { name: 'the same keys', place: primary, path: ['placeOrder', 'primary'], expected: true },
    { name: 'another key', place: primary, path: ['placeOrder', 'lines'], expected: false },
    { name: 'the same index', place: firstLine, path: ['placeOrder', 'lines', 0], expected: true },
    {
      name: 'another index (the line at lines[1] is another place)',
      place: firstLine,
      path: ['placeOrder', 'lines', 1],
      expected: false,
    },
    {
      name: 'a key where the place has an index',
      place: firstLine,
      path: ['placeOrder', 'lines', '0'],
      expected: false,
    },
    {
      name: 'a path under the place (a field of it): not the place',
      place: primary,
      path: ['placeOrder', 'primary', 'url'],
      expected: false,
    },
    { name: 'a path above the place', place: primary, path: ['placeOrder'], expected: false },
    {
      name: 'any of its aliases (a field stored once for all)',
      place: [['placeOrder'], ['a', 'b']],
      path: ['placeOrder', 'b'],
      expected: true,
    },
    {
      name: 'another mutation field of the operation (its alias)',
      place: [['first'], ['primary']],
      path: ['second', 'primary'],
      expected: false,
    },
  ])('$name', ({ place, path, expected }) => {
    expect(isPlace(place, path)).toBe(expected);
  });
});

describe('laterRead', () => {
  const list = [1];
  it.each<{
    name: string;
    earlier: { value: unknown } | undefined;
    later: unknown;
    expected: ReturnType<typeof laterRead>;
  }>([
    { name: 'no earlier place read it: added', earlier: undefined, later: 'x', expected: 'add' },
    {
      name: 'an earlier place read undefined: read, the same',
      earlier: { value: undefined },
      later: undefined,
      expected: 'same',
    },
    { name: 'the same text', earlier: { value: 'line 1' }, later: 'line 1', expected: 'same' },
    { name: 'the same object', earlier: { value: list }, later: list, expected: 'same' },
    { name: 'NaN read twice', earlier: { value: NaN }, later: NaN, expected: 'same' },
    {
      name: 'another signature (a getter signing afresh): at its place',
      earlier: { value: '?sig=4' },
      later: '?sig=5',
      expected: 'placed',
    },
    {
      name: 'a list read again (another array of the same items): at its place',
      earlier: { value: [1] },
      later: [1],
      expected: 'placed',
    },
  ])('$name', ({ earlier, later, expected }) => {
    expect(laterRead(earlier, later)).toBe(expected);
  });
});

describe('laterHeld: a later place against what the node answers', () => {
  const getter = () => 'line 1';
  const notStored = () => {
    throw new Error('not stored');
  };
  const otherNotStored = () => {
    throw new Error('not stored');
  };
  it.each<{
    name: string;
    earlier: HeldMember | undefined;
    later: HeldMember;
    expected: ReturnType<typeof laterHeld>;
  }>([
    {
      name: 'the node lacks it: added',
      earlier: undefined,
      later: { value: getter, stored: true },
      expected: 'add',
    },
    {
      name: 'the same data',
      earlier: { value: 1, stored: true },
      later: { value: 1, stored: true },
      expected: 'same',
    },
    {
      name: 'another stored read (a second signature): at its place',
      earlier: { value: getter, stored: true },
      later: { value: () => 'sig=2', stored: true },
      expected: 'placed',
    },
    {
      name: 'stored at the node, not stored at this place (a retry selects it here too): at its place',
      earlier: { value: getter, stored: true },
      later: { value: notStored, stored: false },
      expected: 'placed',
    },
    {
      name: 'not stored at the node, stored at this place: the node takes the stored one',
      earlier: { value: notStored, stored: false },
      later: { value: getter, stored: true },
      expected: 'replace',
    },
    {
      name: 'not stored at both (two throwing getters): the same',
      earlier: { value: notStored, stored: false },
      later: { value: otherNotStored, stored: false },
      expected: 'same',
    },
    {
      name: 'a failed read at the node, a read at this place: at its place',
      earlier: { value: notStored, stored: true },
      later: { value: getter, stored: true },
      expected: 'placed',
    },
  ])('$name', ({ earlier, later, expected }) => {
    expect(laterHeld(earlier, later)).toBe(expected);
  });
});
