import 'reflect-metadata';
import { Exclude } from 'class-transformer';
import { loadClassTransforms } from './class-transforms.js';
import { classTreeOf, namedByTree, reachesKnownClass } from './class-tree.js';

/** A class class-transformer knows (its @Exclude()), as an app's entity is. */
class Device {
  name = 'phone';
  @Exclude() pushToken = 'tok';
}

/** A class it does not know: plain data to a serializer. */
class Row {
  id = 1;
}

beforeAll(() => loadClassTransforms());

describe('classTreeOf: where objects of known classes are in stored data', () => {
  it.each<[string, unknown, unknown]>([
    ['a primitive', 'x', undefined],
    ['plain data', { a: 1, b: [1, 2] }, undefined],
    ['an instance of a class it does not know', new Row(), undefined],
    ['an instance of a known class', new Device(), { c: 'Device' }],
    [
      'a list of them',
      [new Device(), 1, new Device()],
      { k: { 0: { c: 'Device' }, 2: { c: 'Device' } } },
    ],
    [
      'one nested in plain data',
      { settings: { primary: new Device() } },
      { k: { settings: { k: { primary: { c: 'Device' } } } } },
    ],
  ])('%s', (_name, value, tree) => {
    expect(classTreeOf(value, new Set())).toEqual(tree);
  });

  it('leaves a cycle unnamed past its first visit', () => {
    const cyclic: Record<string, unknown> = { device: new Device() };
    cyclic.self = cyclic;
    expect(classTreeOf(cyclic, new Set())).toEqual({ k: { device: { c: 'Device' } } });
  });
});

describe('namedByTree: the stored data named by its classes again', () => {
  it('names each place by its class, its data its own', () => {
    const stored = { list: [{ name: 'phone', pushToken: 'tok' }, 3] };
    const tree = classTreeOf({ list: [new Device(), 3] }, new Set());
    const again = namedByTree(stored, { k: { list: tree!.k!.list } }) as {
      list: [{ constructor: unknown; name: string }, number];
    };
    expect(again.list[0].constructor).toBe(Device);
    expect(Object.keys(again.list[0])).toEqual(['name', 'pushToken']);
    expect(again.list[0]).not.toBeInstanceOf(Device);
    expect(again.list[1]).toBe(3);
  });

  it('refuses a class it does not know as one class (a replay answers an error there)', () => {
    expect(() => namedByTree({}, { c: 'NoSuchClass' })).toThrow(/NoSuchClass/);
  });

  /** Two classes class-transformer knows under one name (two modules' `User`). */
  const Twin = (() => {
    class User {
      @Exclude() hash = 'h';
    }
    return User;
  })();
  const OtherTwin = (() => {
    class User {
      @Exclude() ip = 'i';
    }
    return User;
  })();
  it.each<[string, unknown, unknown, 'named' | 'plain' | 'throws', string[]]>([
    ['a known class, refusing: named', { name: 'a' }, { c: 'Device' }, 'named', []],
    ['a known class, leaving plain: named', { name: 'a' }, { c: 'Device' }, 'named', []],
    ['an unknown class, refusing (the answer itself): throws', {}, { c: 'User' }, 'throws', []],
    [
      'an unknown class, leaving plain (`__parent`): plain, told',
      {},
      { c: 'User' },
      'plain',
      ['User'],
    ],
    [
      'one nested, leaving plain: plain there, told',
      { owner: { name: 'Ada' } },
      { k: { owner: { c: 'User' } } },
      'plain',
      ['User'],
    ],
  ])('%s', (name, stored, tree, expected, told) => {
    expect([Twin.name, OtherTwin.name]).toEqual(['User', 'User']);
    const said: string[] = [];
    const leave = name.includes('leaving plain');
    const run = () => namedByTree(stored, tree, leave ? (c) => said.push(c) : undefined);
    if (expected === 'throws') {
      expect(run).toThrow(/User/);
      return;
    }
    const again = run() as Record<string, unknown>;
    const place = 'owner' in again ? (again.owner as object) : again;
    if (expected === 'named') expect(place.constructor).toBe(Device);
    else expect(place.constructor).toBe(Object);
    expect(said).toEqual(told);
  });

  it('leaves data without a tree as it is', () => {
    const data = { a: 1 };
    expect(namedByTree(data, undefined)).toBe(data);
  });
});

describe('reachesKnownClass: whether a class tree is worth walking for', () => {
  const order: Record<string, unknown> = { id: 1, lines: [] };
  (order.lines as unknown[]).push({ id: 2, order }, { id: 3, order });
  it.each<[string, unknown[], boolean]>([
    ['nothing', [], false],
    ['primitives', [1, 'x', null], false],
    ['plain data with a back-reference (a cycle)', [{ order }, { order }], false],
    ['an instance of a class it does not know', [{ row: new Row() }], false],
    ['a known class, deep in a list', [{ a: [{ b: [new Device()] }] }], true],
    ['a known class under the second value only', [{ order }, { device: new Device() }], true],
    ['a known class itself', [new Device()], true],
  ])('%s: %p', (_name, values, reaches) => {
    expect(reachesKnownClass(values)).toBe(reaches);
  });
});
