import { namedReader } from './node-classes.js';
import { Readable } from 'node:stream';
import { isDeepStrictEqual } from 'node:util';
import {
  classMembers,
  describeValue,
  escapeKey,
  keepData,
  keepsExactly,
  restoreData,
  keepAll,
  unescapeKey,
} from './kept-data.js';

class Row {
  id = 1;
  at = new Date('2026-03-01T00:00:00.000Z');
}

class Entity {
  id = 1;
  seq = 5n;
  label(): string {
    return `entity ${this.id}`;
  }
}

class Money {
  constructor(readonly cents: number) {}
  toJSON(): string {
    return `${this.cents / 100}`;
  }
}

/** Stored as JSON text and read back, as the store does. */
const throughStore = (data: Record<string, unknown>) =>
  restoreData(JSON.parse(JSON.stringify(keepData(data).kept)));

/** `[1, <hole>, 3]`: its second place never set. */
function holed(): unknown[] {
  const items: unknown[] = [1];
  items[2] = 3;
  return items;
}

describe('keepData', () => {
  const at = new Date('2026-03-01T09:30:00.000Z');
  const cycle: Record<string, unknown> = { id: 1 };
  cycle.self = cycle;
  it.each<[string, Record<string, unknown>]>([
    ['a Date', { createdAt: at }],
    ['a BigInt beyond 2^53', { ledgerSeq: 9007199254740993n }],
    ['undefined, NaN and -0', { note: undefined, ratio: NaN, zero: -0 }],
    ['a Map, a Set and a RegExp', { byId: new Map([[1, at]]), tags: new Set(['a']), re: /x/gi }],
    ['nested Dates in arrays', { lines: [{ at }, { at: null }] }],
    ['a cycle', { order: cycle }],
    [
      'a Buffer (a bytea column) and a typed array',
      { bytes: Buffer.from('x'), view: new Uint8Array([1]) },
    ],
    ['a Buffer in a nested object', { avatar: { png: Buffer.from([0x89, 0x50]) } }],
  ])('gives %s back as it was', (_name, data) => {
    expect(keepData(data).unfaithful).toEqual([]);
    expect(throughStore(data)).toStrictEqual(data);
  });

  it('keeps an object without a prototype (as GraphQL coerces inputs) without one', () => {
    const data = { bag: Object.assign(Object.create(null) as object, { a: 1 }) };
    expect(keepData(data).unfaithful).toEqual([]);
    const back = throughStore(data);
    expect(Object.getPrototypeOf(back.bag)).toBeNull();
    expect(isDeepStrictEqual(back, data)).toBe(true);
  });

  it("keeps an instance of a class without methods as its own data, each member's type kept", () => {
    const data = { row: new Row() };
    expect(keepData(data).unfaithful).toEqual([]);
    expect(throughStore(data)).toStrictEqual({ row: { id: 1, at: new Date(data.row.at) } });
  });

  it.each<[string, Record<string, unknown>, { name: string; what: string }[], unknown]>([
    [
      "an instance of a class with a method (its BigInt kept, as the class's data)",
      { owner: new Entity() },
      [{ name: 'owner', what: 'an instance of Entity' }],
      { owner: { id: 1, seq: 5n } },
    ],
    [
      'a value JSON writes by its toJSON()',
      { price: new Money(1250) },
      [{ name: 'price', what: 'an instance of Money' }],
      { price: '12.5' },
    ],
    ['a function', { onPaid: () => 1, id: 2 }, [{ name: 'onPaid', what: 'a function' }], { id: 2 }],
    [
      'a Promise',
      { later: Promise.resolve(1) },
      [{ name: 'later', what: 'a Promise' }],
      { later: {} },
    ],
  ])('names %s as not given back, and keeps what it can', (_name, data, unfaithful, back) => {
    expect(keepData(data).unfaithful).toEqual(unfaithful);
    expect(throughStore(data)).toStrictEqual(back);
  });

  it('keeps the stored form JSON: a graph of typed nodes, a Date as its time', () => {
    expect(keepData({ at: new Date(0), n: 1 }).kept).toEqual({
      g: [
        ['o', 'at', ['@', 1], 'n', 1],
        ['d', 0],
      ],
    });
    expect(keepData({ n: 1 }).kept).toEqual({ g: [['o', 'n', 1]] });
  });

  it('reads a record stored before as superjson wrote it', () => {
    expect(
      restoreData({
        json: { at: '1970-01-01T00:00:00.000Z', n: 1 },
        meta: { values: { at: ['Date'] }, v: 1 },
      }),
    ).toStrictEqual({ at: new Date(0), n: 1 });
  });

  it('gives back a tree deeper than a recursive walk reaches (adversary 103)', () => {
    let tree: unknown = { leaf: 1 };
    for (let i = 0; i < 20_000; i += 1) tree = { c: tree };
    const kept = keepData({ tree });
    expect(kept.unfaithful).toEqual([]);
    let node = restoreData(kept.kept).tree as { c?: unknown };
    let levels = 0;
    for (; 'c' in node; levels += 1) node = node.c as { c?: unknown };
    expect(levels).toBe(20_000);
  });

  it.each<[string, () => Record<string, unknown>]>([
    ['a RegExp match (its groups, index, input)', () => ({ m: '2026-7'.match(/(?<y>\d+)-/) })],
    ['an array with holes and a member', () => ({ a: Object.assign(holed(), { tag: 'x' }) })],
    ['a Map and a Set with members', () => ({ m: Object.assign(new Map(), { n: 1 }) })],
    ['a member under a registered symbol', () => ({ row: { id: 1, [Symbol.for('audit')]: 'a' } })],
  ])('gives %s back as it was (adversary 103)', (_name, make) => {
    const data = make();
    expect(keepData(data).unfaithful).toEqual([]);
    expect(isDeepStrictEqual(throughStore(data), data)).toBe(true);
  });

  it('names a member under a symbol no other process knows, and keeps the others', () => {
    const data = { row: { id: 1, [Symbol('audit')]: 'a' } };
    expect(keepData(data).unfaithful).toEqual([{ name: 'row', what: 'an object' }]);
    expect(throughStore(data)).toStrictEqual({ row: { id: 1 } });
  });
});

/** An object with `name` as its own key (`__proto__` too), as `JSON.parse` makes one. */
const own = (name: string, value: unknown): Record<string, unknown> =>
  Object.defineProperty({}, name, { value, enumerable: true, writable: true, configurable: true });

/** Its keys in their order, `__proto__` included, at every depth of plain objects. */
const keysOf = (value: unknown, seen = new Set<unknown>()): unknown => {
  if (typeof value !== 'object' || value === null || seen.has(value)) return typeof value;
  // A cycle stops at its start; a reference shared apart is read again.
  seen.add(value);
  const items = value instanceof Map || value instanceof Set ? [...value.values()] : value;
  const keys = Object.entries(items).map(([name, item]) => [name, keysOf(item, seen)]);
  seen.delete(value);
  return keys;
};

/** Equal as the library tells it (jest's `toStrictEqual` reads an own `constructor` key). */
const same = (back: unknown, data: unknown) => expect(isDeepStrictEqual(back, data)).toBe(true);

class Stage {
  constructor(readonly due: Date) {}
}

describe('keepData with keys superjson refuses (prototype, constructor, __proto__)', () => {
  const due = new Date('2027-01-15T00:00:00.000Z');
  describe.each(['prototype', 'constructor', '__proto__', '~prototype', '~~constructor'])(
    'the key %s',
    (key) => {
      it.each<[string, () => Record<string, unknown>]>([
        ['with a string value', () => ({ roles: own(key, 'Bob') })],
        ['with a Date, among others', () => ({ stages: { pilot: due, ...own(key, due) } })],
        ['at the top', () => own(key, { at: due })],
        ['nested', () => ({ a: { b: own(key, { c: own(key, 1n) }) } })],
        ['in an array', () => ({ list: [own(key, due), { x: 1 }] })],
        [
          'in a Map value and a Set',
          () => ({ m: new Map([['k', own(key, due)]]), s: new Set([own(key, 1)]) }),
        ],
        [
          'parsed from JSON',
          () => ({ doc: JSON.parse(`{"${key}": {"n": 1}, "z": 2}`) as unknown }),
        ],
        [
          'shared and in a cycle',
          () => {
            const shared = own(key, due);
            shared.self = shared;
            return { a: shared, b: [shared] };
          },
        ],
      ])('%s comes back as it was, its keys in their order', (_name, make) => {
        const data = make();
        expect(keepData(data).unfaithful).toEqual([]);
        const back = throughStore(data);
        same(back, data);
        expect(keysOf(back)).toEqual(keysOf(data));
        // Never on a prototype: an own key, and Object.prototype untouched.
        expect(({} as Record<string, unknown>).n).toBeUndefined();
      });

      it('in an instance of a class, kept as its own data', () => {
        const stage = Object.defineProperty(new Stage(due), key, { value: 'x', enumerable: true });
        const data = { stage };
        expect(keepData(data).unfaithful).toEqual([]);
        const expected = {
          stage: Object.defineProperty({ due }, key, { value: 'x', enumerable: true }),
        };
        same(throughStore(data), expected);
        expect(keysOf(throughStore(data))).toEqual(keysOf(expected));
      });

      it('keepsExactly keeps it', () => {
        expect(keepsExactly(own(key, due))).toBe(true);
      });
    },
  );

  it.each<[string, string]>([
    ['prototype', '~prototype'],
    ['constructor', '~constructor'],
    ['__proto__', '~__proto__'],
    ['~prototype', '~~prototype'],
    ['~~__proto__', '~~~__proto__'],
    ['proto', 'proto'],
    ['~x', '~x'],
    ['prototypes', 'prototypes'],
    ['a.prototype', 'a.prototype'],
  ])('writes the key %p as %p, and reads it back', (key, written) => {
    expect(escapeKey(key)).toBe(written);
    expect(unescapeKey(written)).toBe(key);
  });

  it('writes such keys as they are, and reads a record stored before as it was marked', () => {
    expect(keepData({ stages: { prototype: 1 } }).kept).toEqual({
      g: [
        ['o', 'stages', ['@', 1]],
        ['o', 'prototype', 1],
      ],
    });
    expect(
      restoreData({ json: { stages: { '~prototype': 1 } }, keys: 1 } as unknown),
    ).toStrictEqual({ stages: { prototype: 1 } });
    // Stored before the mark: a key `~prototype` was the app's own.
    expect(restoreData({ json: { stages: { '~prototype': 1 } } })).toEqual({
      stages: { '~prototype': 1 },
    });
  });

  it('leaves out, and names, only a member with no JSON form, the others kept', () => {
    class Loop {
      toJSON(): unknown {
        return { me: this };
      }
    }
    const data = { loop: new Loop(), stages: { prototype: due } };
    const kept = keepData(data);
    expect(kept.unfaithful).toEqual([
      { name: 'loop', what: 'an instance of Loop with no JSON form' },
    ]);
    expect(restoreData(kept.kept)).toStrictEqual({ stages: { prototype: due } });
  });
});

describe('keepsExactly', () => {
  it.each([
    [5],
    ['5'],
    [undefined],
    [null],
    [12n],
    [new Date(0)],
    [[1, 2]],
    [new Set([1])],
    [Buffer.from('x')],
  ])('keeps %p', (value) => {
    expect(keepsExactly(value)).toBe(true);
  });

  it.each([[new Row()], [new Money(1)], [() => 1], [Readable.from(['x'])]])(
    'does not keep %p exactly',
    (value) => {
      expect(keepsExactly(value)).toBe(false);
    },
  );
});

/** The answer's shared graph (`keepAll`): two parents, each line's data naming one order. */
const shared = {
  g: [
    ['o', 'qty', 2, 'order', ['@', 1]],
    ['o', 'id', 7, 'at', ['@', 2]],
    ['d', 0],
    ['o', 'qty', 3, 'order', ['@', 1]],
  ],
};

describe('restoreData', () => {
  it.each([[null], ['x'], [{}], [{ meta: {} }]])('reads %p, not typed JSON, as no data', (kept) => {
    expect(restoreData(kept)).toEqual({});
  });

  // Each form a `__parent` was stored in, written by hand as the store holds it.
  it.each<[string, unknown, ((index: number) => unknown) | undefined, Record<string, unknown>]>([
    [
      "superjson's { json, meta } (stored before the graph)",
      {
        json: { qty: 2, at: '1970-01-01T00:00:00.000Z' },
        meta: { values: { at: ['Date'] }, v: 1 },
      },
      undefined,
      { qty: 2, at: new Date(0) },
    ],
    [
      'a graph of its own (stored before the shared one)',
      {
        g: [
          ['o', 'qty', 2, 'order', ['@', 1]],
          ['o', 'id', 7, 'at', ['@', 2]],
          ['d', 0],
        ],
      },
      undefined,
      { qty: 2, order: { id: 7, at: new Date(0) } },
    ],
    [
      "a node of the answer's shared graph",
      { p: 3 },
      namedReader(shared),
      { qty: 3, order: { id: 7, at: new Date(0) } },
    ],
    ['a node, where the answer holds no shared graph: no data', { p: 3 }, undefined, {}],
    ['a node past the shared graph: no data', { p: 9 }, namedReader(shared), {}],
    ['a node of something that is no graph: no data', { p: 0 }, namedReader({ x: 1 }), {}],
  ])('reads %s', (_name, kept, reader, data) => {
    expect(restoreData(kept, reader)).toStrictEqual(data);
  });

  it('gives the parents of one answer the same objects they shared, read once', () => {
    const reader = namedReader(shared);
    const first = restoreData({ p: 0 }, reader);
    expect(first.order).toBe(restoreData({ p: 3 }, reader).order);
  });
});

describe('keepAll', () => {
  it("writes what its objects share once, each its own node, and names each one's losses", () => {
    const order = { id: 7, at: new Date(0) };
    const kept = keepAll([
      { qty: 2, order },
      { qty: 3, order, f: () => 1 },
    ]);
    expect(kept.kept).toEqual(shared);
    expect(kept.roots).toEqual([0, 3]);
    expect(kept.unfaithful).toEqual([[], [{ name: 'f', what: 'a function' }]]);
  });
});

describe('classMembers and describeValue', () => {
  it.each<[object, Record<string, unknown>, string[]]>([
    [new Row(), {}, []],
    [new Entity(), {}, ['label']],
    [new Entity(), { label: {} }, []],
    [new Money(1), {}, ['toJSON']],
    [{ a: 1 }, {}, []],
  ])('finds in %p, but for %p, the members %p', (value, except, members) => {
    expect(classMembers(value, except)).toEqual(members);
  });

  it.each<[unknown, string]>([
    [null, 'null'],
    [[], 'an array'],
    [() => 1, 'a function'],
    [1n, 'a bigint'],
    [Promise.resolve(), 'a Promise'],
    [Readable.from(['x']), 'a stream'],
    [{}, 'an object'],
    [new Entity(), 'an instance of Entity'],
  ])('describes %p as %s', (value, what) => {
    expect(describeValue(value)).toBe(what);
  });
});

describe('keepAll with objects written as their records (record-in-node.ts)', () => {
  const order: Record<string, unknown> = { id: 9 };
  const line = Object.defineProperty({ id: 1 }, 'order', { value: order, enumerable: false });
  order.lines = [line];
  const lineRecord = Object.defineProperty({}, 'order', { value: order, enumerable: false });
  const orderRecord = { lines: order.lines };

  it.each<[string, readonly Record<string, unknown>[], number]>([
    ['the order first: the line it reaches is written as its record', [orderRecord, line], 1],
    ['the line first: its root is its record', [line, orderRecord], 0],
  ])('%s, one node', (_name, roots, lineRoot) => {
    const kept = keepAll(roots, new Map([[line, lineRecord]]));
    expect(kept.roots[lineRoot]).toBe(kept.nodes.get(line));
    // Its id is the answer's: the node holds its record's hidden back-reference alone.
    expect(kept.kept.g[kept.nodes.get(line)!]).toEqual([
      'o',
      ['-', 'order', 0],
      ['@', kept.nodes.get(order)!],
    ]);
    expect(kept.kept.g.filter((node) => JSON.stringify(node).includes('"order"'))).toHaveLength(1);
  });
});

describe('keepAll: an object with no prototype written as its record (record-in-node.ts)', () => {
  it.each<[string, boolean]>([
    ['reached from another root', false],
    ['a root itself', true],
  ])('%s: its node has no prototype either', (_name, asRoot) => {
    const line = Object.assign(Object.create(null) as Record<string, unknown>, { id: 1 });
    const lineRecord = { note: 'n' };
    const order = { raw: { lines: [line] } };
    const kept = keepAll(asRoot ? [line, order] : [order], new Map([[line, lineRecord]]));
    const node = kept.kept.g[kept.nodes.get(line)!] as unknown[];
    expect(node).toEqual(['O', 'note', 'n']);
  });
});
