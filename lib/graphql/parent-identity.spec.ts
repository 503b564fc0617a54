import { adoptsNode, ontoNode } from './parent-identity.js';

describe('adoptsNode: whether a read node can be made a replay parent', () => {
  it.each<[string, unknown, boolean, boolean]>([
    ['a plain object', { qty: 2 }, false, true],
    ['an object with no prototype', Object.create(null), false, true],
    ['one another parent took', { qty: 2 }, true, false],
    ['an array', [1], false, false],
    ['a Map', new Map(), false, false],
    ['a Date', new Date(0), false, false],
    ['no node', undefined, false, false],
    ['null', null, false, false],
  ])('%s: %p', (_name, node, taken, adopts) => {
    expect(adoptsNode(node, taken)).toBe(adopts);
  });
});

describe('ontoNode', () => {
  it('makes the node what was built: its members, their kinds, its prototype; none before', () => {
    class Shape {}
    const built = Object.create(Shape.prototype) as Record<string, unknown>;
    built.id = 1;
    Object.defineProperty(built, 'hidden', { value: 'h', enumerable: false, configurable: true });
    const node: Record<string, unknown> = { id: 'raw', stale: true };
    const holder = { lines: [node] };
    const made = ontoNode(built, node);
    expect(made).toBe(holder.lines[0]);
    expect(Object.keys(made)).toEqual(['id']);
    expect((made as Record<string, unknown>).hidden).toBe('h');
    expect(made).toBeInstanceOf(Shape);
  });
});
