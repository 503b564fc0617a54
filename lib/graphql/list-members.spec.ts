import {
  adoptsList,
  keepsListItself,
  keptListItems,
  LIST_HOLES,
  listMembers,
  withListMembers,
} from './list-members.js';

/** Each own key of `value` but its items and length, with how it is defined. */
const members = (value: object) =>
  Reflect.ownKeys(value)
    .filter((key) => key !== 'length' && !/^\d+$/.test(String(key)))
    .map((key) => {
      const { value: item, enumerable, writable } = Reflect.getOwnPropertyDescriptor(value, key)!;
      return [String(key), item, enumerable, writable];
    });

describe('listMembers', () => {
  const list = (define: (of: unknown[]) => void) => {
    const of: unknown[] = [{ id: 1 }, { id: 2 }];
    define(of);
    return of;
  };
  it.each<[string, unknown[], unknown[][] | undefined]>([
    ['a bare list: nothing kept', list(() => undefined), undefined],
    [
      "a page's total kept out of JSON: kept hidden, as read-only",
      list((of) => Object.defineProperty(of, 'total', { value: 43 })),
      [['total', 43, false, false]],
    ],
    [
      'a plain member: kept enumerable and writable',
      list((of) => Object.assign(of, { cursor: 'c' })),
      [['cursor', 'c', true, true]],
    ],
    [
      'a registered symbol kept; an unregistered one and a getter not',
      list((of) => {
        Object.defineProperty(of, Symbol.for('tag'), { value: 't', enumerable: true });
        Object.defineProperty(of, Symbol('orm'), { value: 1 });
        Object.defineProperty(of, 'eta', {
          get: () => {
            throw new Error('never read');
          },
        });
      }),
      [['Symbol(tag)', 't', true, false]],
    ],
    [
      'an index past the items is an item (the list grows to it): nothing kept',
      list((of) => Object.defineProperty(of, '7', { value: 'x', enumerable: true })),
      undefined,
    ],
    [
      "a Set's own member: kept (a Set's items are no members)",
      Object.assign(new Set([{ id: 1 }]), { cursor: 'c' }) as unknown as unknown[],
      [['cursor', 'c', true, true]],
    ],
  ])('%s', (_what, of, expected) => {
    const kept = listMembers(of);
    if (!expected) {
      // A numeric key past the items makes the array longer: an item (a hole before it).
      expect(kept).toBeUndefined();
      return;
    }
    expect(kept).toHaveLength(0);
    expect(members(kept!)).toEqual(expected);
  });
});

describe('withListMembers', () => {
  it.each<[string, unknown, unknown, unknown[][]]>([
    [
      'onto the rebuilt list, as kept',
      [1, 2],
      Object.defineProperty([], 'total', { value: 43 }),
      [['total', 43, false, false]],
    ],
    [
      'never over a member the rebuilt list has',
      Object.assign([1], { total: 1 }),
      Object.assign([], { total: 43 }),
      [['total', 1, true, true]],
    ],
    ['nothing where the kept data is no list', [1], { total: 43 }, []],
    [
      "a Set's own member onto the Set rebuilt (its items no members)",
      new Set([1]),
      Object.assign(new Set(), { total: 43 }),
      [['total', 43, true, true]],
    ],
    [
      "never a list record's holes (the library's)",
      [1, 2],
      Object.defineProperty([], LIST_HOLES, { value: [1], enumerable: true }),
      [],
    ],
  ])('%s', (_what, target, kept, expected) => {
    withListMembers(target, kept);
    expect(members(target as object)).toEqual(expected);
    // The items are the answer's.
    expect([...(target as Iterable<unknown>)].length).toBeGreaterThan(0);
  });
});

describe('keepsListItself', () => {
  const item = { id: 2 };
  const list = [{ id: 1 }, item];
  it.each<[string, (object: object) => boolean, boolean]>([
    ['the graph holds the array (a hidden snapshot of it)', (object) => object === list, true],
    ["the graph holds one of its items (the page's `primary`)", (object) => object === item, true],
    ['nothing else reaches it: its members copied alone', () => false, false],
  ])('%s', (_name, inGraph, expected) => {
    expect(keepsListItself(list, inGraph)).toBe(expected);
  });
});

describe('adoptsList', () => {
  it.each<[string, unknown, unknown, boolean]>([
    ['the array itself, as many items', [{ id: 1 }], [{ id: 1 }], true],
    ['empty both', [], [], true],
    [
      'a members-only copy of a list with items',
      [{ id: 1 }],
      Object.assign([], { total: 1 }),
      false,
    ],
    ['no array kept', [{ id: 1 }], { total: 1 }, false],
    ['no list rebuilt', null, [], false],
  ])('%s', (_name, rebuilt, kept, expected) => {
    expect(adoptsList(rebuilt, kept)).toBe(expected);
  });
});

describe('keptListItems', () => {
  const a = { id: 1 };
  const b = { id: 2 };
  const when = new Date(0);
  const row = [a, 3];
  const selfHolding: unknown[] = [b];
  selfHolding.push(selfHolding);
  it.each<[string, unknown[][], object[]]>([
    ['the items of a list', [[a, b]], [a, b]],
    ['a leaf list: its numbers none, its Date one', [[1, when]], [when]],
    ['a list of lists: the items of its rows, never a row', [[row, [b]]], [a, b]],
    ['one row in two lists: its items once', [[row], [row]], [a]],
    ['a list holding itself: walked once', [selfHolding], [b]],
    ['holes and nulls: none', [[null, undefined, ...new Array<unknown>(1), a]], [a]],
    ['no list kept', [], []],
  ])('%s', (_name, lists, expected) => {
    expect(keptListItems(lists)).toEqual(new Set(expected));
  });
});
