import { type NotedPlace, objectNodes } from './object-nodes.js';

describe('objectNodes', () => {
  const product = { id: 7 };
  const other = { id: 8 };
  const line = { id: 1 };
  const [a, b, c] = [{}, {}, {}];
  /** `line` is a node of the graph (its own data reaches back to it): node 9. */
  const graphNode = (source: object) => (source === line ? 9 : undefined);
  it.each<[string, NotedPlace[], (number | undefined)[]]>([
    ['one object at one place: none', [{ source: product, at: a, root: 0 }], [undefined]],
    [
      'one object at three places: its first record at each (adversary 111)',
      [
        { source: product, at: a, root: 0 },
        { source: product, at: b, root: 0 },
        { source: product, at: c, root: 0 },
      ],
      [0, 0, 0],
    ],
    [
      'its places with records that differ: the first, the one object at each',
      [
        { source: product, at: a, root: 0 },
        { source: product, at: b, root: 1 },
      ],
      [0, 0],
    ],
    [
      'two records (__parent and __kept) at one place: still one place, none',
      [
        { source: product, at: a, root: 0 },
        { source: product, at: a, root: 1 },
      ],
      [undefined, undefined],
    ],
    [
      'two objects with equal data: each its own',
      [
        { source: product, at: a, root: 0 },
        { source: other, at: b, root: 1 },
      ],
      [undefined, undefined],
    ],
    [
      'an object the graph holds: its node, at one place or several',
      [
        { source: line, at: a, root: 2 },
        { source: line, at: b, root: 2 },
        { source: product, at: c, root: 0 },
      ],
      [9, 9, undefined],
    ],
  ])('%s', (_what, noted, expected) => {
    expect(objectNodes(noted, graphNode)).toEqual(expected);
  });
});
