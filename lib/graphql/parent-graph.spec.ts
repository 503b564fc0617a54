import {
  firstRoots,
  graphReachedBy,
  movedRef,
  ownBytes,
  parentRef,
  parentRefIndex,
  parentRefSource,
  type ParentRef,
} from './parent-graph.js';

/** A node's bytes as the answer holds it: its JSON and a comma. */
const bytes = (node: unknown) => JSON.stringify(node).length + 1;

/**
 * Two lines' data (nodes 0 and 3) naming one order (1), which holds a Date (2); a third
 * parent (4) holds a note of its own (5).
 */
const graph = {
  g: [
    ['o', 'qty', 2, 'order', ['@', 1]],
    ['o', 'id', 7, 'at', ['@', 2]],
    ['d', 0],
    ['o', 'qty', 3, 'order', ['@', 1]],
    ['o', 'note', ['@', 5]],
    ['a', 1, ['x'], 'tag', 'y'],
  ],
};

describe('parentRefIndex', () => {
  it.each<[string, unknown, number | undefined]>([
    ['a node of the shared graph', parentRef(3), 3],
    ['node 0', { p: 0 }, 0],
    ['a graph of its own (stored before)', { g: [['o']] }, undefined],
    ["superjson's form (stored before)", { json: {}, meta: {} }, undefined],
    ['a negative index', { p: -1 }, undefined],
    ['a fraction', { p: 1.5 }, undefined],
    ['a string', { p: '1' }, undefined],
    ['an array', [1], undefined],
    ['null', null, undefined],
  ])('reads %s as %p', (_name, stored, index) => {
    expect(parentRefIndex(stored)).toBe(index);
  });
});

describe('ownBytes', () => {
  it.each<[string, number[], [number, number][]]>([
    [
      "each line alone: the order is both lines', neither's own",
      [0, 3, 4],
      [
        [0, bytes(graph.g[0])],
        [3, bytes(graph.g[3])],
        [4, bytes(graph.g[4]) + bytes(graph.g[5])],
      ],
    ],
    [
      'one line left: the order is its own now',
      [0, 4],
      [
        [0, bytes(graph.g[0]) + bytes(graph.g[1]) + bytes(graph.g[2])],
        [4, bytes(graph.g[4]) + bytes(graph.g[5])],
      ],
    ],
    [
      // One object at several places: its record one node every place names (adversary 109),
      // freed only when the last of them goes.
      'two places naming one node: neither place owns it',
      [4, 4, 0],
      [
        [4, 0],
        [0, bytes(graph.g[0]) + bytes(graph.g[1]) + bytes(graph.g[2])],
      ],
    ],
    ['none', [], []],
  ])('%s', (_name, roots, owned) => {
    expect([...ownBytes(graph, roots)]).toEqual(owned);
  });

  it('marks what a root reaches through a shared node as shared, a cycle too', () => {
    const cyclic = {
      g: [
        ['o', 'a', ['@', 2]],
        ['o', 'b', ['@', 2]],
        ['o', 'next', ['@', 3]],
        ['o', 'back', ['@', 2]],
      ],
    };
    expect([...ownBytes(cyclic, [0, 1])]).toEqual([
      [0, bytes(cyclic.g[0])],
      [1, bytes(cyclic.g[1])],
    ]);
  });
});

describe('graphReachedBy', () => {
  it.each<[string, number[], unknown[], [number, number][]]>([
    ['all kept: the same graph', [0, 3, 4], graph.g, [0, 1, 2, 3, 4, 5].map((i) => [i, i])],
    [
      'one line gone: the order stays, the other line reaches it',
      [3, 4],
      [
        ['o', 'id', 7, 'at', ['@', 1]],
        ['d', 0],
        ['o', 'qty', 3, 'order', ['@', 0]],
        ['o', 'note', ['@', 4]],
        ['a', 1, ['x'], 'tag', 'y'],
      ],
      [
        [1, 0],
        [2, 1],
        [3, 2],
        [4, 3],
        [5, 4],
      ],
    ],
    [
      'both lines gone: the order goes with them',
      [4],
      [
        ['o', 'note', ['@', 1]],
        ['a', 1, ['x'], 'tag', 'y'],
      ],
      [
        [4, 0],
        [5, 1],
      ],
    ],
    ['none kept: nothing', [], [], []],
  ])('%s', (_name, roots, nodes, moved) => {
    const kept = graphReachedBy(graph, roots);
    expect(kept.graph.g).toEqual(nodes);
    expect([...kept.moved]).toEqual(moved);
  });
});

describe('parentRefSource', () => {
  it.each<[string, unknown, number | undefined]>([
    ['a parent whose own object is node 4', parentRef(3, 4), 4],
    ['a parent whose object the graph does not hold', parentRef(3), undefined],
    ['no node of the shared graph', { s: 4 }, undefined],
    ['a negative index', { p: 3, s: -1 }, undefined],
  ])('reads %s as %p', (_name, stored, source) => {
    expect(parentRefSource(stored)).toBe(source);
  });
});

describe('firstRoots: by node, the first root that reaches it', () => {
  it.each<[string, number[], number[]]>([
    ['the order is the first line’s', [0, 3, 4], [0, 0, 0, 3, 4, 4]],
    ['the second line first', [3, 0, 4], [0, 3, 3, 3, 4, 4]],
    ['none', [], [-1, -1, -1, -1, -1, -1]],
  ])('%s', (_name, roots, firsts) => {
    expect(firstRoots(graph, roots)).toEqual(firsts);
  });
});

describe('graphReachedBy: the classes of its nodes', () => {
  it('keeps the classes of the nodes kept, by their new index', () => {
    const named = { ...graph, c: { '1': { c: 'Order' }, '5': { c: 'Tag' } } };
    expect(graphReachedBy(named, [3]).graph).toEqual({
      g: [['o', 'id', 7, 'at', ['@', 1]], graph.g[2], ['o', 'qty', 3, 'order', ['@', 0]]],
      c: { '0': { c: 'Order' } },
    });
    expect(graphReachedBy(named, [4]).graph).toEqual({
      g: [['o', 'note', ['@', 1]], graph.g[5]],
      c: { '1': { c: 'Tag' } },
    });
    expect(graphReachedBy(named, [2]).graph).toEqual({ g: [graph.g[2]] });
  });
});

describe("movedRef: a kept parent's ref once the graph shrank", () => {
  /** Nodes 0, 2, 5 kept (renumbered 0, 1, 2); 1, 3, 4 went. */
  const moved = new Map([
    [0, 0],
    [2, 1],
    [5, 2],
  ]);
  it.each<[string, ParentRef, ParentRef | undefined]>([
    ['its node kept, no own object: renumbered', { p: 2 }, { p: 1 }],
    [
      'its node and its own object both still reached: both renumbered',
      { p: 2, s: 5 },
      { p: 1, s: 2 },
    ],
    // Adversary 108: the line's own row was reached only through the summary's data, gone.
    ['its own object no longer reached: `s` goes, its node stays', { p: 5, s: 3 }, { p: 2 }],
    ['its own object is its node (reached so)', { p: 0, s: 0 }, { p: 0, s: 0 }],
    ['its node gone: none', { p: 1, s: 2 }, undefined],
    ['its node gone, no own object: none', { p: 4 }, undefined],
  ])('%s', (_name, ref, expected) => {
    expect(movedRef(moved, ref)).toEqual(expected);
  });
});
