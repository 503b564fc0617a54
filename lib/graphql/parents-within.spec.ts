import { parentsWithin } from './parents-within.js';

describe('parentsWithin', () => {
  // JSON lengths: "a" 3, big 1002, mid 102.
  const big = 'x'.repeat(1000);
  const mid = 'y'.repeat(100);
  it.each<{
    name: string;
    parents: Record<string, unknown>;
    over: number;
    expected: { kept: string[]; dropped: string[] } | undefined;
  }>([
    {
      name: 'not over the limit: nothing to do',
      parents: { customer: 'a' },
      over: 0,
      expected: undefined,
    },
    {
      name: 'the one large parent left out, the small one kept',
      parents: { customer: big, seller: 'a' },
      over: 500,
      expected: { kept: ['seller'], dropped: ['customer'] },
    },
    {
      name: 'the largest first, then the next, until under',
      parents: { a: mid, b: big, c: 'a' },
      over: 1050,
      expected: { kept: ['c'], dropped: ['b', 'a'] },
    },
    {
      name: 'exactly the largest: it alone',
      parents: { a: mid, b: big },
      over: 1002,
      expected: { kept: ['a'], dropped: ['b'] },
    },
    {
      name: 'all of them not enough: undefined (the outputs are what is too large)',
      parents: { a: mid, b: big },
      over: 5000,
      expected: undefined,
    },
    {
      name: 'over by more than the data, within its key: the parent with its key left out',
      parents: { a: mid, b: big },
      // b's entry: `"b":` (4), its data (1002), a comma.
      over: 1007,
      expected: { kept: ['a'], dropped: ['b'] },
    },
    {
      name: 'over by its key and one byte more: the next one too',
      parents: { a: mid, b: big },
      over: 1008,
      expected: { kept: [], dropped: ['b', 'a'] },
    },
    {
      name: 'the one parent, over by its entry and the wrapper: left out with it',
      // `,"parents":{"row":"x...x"}`: 13 + 6 + 1002.
      parents: { row: big },
      over: 1021,
      expected: { kept: [], dropped: ['row'] },
    },
    {
      name: 'the one parent, over by a byte more than all of it: undefined',
      parents: { row: big },
      over: 1022,
      expected: undefined,
    },
    {
      name: 'no parents: undefined',
      parents: {},
      over: 10,
      expected: undefined,
    },
  ])('$name', ({ parents, over, expected }) => {
    const within = parentsWithin(parents, over);
    expect(within && { kept: Object.keys(within.parents), dropped: within.dropped }).toEqual(
      expected,
    );
  });
});

describe('parentsWithin over the parents’ one graph', () => {
  const note = 'z'.repeat(500);
  /**
   * Two lines (nodes 0 and 2) naming one order (1) with a large note; a third parent (3)
   * holds a large note of its own (4).
   */
  const graph = {
    g: [
      ['o', 'qty', 2, 'order', ['@', 1]],
      ['o', 'id', 7, 'note', note],
      ['o', 'qty', 3, 'order', ['@', 1]],
      ['o', 'id', 9, 'bio', ['@', 4]],
      ['o', 'text', note],
    ],
  };
  const parents = { 'lines.0': { p: 0 }, 'lines.1': { p: 2 }, buyer: { p: 3 } };

  it('the parent weighs what only it reaches: the buyer goes, the shared order stays', () => {
    const within = parentsWithin(parents, 300, graph);
    expect(within?.dropped).toEqual(['buyer']);
    // The kept parents name their nodes anew, in a graph of what they reach.
    expect(within?.parents).toEqual({ 'lines.0': { p: 0 }, 'lines.1': { p: 2 } });
    expect(within?.graph).toEqual({ g: graph.g.slice(0, 3) });
  });

  it('a node two parents share goes only with the last of them', () => {
    // Over by more than the buyer and one line: both lines go, and the order with them.
    const within = parentsWithin(parents, 700, graph);
    expect(within?.dropped.sort()).toEqual(['buyer', 'lines.0', 'lines.1']);
    expect(within?.parents).toEqual({});
    expect(within?.graph).toBeUndefined();
  });

  it('a line alone frees its own node and entry: the order stays with the other', () => {
    const one = { 'lines.0': { p: 0 }, 'lines.1': { p: 2 } };
    const within = parentsWithin(one, 20, { g: graph.g.slice(0, 3) });
    expect(within?.dropped).toHaveLength(1);
    const [left] = Object.keys(within?.parents ?? {});
    expect(within?.parents).toEqual({ [left]: { p: left === 'lines.0' ? 0 : 1 } });
    expect(within?.graph?.g).toHaveLength(2);
  });

  it('all of them not enough: undefined', () => {
    expect(parentsWithin(parents, 5000, graph)).toBeUndefined();
  });

  it("keeps an entry's own object (`s`, moved) and its marks (adversary 110)", () => {
    const marked = {
      'lines.0': { p: 0, s: 2, a: ['sku'] },
      'lines.1': { p: 2, i: null },
      buyer: { p: 3, s: 4 },
    };
    const within = parentsWithin(marked, 300, graph);
    expect(within?.dropped).toEqual(['buyer']);
    expect(within?.parents).toEqual({
      'lines.0': { p: 0, s: 2, a: ['sku'] },
      'lines.1': { p: 2, i: null },
    });
  });
});
