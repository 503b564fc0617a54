import { keptItem, type KeptItem } from './kept-items.js';

class Money {
  constructor(readonly cents: number) {}
}

describe('keptItem', () => {
  const line = { id: 1 };
  const date = new Date('2026-02-01T00:00:00Z');
  it.each<[string, unknown, unknown, boolean, KeptItem]>([
    ['the very item', line, line, false, 'kept'],
    ['a number the answer holds', 3, 4, false, 'built'],
    ['a string over a node', 'a', { id: 1 }, false, 'built'],
    ['null', null, { id: 1 }, false, 'built'],
    ['an object of the answer, its node plain', { id: 1 }, { id: 1 }, false, 'node'],
    [
      'an object of the answer, its node with no prototype',
      { id: 1 },
      Object.create(null),
      false,
      'node',
    ],
    ['its node made an object at another place already', { id: 1 }, { id: 1 }, true, 'kept'],
    ['a Date rebuilt, its node the first Date', new Date(date.getTime()), date, false, 'kept'],
    [
      'an object of a scalar class, its node of that class',
      new Money(1),
      new Money(1),
      false,
      'kept',
    ],
    ['a Date over a node of another class', new Date(0), new Money(0), false, 'built'],
    [
      'a plain object over a Date node (no object of the answer made a Date)',
      { id: 1 },
      date,
      false,
      'built',
    ],
    ['a row of a grid, its node a row as long', [1, 2], [1, 2], false, 'list'],
    ['a row of a grid, its node of another length', [1, 2], [1], false, 'built'],
    ['a row of a grid, no array kept', [1, 2], { 0: 1, 1: 2 }, false, 'built'],
    ['an object of the answer over an array node', { id: 1 }, [1], false, 'built'],
  ])('%s', (_name, built, kept, taken, expected) => {
    expect(keptItem(built, kept, taken)).toBe(expected);
  });
});
