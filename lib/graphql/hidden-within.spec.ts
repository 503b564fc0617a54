import { hiddenKey } from './hidden-members.js';
import { hiddenMembers, hiddenWithin } from './hidden-within.js';
import { type Graph, readGraphNodes } from './typed-graph.js';

/** What a member's key and cell take in a node: both, and their commas. */
const pair = (key: unknown, cell: unknown) =>
  JSON.stringify(key).length + JSON.stringify(cell).length + 2;
/** What a node takes in the graph: it and its comma. */
const nodeBytes = (node: unknown) => JSON.stringify(node).length + 1;

describe('hiddenMembers', () => {
  const raw = hiddenKey('raw', false);
  const order = hiddenKey('order', false);
  // Two lines (0, 1), each with a column, a hidden 50-byte cache of its own and a hidden
  // back-reference to one order (4), which itself keeps a hidden 200-byte cache (5).
  const graph: Graph = {
    g: [
      ['o', 'qty', 2, raw, ['@', 2], order, ['@', 4]],
      ['o', 'qty', 3, raw, ['@', 3], order, ['@', 4]],
      ['o', 'note', 'a'.repeat(50)],
      ['o', 'note', 'b'.repeat(50)],
      ['o', 'id', 7, raw, ['@', 5]],
      ['o', 'note', 'c'.repeat(200)],
    ],
  };

  it.each<[string, number[], { node: number; at: number; bytes: number }[]]>([
    [
      "each line's cache is its own; the order two back-references reach is neither's; the " +
        "order's cache is its own, not the back-references'",
      [0, 1],
      [
        { node: 0, at: 3, bytes: pair(raw, ['@', 2]) + nodeBytes(graph.g[2]) },
        { node: 0, at: 5, bytes: pair(order, ['@', 4]) },
        { node: 1, at: 3, bytes: pair(raw, ['@', 3]) + nodeBytes(graph.g[3]) },
        { node: 1, at: 5, bytes: pair(order, ['@', 4]) },
        { node: 4, at: 3, bytes: pair(raw, ['@', 5]) + nodeBytes(graph.g[5]) },
      ],
    ],
    [
      'a root that reaches the order by enumerable data: the back-references free only their keys',
      [0, 1, 4],
      [
        { node: 0, at: 3, bytes: pair(raw, ['@', 2]) + nodeBytes(graph.g[2]) },
        { node: 0, at: 5, bytes: pair(order, ['@', 4]) },
        { node: 1, at: 3, bytes: pair(raw, ['@', 3]) + nodeBytes(graph.g[3]) },
        { node: 1, at: 5, bytes: pair(order, ['@', 4]) },
        { node: 4, at: 3, bytes: pair(raw, ['@', 5]) + nodeBytes(graph.g[5]) },
      ],
    ],
    [
      'only the first line a root: the second line and its members are not candidates',
      [0],
      [
        { node: 0, at: 3, bytes: pair(raw, ['@', 2]) + nodeBytes(graph.g[2]) },
        { node: 0, at: 5, bytes: pair(order, ['@', 4]) + nodeBytes(graph.g[4]) },
        { node: 4, at: 3, bytes: pair(raw, ['@', 5]) + nodeBytes(graph.g[5]) },
      ],
    ],
    ['no roots: none', [], []],
  ])('%s', (_what, roots, expected) => {
    expect(hiddenMembers(graph, roots)).toEqual(expected);
  });
});

describe('hiddenWithin', () => {
  const raw = hiddenKey('raw', false);
  const order = hiddenKey('order', true);
  // Two line parents (0, 1): enumerable columns a resolver reads, a hidden cache each (2, 3),
  // a hidden back-reference to the order (4), whose `lines` are the lines' own objects (5, 6).
  const cache = (c: string) => ['o', 'id', 1, 'note', c.repeat(300)];
  const graph: Graph = {
    g: [
      ['o', 'qty', 2, 'unitPrice', 1, raw, ['@', 2], order, ['@', 4]],
      ['o', 'qty', 2, 'unitPrice', 2, raw, ['@', 3], order, ['@', 4]],
      cache('a'),
      cache('b'),
      ['o', 'id', 9, 'lines', ['@', 7]],
      ['o', 'id', 1],
      ['o', 'id', 2],
      [
        'a',
        2,
        [
          ['@', 5],
          ['@', 6],
        ],
      ],
    ],
  };
  const cacheBytes = pair(raw, ['@', 2]) + nodeBytes(cache('a'));

  it.each<[string, number, { dropped: number; kept: string[][] } | undefined]>([
    ['not over: nothing to do', 0, undefined],
    // The caches are the largest: one goes for a byte, both for more than one frees.
    [
      'over by a byte: the largest cache alone',
      1,
      { dropped: 1, kept: [['order'], ['raw', 'order']] },
    ],
    [
      'over by more than a cache: both caches',
      cacheBytes + 1,
      { dropped: 2, kept: [['order'], ['order']] },
    ],
    // Then the back-references: one key frees a few bytes; the order goes with the last.
    [
      "over by a byte more than the caches: one back-reference's key too, the order kept",
      2 * cacheBytes + 1,
      { dropped: 3, kept: [[], ['order']] },
    ],
    [
      'over by more than the caches and both keys: both back-references, the order with them',
      2 * cacheBytes + 2 * pair(order, ['@', 4]) + 1,
      { dropped: 4, kept: [[], []] },
    ],
    [
      "over by more than all hidden members free: all of them (the rest is the parents')",
      100_000,
      { dropped: 4, kept: [[], []] },
    ],
  ])('%s', (_what, over, expected) => {
    const within = hiddenWithin(graph, [0, 1], over);
    if (!expected) {
      expect(within).toBeUndefined();
      return;
    }
    const read = readGraphNodes(within!.graph) as Record<string, unknown>[];
    const lines = [0, 1].map((index) => read[within!.moved.get(index)!]);
    expect({
      dropped: within!.dropped,
      kept: lines.map((line) =>
        Object.getOwnPropertyNames(line).filter((key) => !/^(qty|unitPrice)$/.test(key)),
      ),
    }).toEqual(expected);
    // The enumerable columns a resolver reads are never left out.
    expect(lines.map((line) => [line.qty, line.unitPrice])).toEqual([
      [2, 1],
      [2, 2],
    ]);
    // Nothing past what the roots reach stays.
    expect(within!.graph.g.length).toBe(new Set(within!.moved.values()).size);
  });

  it('keeps a back-reference where the order is still reached, not enumerable again', () => {
    const within = hiddenWithin(graph, [0, 1], 1)!;
    const read = readGraphNodes(within.graph) as Record<string, unknown>[];
    const line = read[within.moved.get(0)!];
    expect(Object.keys(line)).toEqual(['qty', 'unitPrice']);
    expect((line.order as { id: number }).id).toBe(9);
    expect(Object.getOwnPropertyDescriptor(line, 'order')?.writable).toBe(true);
  });

  it('a graph without hidden members: nothing to do', () => {
    expect(hiddenWithin({ g: [['o', 'a', 'x'.repeat(100)]] }, [0], 50)).toBeUndefined();
  });
});
