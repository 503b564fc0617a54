import { entryAbsent, entryInstance, movedEntry, parentEntry } from './parent-entry.js';
import { parentRef } from './parent-graph.js';

describe('parentEntry: a middleware output parent as stored', () => {
  it.each<{ name: string; args: Parameters<typeof parentEntry>; expected: unknown }>([
    { name: 'its node alone (as stored before)', args: [parentRef(3)], expected: { p: 3 } },
    { name: 'its own object too', args: [parentRef(3, 7)], expected: { p: 3, s: 7 } },
    {
      name: 'fields it lacked',
      args: [parentRef(0), ['subtitle']],
      expected: { p: 0, a: ['subtitle'] },
    },
    { name: 'none lacked: no member', args: [parentRef(0), []], expected: { p: 0 } },
    { name: 'no prototype', args: [parentRef(0), undefined, true], expected: { p: 0, i: null } },
    {
      name: 'all of them',
      args: [parentRef(1, 2), ['a'], true],
      expected: { p: 1, s: 2, a: ['a'], i: null },
    },
  ])('$name', ({ args, expected }) => {
    expect(parentEntry(...args)).toEqual(expected);
  });
});

describe('movedEntry: an entry once its graph keeps fewer nodes', () => {
  const moved = new Map([
    [4, 0],
    [9, 1],
  ]);
  it.each<{ name: string; entry: Parameters<typeof movedEntry>[1]; expected: unknown }>([
    { name: 'its node moved', entry: { p: 4 }, expected: { p: 0 } },
    { name: 'its own object moved too', entry: { p: 4, s: 9 }, expected: { p: 0, s: 1 } },
    { name: 'its own object freed: no `s`', entry: { p: 4, s: 5 }, expected: { p: 0 } },
    {
      name: 'its marks as they were',
      entry: { p: 9, a: ['subtitle'], i: null },
      expected: { p: 1, a: ['subtitle'], i: null },
    },
    { name: 'its node freed: none', entry: { p: 5, a: ['x'] }, expected: undefined },
  ])('$name', ({ entry, expected }) => {
    expect(movedEntry(moved, entry)).toEqual(expected);
  });
});

describe('entryAbsent and entryInstance: what a stored entry says', () => {
  it.each<{ name: string; entry: unknown; absent: unknown; instance: unknown }>([
    { name: 'marked', entry: { p: 0, a: ['x'], i: null }, absent: ['x'], instance: null },
    { name: 'stored before the marks', entry: { p: 0 }, absent: undefined, instance: undefined },
    {
      name: 'its own graph (stored before)',
      entry: { g: [] },
      absent: undefined,
      instance: undefined,
    },
    { name: 'none', entry: undefined, absent: undefined, instance: undefined },
    { name: 'no object', entry: 'kept', absent: undefined, instance: undefined },
  ])('$name', ({ entry, absent, instance }) => {
    expect(entryAbsent(entry)).toEqual(absent);
    expect(entryInstance(entry)).toBe(instance);
  });
});
