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
