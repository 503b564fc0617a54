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
