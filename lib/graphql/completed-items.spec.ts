import { completedItems } from './completed-items.js';

const sparse = (): (string | undefined)[] => {
  const codes: string[] = ['a'];
  codes[2] = 'c';
  return codes;
};

describe('completedItems', () => {
  it.each([
    ['a dense list', ['a', 'b', 'c'], ['a:0', 'b:1', 'c:2']],
    ['a list with a hole', sparse(), ['a:0', 'undefined:1', 'c:2']],
    ['a list of holes only', new Array<string>(2), ['undefined:0', 'undefined:1']],
    ['an empty list', [], []],
  ])('%s: every index, a hole read as undefined', (_, list, expected) => {
    const seen = completedItems(list, (item, i) => `${String(item)}:${i}`);
    expect(seen).toEqual(expected);
    expect(Object.keys(seen)).toHaveLength(expected.length);
  });

  it('leaves the list as it is (its hole stays a hole)', () => {
    const list = sparse();
    completedItems(list, (item) => item);
    expect(1 in list).toBe(false);
  });
});
