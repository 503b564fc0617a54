import { adoptedPrototype, adoptsNode, ontoNode } from './parent-identity.js';

class Shape {}

describe('adoptsNode: whether a read node can be made a replay parent', () => {
  it.each<[string, unknown, boolean, boolean]>([
    ['a plain object', { qty: 2 }, false, true],
    ['an object with no prototype', Object.create(null), false, true],
    ['one made a parent at an earlier place: the same node', new Shape(), true, true],
    ['a plain one made a parent at an earlier place', { qty: 2 }, true, true],
    ['an object of a class, not made a parent', new Shape(), false, false],
    ['an array', [1], false, false],
    ['a Map', new Map(), false, false],
    ['a Date', new Date(0), false, false],
    ['no node', undefined, false, false],
    ['no node, taken', undefined, true, false],
    ['null', null, false, false],
  ])('%s: %p', (_name, node, taken, adopts) => {
    expect(adoptsNode(node, taken)).toBe(adopts);
  });
});

/** A built parent of class `Shape`: its enumerable members, and `hidden` not enumerable. */
function built(members: Record<string, unknown>, hidden?: string): object {
  const made = Object.assign(Object.create(Shape.prototype) as object, members);
  if (hidden !== undefined) {
    Object.defineProperty(made, 'hidden', { value: hidden, enumerable: false, configurable: true });
  }
  return made;
}

describe('ontoNode: the node made what was built, over its own data', () => {
  it.each<[string, Record<string, unknown>, object[], string[], Record<string, unknown>]>([
    [
      "the node's members the built one lacks stay, where they were (an unselected sku)",
      { id: 1, sku: 'A-1', order: 'o' },
      [built({ id: 1, order: 'o' })],
      ['id', 'sku', 'order'],
      { id: 1, sku: 'A-1', order: 'o' },
    ],
    [
      "the built one's members over the node's, at the node's places",
      { id: 'raw', stale: true },
      [built({ id: 1 })],
      ['id', 'stale'],
      { id: 1, stale: true },
    ],
    [
      "the built one's others after the node's, in its order",
      { sku: 'A-1' },
      [built({ b: 2, a: 1 })],
      ['sku', 'b', 'a'],
      { sku: 'A-1', b: 2, a: 1 },
    ],
    [
      'its members as defined in the built one (not enumerable)',
      { id: 1, hidden: 'raw' },
      [built({ id: 1 }, 'h')],
      ['id'],
      { id: 1, hidden: 'h' },
    ],
    [
      'a second place of the same object onto it: both places’ members, one object',
      { id: 1, sku: 'A-1', order: 'o' },
      [built({ id: 1, position: 'p' }), built({ id: 1, order: 'o', qty: 2 })],
      ['id', 'sku', 'order', 'position', 'qty'],
      { id: 1, sku: 'A-1', order: 'o', position: 'p', qty: 2 },
    ],
  ])('%s', (_name, node, builds, keys, values) => {
    const holder = { lines: [node] };
    for (const each of builds) expect(ontoNode(each, node)).toBe(holder.lines[0]);
    expect(Object.keys(node)).toEqual(keys);
    for (const [name, value] of Object.entries(values)) expect(node[name]).toBe(value);
    expect(node).toBeInstanceOf(Shape);
  });

  it('leaves the built one as it was', () => {
    const made = built({ id: 1 });
    ontoNode(made, { sku: 'A-1' });
    expect(Object.keys(made)).toEqual(['id']);
    expect(made).toBeInstanceOf(Shape);
  });
});

describe('adoptedPrototype: the prototype an adopted node is given', () => {
  const getters = Object.create(Object.prototype) as object;
  it.each<[string, object | null, object | null, object | null]>([
    [
      "a plain node, a built one of a class: the class's",
      Object.prototype,
      Shape.prototype,
      Shape.prototype,
    ],
    [
      'a plain node, a plain built one: plain',
      Object.prototype,
      Object.prototype,
      Object.prototype,
    ],
    [
      'a node without one, a plain built one: none, as the first call had',
      null,
      Object.prototype,
      null,
    ],
    ['a node without one, a built one without one: none', null, null, null],
    [
      "a node without one, a built one of a class: the class's",
      null,
      Shape.prototype,
      Shape.prototype,
    ],
    [
      "a node without one, a built one with getters of its own: the getters'",
      null,
      getters,
      getters,
    ],
    [
      "a node made a parent already (a class), a plain built one: the built one's",
      Shape.prototype,
      Object.prototype,
      Object.prototype,
    ],
    ['a plain node, a built one without one: none', Object.prototype, null, null],
  ])('%s', (_name, node, built, prototype) => {
    expect(adoptedPrototype(node, built)).toBe(prototype);
  });
});

describe('ontoNode: a node without a prototype', () => {
  it.each<[string, object, object | null]>([
    ['built plain (a record that did not tell): the node keeps none', {}, null],
    ['built without one: none', Object.create(null) as object, null],
    ['built of a class: the class', new Shape(), Shape.prototype],
  ])('%s', (_name, made, prototype) => {
    const node = Object.assign(Object.create(null) as object, { id: 1 });
    Object.assign(made, { name: 'urgent' });
    expect(ontoNode(made, node)).toBe(node);
    expect(Object.getPrototypeOf(node)).toBe(prototype);
    expect(Object.keys(node)).toEqual(['id', 'name']);
  });
});
