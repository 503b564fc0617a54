import { parentDataWithin } from './parent-data-within.js';

describe('parentDataWithin', () => {
  const big = { json: { bio: 'x'.repeat(100) } };
  const small = { json: { a: 1 } };
  const wire = {
    id: 1,
    __parent: small,
    customer: { name: 'Ada', __parent: big, lines: [{ id: 1, __parent: small }] },
  };
  /** What one member takes: `"__parent":<data>,`. */
  const weight = (data: unknown) => Buffer.byteLength(`"__parent":${JSON.stringify(data)},`);

  const cases: [string, number, { dropped: number; left: string[] } | undefined][] = [
    ['not over the limit: nothing to do', 0, undefined],
    ['over by a byte: the largest only', 1, { dropped: 1, left: ['root', 'line'] }],
    ['over by the largest exactly: it alone', weight(big), { dropped: 1, left: ['root', 'line'] }],
    [
      'over by more than the largest: the next, in order',
      weight(big) + 1,
      { dropped: 2, left: ['line'] },
    ],
    ['over by all of them: all', weight(big) + 2 * weight(small), { dropped: 3, left: [] }],
    [
      'over by more than all of them weigh: not enough',
      weight(big) + 2 * weight(small) + 1,
      undefined,
    ],
  ];
  it.each(cases)('%s', (_name, over, expected) => {
    const within = parentDataWithin(wire, '__parent', over);
    if (!expected) {
      expect(within).toBeUndefined();
      return;
    }
    const got = within!.wire as typeof wire;
    const left = [
      ...('__parent' in got ? ['root'] : []),
      ...('__parent' in got.customer ? ['customer'] : []),
      ...('__parent' in got.customer.lines[0] ? ['line'] : []),
    ];
    expect({ dropped: within!.dropped, left }).toEqual(expected);
    // The fields are the wire's, untouched; the value given is not changed.
    expect(got.customer.name).toBe('Ada');
    expect(wire.customer.__parent).toBe(big);
  });
});
