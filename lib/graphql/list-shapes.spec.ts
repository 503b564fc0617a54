import { LIST_HOLES } from './list-members.js';
import { holesOf, listShape, shapedList } from './list-shapes.js';
import { readGraph, writeGraph } from './typed-graph.js';

/** A list with a hole at 1 (`lines[line.position] = line`, position 1 not loaded). */
const sparse = (): unknown[] => {
  const list: unknown[] = [];
  list[0] = { id: 1 };
  list[2] = { id: 3 };
  return list;
};

/** A page with its count on the page itself, out of JSON. */
const page = (): unknown[] => Object.defineProperty([{ id: 1 }], 'total', { value: 43 });

/** How a resolver tells the collection it is given: its kind, its holes, its `total`. */
const seen = (list: unknown) => ({
  kind: Object.prototype.toString.call(list),
  holes: Array.isArray(list) ? holesOf(list) : [],
  total: (list as { total?: unknown }).total,
  symbols: Object.getOwnPropertySymbols(list),
});

/** The record as a replay reads it back: through the graph of the parents' data. */
const stored = (shape: unknown) => readGraph(writeGraph(shape).graph);

describe('holesOf', () => {
  it.each<[string, unknown[], number[]]>([
    ['a dense list: none', [1, 2], []],
    ['filled by index: the indexes never written', sparse(), [1]],
    ['an own undefined is an item, no hole', [1, undefined], []],
    ['a list of holes only', new Array(2), [0, 1]],
  ])('%s', (_what, list, expected) => {
    expect(holesOf(list)).toEqual(expected);
  });
});

describe('listShape', () => {
  it.each<[string, unknown, ReturnType<typeof seen> | undefined]>([
    ['a dense bare array: the items make it again', [{ id: 1 }], undefined],
    ['no collection (a one-shot iterable read as an array): none', { id: 1 }, undefined],
    [
      'an array with a hole: its indexes',
      sparse(),
      { kind: '[object Array]', holes: [], total: undefined, symbols: [LIST_HOLES] },
    ],
    [
      "a page's own member: kept",
      page(),
      { kind: '[object Array]', holes: [], total: 43, symbols: [] },
    ],
    [
      'a Set: its kind, empty',
      new Set([{ id: 1 }]),
      { kind: '[object Set]', holes: [], total: undefined, symbols: [] },
    ],
    [
      'a Map: its kind, empty',
      new Map([['a', 1]]),
      { kind: '[object Map]', holes: [], total: undefined, symbols: [] },
    ],
    [
      'a typed array: its kind, empty',
      Uint8Array.of(1, 2),
      { kind: '[object Uint8Array]', holes: [], total: undefined, symbols: [] },
    ],
  ])('%s', (_what, value, expected) => {
    const shape = listShape(value);
    if (!expected) {
      expect(shape).toBeUndefined();
      return;
    }
    expect(seen(shape)).toEqual(expected);
    // A record holds no items: the answer does.
    expect([...(shape as Iterable<unknown>)]).toEqual([]);
  });
});

describe('shapedList: the first call (the record in memory) and a replay (read back) alike', () => {
  const views = [{ id: 1 }, undefined, { id: 3 }];
  const rebuilt = [{ id: 1 }, null, { id: 3 }];
  it.each<[string, unknown, unknown[], ReturnType<typeof seen>, unknown[]]>([
    [
      "a sparse list: its hole a hole again, whatever the hole's item",
      sparse(),
      rebuilt,
      { kind: '[object Array]', holes: [1], total: undefined, symbols: [] },
      [{ id: 1 }, { id: 3 }],
    ],
    [
      'a sparse list of views: the same',
      sparse(),
      views,
      { kind: '[object Array]', holes: [1], total: undefined, symbols: [] },
      [{ id: 1 }, { id: 3 }],
    ],
    [
      "a page: its own member on the items' list",
      page(),
      [{ id: 1 }],
      { kind: '[object Array]', holes: [], total: 43, symbols: [] },
      [{ id: 1 }],
    ],
    [
      'a Set: a Set of the items, in order',
      new Set([{ id: 1 }, { id: 2 }]),
      [{ id: 1 }, { id: 2 }],
      { kind: '[object Set]', holes: [], total: undefined, symbols: [] },
      [{ id: 1 }, { id: 2 }],
    ],
    [
      'a Map: a Map of the entries',
      new Map([['a', { id: 1 }]]),
      [['a', { id: 1 }]],
      { kind: '[object Map]', holes: [], total: undefined, symbols: [] },
      [['a', { id: 1 }]],
    ],
    [
      'a typed array: one of its kind',
      Uint8Array.of(1, 2),
      [1, 2],
      { kind: '[object Uint8Array]', holes: [], total: undefined, symbols: [] },
      [1, 2],
    ],
  ])('%s', (_what, value, items, expected, reduced) => {
    for (const shape of [listShape(value), stored(listShape(value))]) {
      const made = shapedList([...items], shape);
      expect(seen(made)).toEqual(expected);
      // What `reduce`, `forEach`, `for...of` read: every item, never a hole.
      const read: unknown[] = [];
      if (Array.isArray(made)) made.forEach((item) => read.push(item));
      else read.push(...(made as Iterable<unknown>));
      expect(read).toEqual(reduced);
    }
  });

  it.each<[string, unknown[], unknown]>([
    ['no record: the items as they are', [1], undefined],
    ['a record of no collection: the items as they are', [1], { total: 43 }],
    ['a Map of what are no entries: the items as they are', [{ id: 1 }], new Map()],
    ['a typed array of what it cannot hold: the items as they are', [1n], new Float64Array()],
    ['a dense record: the items themselves, its members on them', [1], page()],
  ])('%s', (_what, items, shape) => {
    expect(shapedList(items, shape)).toBe(items);
  });

  it("holes a record names past the items' length, or not indexes, are none", () => {
    const shape = Object.defineProperty([], LIST_HOLES, { value: [5, -1, 'x'], enumerable: true });
    const made = shapedList([1, 2], shape) as unknown[];
    expect(holesOf(made)).toEqual([]);
  });
});
