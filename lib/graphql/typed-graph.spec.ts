import { isDeepStrictEqual } from 'node:util';
import vm from 'node:vm';
import {
  builtInPrototype,
  classBelow,
  isJsonCycle,
  reachesLoss,
  isNativePrototype,
  type JsonLinks,
  readGraph,
  readGraphNodes,
  renamedRefs,
  writeGraph,
  writeGraphs,
} from './typed-graph.js';

/** Written, stored as JSON text and read back, as the store does. */
const back = (value: unknown) =>
  readGraph(JSON.parse(JSON.stringify(writeGraph(value).graph)) as { g: unknown[] });

const cycle: Record<string, unknown> = { id: 1 };
cycle.self = cycle;

/** `[1, <hole>, 3]`: its second place never set. */
function holed(): unknown[] {
  const items: unknown[] = [1];
  items[2] = 3;
  return items;
}

describe('writeGraph and readGraph', () => {
  it.each<[string, () => unknown]>([
    ['a string', () => 'x'],
    ['undefined', () => undefined],
    ['NaN, -0, Infinity and a BigInt', () => [NaN, -0, Infinity, -Infinity, 2n ** 70n]],
    ['a registered symbol', () => ({ s: Symbol.for('s') })],
    ['an object without a prototype', () => Object.assign(Object.create(null) as object, { a: 1 })],
    ['an array with holes and members', () => Object.assign(holed(), { tag: 'x' })],
    ['a RegExp match', () => '2026-7'.match(/(?<y>\d+)-(\d)/)],
    ['a Map and a Set with members', () => [Object.assign(new Map([[{ k: 1 }, 2]]), { n: 1 })]],
    ['a Set', () => new Set([1, 'a', { b: 2 }])],
    ['a Date, a RegExp, a URL', () => [new Date(5), /a/gi, new URL('http://x/')]],
    [
      'a Buffer and typed arrays',
      () => [Buffer.from('x'), new Float64Array([1.5]), new BigInt64Array([3n])],
    ],
    ['a TypeError', () => new TypeError('bad')],
    ['a cycle and a shared reference', () => ({ a: cycle, b: [cycle] })],
    ['keys JSON refuses to set', () => JSON.parse('{"__proto__": {"x": 1}, "constructor": 2}')],
    ['a registered symbol key', () => ({ [Symbol.for('tag')]: { a: 1 }, b: 2 })],
  ])('gives %s back as it was', (_name, make) => {
    const value = make();
    const written = writeGraph(value);
    expect(written.lost).toBe(false);
    expect(written.exact).toBe(true);
    expect(isDeepStrictEqual(back(value), value)).toBe(true);
  });

  it.each<[string, () => unknown, boolean]>([
    [
      'an instance of a class without methods',
      () =>
        new (class Row {
          id = 1;
        })(),
      false,
    ],
    [
      'an instance of a class with a method',
      () =>
        new (class A {
          m() {}
        })(),
      true,
    ],
    ['a toJSON()', () => ({ toJSON: () => 'x' }), true],
    ['a function in an array', () => [() => 1], true],
    ['an unregistered symbol key', () => ({ [Symbol('x')]: 1 }), true],
  ])('tells %s is not given back exactly (lost: %s)', (_name, make, lost) => {
    const written = writeGraph(make());
    expect(written.exact).toBe(false);
    expect(written.lost).toBe(lost);
  });

  it('gives an invalid Date back invalid (isDeepStrictEqual tells no two apart)', () => {
    expect(Number.isNaN((back(new Date(NaN)) as Date).getTime())).toBe(true);
  });

  it('writes a tree of any depth without recursion', () => {
    let tree: unknown = 1;
    for (let i = 0; i < 50_000; i += 1) tree = [tree];
    let node = back(tree);
    let levels = 0;
    for (; Array.isArray(node); levels += 1) node = (node as unknown[])[0];
    expect(levels).toBe(50_000);
  });

  it('tells each member of the root its losses, and leaves out one it cannot write', () => {
    const lost: unknown[] = [];
    const left: unknown[] = [];
    const loop = { toJSON: (): unknown => ({ again: loop }) };
    const written = writeGraph(
      { fn: () => 1, ok: { a: 1 }, loop },
      { lost: (key) => lost.push(key), left: (key) => left.push(key) },
    );
    expect(left).toEqual(['loop']);
    expect(lost).toContain('fn');
    expect(readGraph(written.graph)).toStrictEqual({ ok: { a: 1 } });
  });
});

describe('isJsonCycle', () => {
  const target = {};
  const other = {};
  /** Node 0 the root; each of `made` a node a `toJSON()` gave, inside the one before it. */
  const chain = (made: object[]): JsonLinks => ({
    madeBy: [undefined, ...made],
    nearest: [-1, ...made.map((_, i) => i + 1)],
    up: [-1, ...made.map((_, i) => (i === 0 ? -1 : i))],
  });
  const deep = Array.from({ length: 5000 }, () => other);

  it.each<[string, JsonLinks, number, boolean, number]>([
    ['at the root', chain([]), 0, false, 0],
    ['inside what its own toJSON() gave', chain([target]), 1, true, 1],
    ['inside what it gave, under another', chain([target, other]), 2, true, 2],
    ['inside what another gave only', chain([other]), 1, false, 1],
    ['under 1,000 objects other toJSON()s gave', chain(deep.slice(4000)), 1000, false, 1000],
    ['under 5,000 objects other toJSON()s gave', chain(deep), 5000, false, 5000],
    ['under 5,000 others below what it gave', chain([target, ...deep]), 5001, true, 5001],
    [
      'in a plain node under what it gave',
      { madeBy: [undefined, target, undefined], nearest: [-1, 1, 1], up: [-1, -1, -1] },
      2,
      true,
      1,
    ],
    [
      'beside what it gave (another place of the root)',
      { madeBy: [undefined, target, undefined], nearest: [-1, 1, -1], up: [-1, -1, -1] },
      2,
      false,
      0,
    ],
  ])('calling a toJSON() %s', (_name, links, at, cycle, steps) => {
    expect(isJsonCycle(target, at, links)).toEqual({ cycle, steps });
  });

  it.each<[string, boolean]>([
    ['not on the chain', false],
    ['on the chain', true],
  ])('a target %s walks the chain once; a walk from below stops where it is known', (_n, on) => {
    const made = [on ? target : other, ...Array.from({ length: 2000 }, () => other)];
    const links: JsonLinks = { ...chain(made), known: [] };
    expect(isJsonCycle(target, 2001, links)).toEqual({ cycle: on, steps: 2001 });
    // Node 2002 a new one under 2001, as the writer adds them: one step to 2001, which knows.
    links.madeBy.push(other);
    links.nearest.push(2002);
    links.up.push(2001);
    expect(isJsonCycle(target, 2002, links)).toEqual({ cycle: on, steps: 2 });
    expect(isJsonCycle(target, 2002, links)).toEqual({ cycle: on, steps: 1 });
  });

  it('writes a chain of 5,000 objects each given by its own toJSON(), a cycle left out', () => {
    class Revision {
      constructor(
        readonly n: number,
        readonly previous?: Revision,
      ) {}
      toJSON(): unknown {
        return { n: this.n, previous: this.previous };
      }
    }
    let history: Revision | undefined;
    for (let n = 1; n <= 5000; n += 1) history = new Revision(n, history);
    let back = readGraph(writeGraph({ history }).graph) as { history?: { previous?: unknown } };
    let length = 0;
    for (let at = back.history; at; at = at.previous as typeof at) length += 1;
    expect(length).toBe(5000);
    const left: unknown[] = [];
    const again = (): unknown => ({ again: loop });
    const loop = { toJSON: again };
    back = readGraph(
      writeGraph({ loop, history }, { lost: () => undefined, left: (key) => left.push(key) }).graph,
    ) as typeof back;
    expect(left).toEqual(['loop']);
    expect(back.history).toBeDefined();
  });

  it('stops a toJSON() giving a new object of a new class each call, without end', () => {
    class Endless {
      toJSON(): unknown {
        return { next: new Endless() };
      }
    }
    const left: unknown[] = [];
    writeGraph(
      { endless: new Endless() },
      { lost: () => undefined, left: (key) => left.push(key) },
    );
    expect(left).toEqual(['endless']);
  });

  it('writes one object whose toJSON() gives a new object at any number of places', () => {
    const price = { amount: 5, toJSON: (): unknown => ({ amount: 5 }) };
    const rows = Array.from({ length: 1001 }, () => ({ price }));
    expect(readGraph(writeGraph({ rows }).graph)).toStrictEqual({
      rows: rows.map(() => ({ price: { amount: 5 } })),
    });
  });

  it('writes one shared object whose toJSON() gives a primitive at any number of places', () => {
    const price = { toJSON: () => '5.00' };
    const rows = Array.from({ length: 1001 }, () => ({ price }));
    expect(readGraph(writeGraph({ rows }).graph)).toStrictEqual({
      rows: rows.map(() => ({ price: '5.00' })),
    });
  });
});

describe('an error', () => {
  it.each([
    ['its cause', () => new Error('declined', { cause: new Error('insufficient_funds') })],
    ['an AggregateError, with its errors', () => new AggregateError([new Error('a')], 'x')],
    ['without a cause', () => new TypeError('t')],
  ])('is given back with %s', (_name, make) => {
    const error = make();
    const again = back({ error }) as { error: Error };
    expect(isDeepStrictEqual(again.error, error)).toBe(true);
    expect(Object.getPrototypeOf(again.error)).toBe(Object.getPrototypeOf(error));
    expect(Object.keys(again.error)).toEqual(Object.keys(error));
  });

  it.each([
    ['a Date with its own member', () => Object.assign(new Date(0), { zone: 'UTC' }), true],
    ['a plain Date', () => new Date(0), false],
    ['a typed array with its own member', () => Object.assign(new Uint8Array(2), { n: 1 }), true],
    ['a plain typed array', () => new Uint8Array(2), false],
  ])('says %s is lost (%s)', (_name, make, lost) => {
    expect(writeGraph({ value: make() }).lost).toBe(lost);
  });
});

describe('a toJSON(), called once at each place as JSON calls it', () => {
  /** Counts its calls; spread, its result holds a `toJSON` of its own (adversary 105). */
  const spread = () => {
    const counted = { calls: 0 };
    const price = {
      amount: 5,
      toJSON(this: Record<string, unknown>): unknown {
        counted.calls += 1;
        return { ...this, display: '€5' };
      },
    };
    return { counted, price };
  };

  class Currency {
    constructor(readonly code: string) {}
    toJSON(): unknown {
      return this;
    }
  }

  it.each<[string, () => unknown, unknown]>([
    [
      'a spread copy of itself, its own toJSON left out',
      () => spread().price,
      { amount: 5, display: '€5' },
    ],
    ['itself (`return this`), as its own data', () => new Currency('EUR'), { code: 'EUR' }],
    ['a primitive', () => ({ toJSON: () => '5.00' }), '5.00'],
    [
      'an object with a toJSON() of its own, not called',
      () => ({ toJSON: () => ({ toJSON: () => 'no', a: 1 }) }),
      { a: 1 },
    ],
  ])('writes %s as JSON does', (_name, make, json) => {
    const value = make();
    expect(JSON.parse(JSON.stringify({ value })) as unknown).toStrictEqual({ value: json });
    expect(readGraph(writeGraph({ value }).graph)).toStrictEqual({ value: json });
  });

  it('calls a spread toJSON() once, as JSON.stringify does', () => {
    const { counted, price } = spread();
    const written = writeGraph({ price });
    expect(counted.calls).toBe(1);
    expect(written.lost).toBe(true);
  });

  it('writes one object whose toJSON() gives itself at any number of places', () => {
    const currency = new Currency('EUR');
    const rows = Array.from({ length: 1001 }, () => ({ currency }));
    expect(readGraph(writeGraph({ rows }).graph)).toStrictEqual({
      rows: rows.map(() => ({ currency: { code: 'EUR' } })),
    });
  });
});

describe('a subclass of a built-in', () => {
  class BusinessDay extends Date {
    get isoDay(): string {
      return this.toISOString().slice(0, 10);
    }
  }
  class PlainDay extends Date {}
  class CardDeclined extends Error {
    get retryable(): boolean {
      return true;
    }
  }
  class Lines extends Array<number> {
    total(): number {
      return 0;
    }
  }
  class Tags extends Set<string> {
    has2(): boolean {
      return false;
    }
  }
  class Index extends Map<string, number> {
    first(): number {
      return 0;
    }
  }
  class Declined extends TypeError {}

  it.each<[string, () => object, object | undefined, 'none' | 'plain' | 'members']>([
    ['a Date', () => new Date(0), Date.prototype, 'none'],
    ['a Date subclass with a getter', () => new BusinessDay(0), Date.prototype, 'members'],
    ['a Date subclass with nothing more', () => new PlainDay(0), Date.prototype, 'plain'],
    ['an Error subclass with a getter', () => new CardDeclined('x'), Error.prototype, 'members'],
    ['a TypeError subclass', () => new Declined('x'), TypeError.prototype, 'plain'],
    ['a TypeError', () => new TypeError('x'), TypeError.prototype, 'none'],
    ['an array', () => [1], Array.prototype, 'none'],
    ['an Array subclass with a method', () => Lines.from([1]), Array.prototype, 'members'],
    ['a Set subclass with a method', () => new Tags(), Set.prototype, 'members'],
    ['a Map subclass with a method', () => new Index(), Map.prototype, 'members'],
    ['a Buffer', () => Buffer.from('x'), Buffer.prototype, 'none'],
    ['a URL', () => new URL('http://x/'), URL.prototype, 'none'],
    ['a typed array', () => new Uint8Array(1), Uint8Array.prototype, 'none'],
  ])('tells %s: written as its built-in, classes below it %s', (_name, make, base, below) => {
    const value = make();
    expect(builtInPrototype(value)).toBe(base);
    expect(classBelow(value, base ?? Object.prototype)).toBe(below);
  });

  it.each<[string, () => object, boolean, boolean]>([
    ['a Date subclass with a getter', () => new BusinessDay(0), false, true],
    ['a Date subclass with nothing more', () => new PlainDay(0), false, false],
    ['an Error subclass with a getter', () => new CardDeclined('x'), false, true],
    ['an Array subclass with a method', () => Lines.from([1]), false, true],
    ['a Set subclass with a method', () => new Tags(), false, true],
    ['a Map subclass with a method', () => new Index(), false, true],
    ['a bare Date', () => new Date(0), true, false],
  ])('writes %s as its built-in (exact: %s, lost: %s)', (_name, make, exact, lost) => {
    const notes = { lost: [] as unknown[], left: [] as unknown[] };
    const written = writeGraph(
      { value: make() },
      { lost: (key) => notes.lost.push(key), left: (key) => notes.left.push(key) },
    );
    expect(written.exact).toBe(exact);
    expect(written.lost).toBe(lost);
    expect(notes.lost).toEqual(lost ? ['value'] : []);
  });

  it("tells another realm's built-in from an app's subclass", () => {
    const sandboxed = vm.runInNewContext('[new Date(0), [1], new Map()]') as object[];
    for (const value of sandboxed) {
      expect(classBelow(value, Object.prototype)).toBe('none');
      expect(isNativePrototype(Object.getPrototypeOf(value) as object)).toBe(true);
    }
  });
});

describe('writeGraphs', () => {
  it('writes what several values share once, each value its own node', () => {
    const order: Record<string, unknown> = { id: 7, lines: [] };
    const lines = [1, 2].map((id) => ({ id, order }));
    (order.lines as unknown[]).push(...lines);
    const written = writeGraphs(lines.map((line) => ({ qty: line.id, order: line.order })));
    // The order, its lines array and its two lines: one node each, whatever reaches them.
    expect(written.graph.g).toHaveLength(2 + 1 + 1 + 2);
    const made = readGraphNodes(JSON.parse(JSON.stringify(written.graph)) as { g: unknown[] });
    const [first, second] = written.roots.map((root) => made[root] as { order: unknown });
    expect(first.order).toBe(second.order);
    const back = first.order as { lines: { order: unknown }[] };
    expect(back.lines[1].order).toBe(back);
  });

  it("tells each value's notes of its own members, a shared loss each one's", () => {
    const told: string[] = [];
    const shared = { f: () => 1 };
    const plain = { n: 1 };
    const written = writeGraphs(
      [
        { a: shared, p: plain },
        { b: shared, g: () => 2, p: plain },
        { c: { deep: [shared] }, d: { deep: [shared] } },
      ],
      (index) => ({
        lost: (key) => told.push(`${index}:${String(key)} lost`),
        left: (key) => told.push(`${index}:${String(key)} left`),
      }),
    );
    expect(written.roots).toEqual([0, 3, 4]);
    expect(told).toEqual(['0:a lost', '1:b lost', '1:g lost', '2:c lost', '2:d lost']);
  });

  it('leaves a member with no JSON form out alone, never what an earlier value wrote', () => {
    const shared = { n: 1 };
    const again = (): unknown => ({ again: bad });
    const bad = { toJSON: again };
    const left: string[] = [];
    const written = writeGraphs([{ s: shared }, { s: shared, bad }], (index) => ({
      lost: () => undefined,
      left: (key) => left.push(`${index}:${String(key)}`),
    }));
    expect(left).toEqual(['1:bad']);
    const made = readGraphNodes(written.graph);
    expect(made[written.roots[1]]).toEqual({ s: { n: 1 } });
    expect((made[written.roots[1]] as { s: unknown }).s).toBe(
      (made[written.roots[0]] as { s: unknown }).s,
    );
  });
});

describe('a member left out takes back all it wrote', () => {
  // An ORM's entities, each written by its own toJSON(): a line's goes round (its order holds
  // it), a refund's does not; `isJsonCycle` remembers by node what its walks found.
  class Order {
    lines: Line[] = [];
  }
  class Line {
    constructor(readonly order: Order) {
      order.lines.push(this);
    }
    toJSON() {
      return { order: this.order };
    }
  }
  class Refund {
    constructor(
      readonly order: Order,
      readonly line: Line,
    ) {}
    toJSON() {
      return { order: this.order, line: this.line };
    }
  }

  it.each<[string, (line: Line, refund: Refund) => object, string[], string[]]>([
    ['the line alone: a cycle, left out', (line) => ({ line }), ['line'], []],
    ['the refund alone', (_line, refund) => ({ refund }), [], ['refund']],
    ['the refund, then the line', (line, refund) => ({ refund, line }), [], ['refund', 'line']],
    // The line's nodes taken back, its memo too: the refund's own take its indexes anew.
    ['the line, then the refund', (line, refund) => ({ line, refund }), ['line'], ['refund']],
    [
      'the line, a plain member, then the refund',
      (line, refund) => ({ line, n: { a: [1] }, refund }),
      ['line'],
      ['n', 'refund'],
    ],
  ])('%s', (_name, members, left, kept) => {
    const order = new Order();
    const line = new Line(order);
    const told: string[] = [];
    const written = writeGraph(members(line, new Refund(order, line)), {
      lost: () => undefined,
      left: (key) => told.push(String(key)),
    });
    expect(told).toEqual(left);
    expect(Object.keys(readGraph(written.graph) as object)).toEqual(kept);
  });
});

describe('reachesLoss', () => {
  // Nodes as written: 0 reaches 1 reaches 2 (a loss); 3 and 4 reach each other; 5 reaches 4.
  const nodes = [
    ['o', 'a', ['@', 1]],
    ['a', 1, [['@', 2]]],
    ['o'],
    ['o', 'x', ['@', 4]],
    ['o', 'y', ['@', 3]],
    ['m', ['k', ['@', 4]]],
  ];
  const lossAt = [false, false, true];
  it.each<[string, number, boolean]>([
    ['a node holding a loss', 2, true],
    ['one reaching it through another', 0, true],
    ['a cycle holding none', 3, false],
    ['one reaching that cycle', 5, false],
  ])('tells %s', (_name, from, loss) => {
    expect(reachesLoss(from, nodes, lossAt, [])).toBe(loss);
  });

  it('keeps its answers for the next walk', () => {
    const reaches: boolean[] = [];
    reachesLoss(0, nodes, lossAt, reaches);
    reachesLoss(5, nodes, lossAt, reaches);
    expect(reaches).toEqual([true, true, true, false, false, false]);
  });
});

describe('renamedRefs', () => {
  const plus10 = (index: number) => index + 10;
  it.each<[string, unknown, unknown]>([
    ['an object: its values', ['o', 'a', ['@', 1], 'b', 'x'], ['o', 'a', ['@', 11], 'b', 'x']],
    [
      'a key under a symbol is no reference',
      ['O', ['y', 'k'], ['@', 2]],
      ['O', ['y', 'k'], ['@', 12]],
    ],
    [
      'an array: its items and members, never its length',
      ['a', 2, [['@', 1], 'x'], 'm', ['@', 2]],
      ['a', 2, [['@', 11], 'x'], 'm', ['@', 12]],
    ],
    ["an array of the strings '@' and 1: no reference", ['a', 2, ['@', 1]], ['a', 2, ['@', 1]]],
    [
      'a Map: keys and values',
      [
        'm',
        [
          ['@', 1],
          ['@', 2],
        ],
      ],
      [
        'm',
        [
          ['@', 11],
          ['@', 12],
        ],
      ],
    ],
    ['a Set with a member', ['s', [['@', 3]], 'n', ['@', 4]], ['s', [['@', 13]], 'n', ['@', 14]]],
    [
      'an error: its cause, its errors, its members',
      ['E', 'Error', 'm', ['@', 1], ['h'], 'code', ['@', 2]],
      ['E', 'Error', 'm', ['@', 11], ['h'], 'code', ['@', 12]],
    ],
    [
      'an error stored before',
      ['e', 'Error', 'm', 'x', ['@', 1]],
      ['e', 'Error', 'm', 'x', ['@', 11]],
    ],
    ['a value that is no object', ['=', ['@', 0]], ['=', ['@', 10]]],
    ['a Date, a URL: none', ['d', 5], ['d', 5]],
  ])('%s', (_name, node, renamed) => {
    expect(renamedRefs(node, plus10)).toEqual(renamed);
  });
});

describe('own data that is not enumerable (adversary 111)', () => {
  const descriptors = (value: object) =>
    Object.fromEntries(
      Reflect.ownKeys(value).map((key) => {
        const { enumerable, writable } = Reflect.getOwnPropertyDescriptor(value, key)!;
        return [String(key), { enumerable, writable }];
      }),
    );
  it.each<[string, () => object]>([
    [
      'a read-only back-reference kept out of JSON, in a root and a node',
      () => {
        const order: Record<string, unknown> = { id: 1, lines: [] };
        const line = { id: 2 };
        Object.defineProperty(line, 'order', { value: order });
        (order.lines as unknown[]).push(line);
        return { line };
      },
    ],
    [
      'a writable hidden member of the root, a registered symbol too',
      () => {
        const root = { a: 1 };
        Object.defineProperty(root, 'b', { value: 2, writable: true });
        Object.defineProperty(root, Symbol.for('tag'), { value: 't' });
        return root;
      },
    ],
    [
      "an array's own members that are no items (a page's total out of JSON), a Map's, a Set's",
      () => {
        const lines = [{ id: 1 }, { id: 2 }];
        Object.defineProperty(lines, 'total', { value: 43 });
        Object.defineProperty(lines, 'cursor', { value: 'c', writable: true, enumerable: true });
        const byId = new Map([[1, 'a']]);
        Object.defineProperty(byId, 'loadedAt', { value: 5 });
        const tags = new Set(['x']);
        Object.defineProperty(tags, 'source', { value: 'db', writable: true });
        return { lines, byId, tags };
      },
    ],
  ])('%s: comes back with its enumerability and writability', (_what, make) => {
    const value = make();
    const read = back(value) as Record<string, unknown>;
    expect(descriptors(read)).toEqual(descriptors(value));
    expect(JSON.stringify(read)).toBe(JSON.stringify(value));
    for (const key of ['lines', 'byId', 'tags'] as const) {
      if (!(key in value)) continue;
      const inner = (value as Record<string, object>)[key];
      expect(descriptors(read[key] as object)).toEqual(descriptors(inner));
    }
    if ('line' in value) {
      const line = read.line as { order: { lines: unknown[] } };
      // The one line, reached back through its hidden `order`.
      expect(line.order.lines[0]).toBe(line);
      expect(descriptors(line)).toEqual(descriptors((value as { line: object }).line));
    }
  });

  it.each<[string, () => object, string[]]>([
    ["an array's length: no member", () => ({ list: [1, 2] }), ['0', '1', 'length']],
    ['a hidden getter: left out, never read', () => hiddenGetter(), []],
    ['a hidden unregistered symbol: left out, no loss', () => hiddenSymbol(), []],
  ])('%s', (_what, make, keys) => {
    const written = writeGraph(make());
    const read = readGraph(written.graph) as Record<string, unknown>;
    const inner = (read.list ?? read.inner) as object;
    expect(Reflect.ownKeys(inner).map(String)).toEqual(keys);
    expect(written.lost).toBe(false);
  });
});

/** `{ inner }`, `inner` with a hidden getter that throws. */
function hiddenGetter(): object {
  const inner = {};
  Object.defineProperty(inner, 'eta', {
    get: () => {
      throw new Error('down');
    },
  });
  return { inner };
}

/** `{ inner }`, `inner` with a hidden member under a symbol no other process knows. */
function hiddenSymbol(): object {
  const inner = {};
  Object.defineProperty(inner, Symbol('orm'), { value: 1 });
  return { inner };
}
