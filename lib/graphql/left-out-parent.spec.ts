import { leftOutRef, leftOutSource, type LeftOutRef } from './left-out-parent.js';

describe("leftOutRef: a left-out parent's own object's node once the graph shrank", () => {
  /** Nodes 0, 2, 5 kept (renumbered 0, 1, 2); 1, 3, 4 went. */
  const moved = new Map([
    [0, 0],
    [2, 1],
    [5, 2],
  ]);
  it.each<[string, number | undefined, LeftOutRef | undefined]>([
    // Adversary 109: line 1's row, reached by the other lines' order, stays: the line is it.
    ['its own object still reached (another parent reaches it back): renumbered', 5, { s: 2 }],
    ['its own object the first node, still reached', 0, { s: 0 }],
    ['its own object no longer reached: none (nothing left to be)', 3, undefined],
    ['no own object in the graph: none', undefined, undefined],
  ])('%s', (_name, source, expected) => {
    expect(leftOutRef(moved, source)).toEqual(expected);
  });
});

describe('leftOutSource: the node a stored left-out `__parent` names', () => {
  it.each<[string, unknown, number | undefined]>([
    ['its own object alone', { s: 3 }, 3],
    ['the first node', { s: 0 }, 0],
    ['a kept parent (its data too): not left out', { p: 1, s: 3 }, undefined],
    ['a kept parent with no own object', { p: 1 }, undefined],
    ['one stored before, its own graph', { g: [['o', 's', 1]] }, undefined],
    ["one stored before, superjson's form", { json: { s: 1 } }, undefined],
    ['another member beside it: not ours', { s: 1, note: 'x' }, undefined],
    ['not an index: negative', { s: -1 }, undefined],
    ['not an index: a fraction', { s: 1.5 }, undefined],
    ['not an index: a string', { s: '1' }, undefined],
    ['an array', [1], undefined],
    ['null', null, undefined],
    ['none', undefined, undefined],
  ])('%s', (_name, stored, expected) => {
    expect(leftOutSource(stored)).toBe(expected);
  });
});
