import { parentDataWithin } from './parent-data-within.js';

describe('parentDataWithin', () => {
  const members = ['__parent', '__parentClasses'];
  const big = { json: { bio: 'x'.repeat(100) } };
  const small = { json: { a: 1 } };
  const line = { id: 1, __parent: small };
  const customer = { name: 'Ada', __parent: big, lines: [line] };
  const wire = {
    id: 1,
    __parent: small,
    customer,
    // A JSON scalar's document of the app's whose nodes link up with `__parent`: its data.
    meta: { x: 1, __parent: { note: 'n'.repeat(500) } },
  };
  const holders = [wire, customer, line];
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
      "over by more than all of them weigh: not enough (the app's own __parent is no candidate)",
      weight(big) + 2 * weight(small) + 1,
      undefined,
    ],
  ];
  it.each(cases)('%s', (_name, over, expected) => {
    const within = parentDataWithin(wire, holders, members, over);
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
    // The holders left are the copy's, for a second trim (at the outputs).
    expect(within!.holders).toHaveLength(3 - expected.dropped);
    for (const holder of within!.holders) expect('__parent' in holder).toBe(true);
    // The fields are the wire's, untouched; the app's data too; the value given not changed.
    expect(got.customer.name).toBe('Ada');
    expect(got.meta).toEqual(wire.meta);
    expect(wire.customer.__parent).toBe(big);
  });

  it("leaves out a holder's class tree with its data, weighed together", () => {
    const holder = { id: 1, __parent: small, __parentClasses: { k: { a: { c: 'Row' } } } };
    const both =
      weight(small) +
      Buffer.byteLength(`"__parentClasses":${JSON.stringify(holder.__parentClasses)},`);
    expect(parentDataWithin(holder, [holder], members, both + 1)).toBeUndefined();
    expect(parentDataWithin(holder, [holder], members, both)).toEqual({
      wire: { id: 1 },
      dropped: 1,
      holders: [],
    });
  });

  it('finds a holder inside a list, by identity not by name', () => {
    const item = { id: 2, __parent: big };
    const other = { id: 3, __parent: big };
    const within = parentDataWithin([item, other], [other], members, 1);
    expect(within?.wire).toEqual([item, { id: 3 }]);
  });
});
