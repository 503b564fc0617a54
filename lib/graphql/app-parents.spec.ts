import {
  joinedGraphs,
  keptParents,
  type NotedParent,
  notedParent,
  parentData,
  parentLosses,
  parentsReader,
} from './app-parents.js';

/** The parents kept as stored (JSON text, as the store holds them), each read back by key. */
function readBack(kept: ReturnType<typeof keptParents>): Record<string, Record<string, unknown>> {
  const stored = JSON.parse(JSON.stringify(kept)) as typeof kept;
  const read = parentsReader(stored.graph);
  return Object.fromEntries(
    Object.keys(stored.parents).map((key) => [key, parentData(stored.parents[key], read)]),
  );
}

/** A parent's own data kept alone (one graph with only it) and read back. */
function throughStore(source: object): Record<string, unknown> {
  const noted = notedParent(source, 'Address', {});
  return readBack(keptParents(noted ? { at: noted } : {})).at ?? {};
}

describe('notedParent, keptParents and parentData', () => {
  class Address {
    constructor(
      public street: string,
      public countryCode: string,
    ) {}

    get label(): string {
      return `${this.street} (${this.countryCode})`;
    }

    format(): string {
      return this.street;
    }
  }
  const loaded = { owner: Promise.resolve({ name: 'ada' }) };

  it.each<{ name: string; source: object; expected: Record<string, unknown> }>([
    {
      name: 'a column no client selects, as it was',
      source: { street: 'Main St 1', countryCode: 'NL' },
      expected: { street: 'Main St 1', countryCode: 'NL' },
    },
    {
      name: 'typed: a Date stays a Date, a BigInt a BigInt',
      source: { at: new Date(0), cents: 12n },
      expected: { at: new Date(0), cents: 12n },
    },
    {
      name: 'an instance: its own data, never its getters or methods',
      source: new Address('Main St 1', 'NL'),
      expected: { street: 'Main St 1', countryCode: 'NL' },
    },
    { name: 'a Promise (a loaded relation) is not kept', source: loaded, expected: {} },
    {
      name: 'an own getter is not called',
      source: Object.defineProperty({ id: 1 }, 'lazy', {
        enumerable: true,
        get: () => {
          throw new Error('read');
        },
      }),
      expected: { id: 1 },
    },
  ])('$name', ({ source, expected }) => {
    expect(throughStore(source)).toEqual(expected);
  });

  it('nothing kept: undefined, and an empty parent', () => {
    expect(notedParent({}, 'Address', {})).toBeUndefined();
    expect(keptParents({})).toEqual({ parents: {}, losses: [] });
    expect(parentData(undefined)).toEqual({});
  });
});

describe('keptParents: all the parents of the outputs in one graph', () => {
  /** An order every line points back at, with all its lines (an ORM's back-reference). */
  const order = (count: number) => {
    const made: { id: number; lines: Record<string, unknown>[] } = { id: 7, lines: [] };
    for (let id = 1; id <= count; id += 1) made.lines.push({ id, qty: 2, order: made });
    return made;
  };
  const stored = (count: number) => {
    const noted: Record<string, unknown> = {};
    order(count).lines.forEach(
      (line, i) => (noted[`lines.${i}`] = notedParent(line, 'Line', noted)),
    );
    return JSON.stringify(keptParents(noted));
  };

  it('an object every parent reaches is written once: the graph grows with the lines', () => {
    // Twice the lines, about twice the bytes (one graph per parent: four times).
    expect(stored(80).length / stored(40).length).toBeLessThan(2.2);
  });

  it('each entry names its node; a replay reads one shared order, as at the first call', () => {
    const kept = JSON.parse(stored(3)) as ReturnType<typeof keptParents>;
    expect(Object.keys(kept.parents)).toEqual(['lines.0', 'lines.1', 'lines.2']);
    const read = parentsReader(kept.graph);
    const [a, b] = ['lines.0', 'lines.1'].map((key) => parentData(kept.parents[key], read));
    expect(a).toMatchObject({ id: 1, qty: 2 });
    expect(b).toMatchObject({ id: 2, qty: 2 });
    expect(a.order).toBe(b.order);
    expect((a.order as { lines: unknown[] }).lines).toHaveLength(3);
    // One reader per stored graph: the same objects for every parent of the replay.
    expect(parentsReader(kept.graph)).toBe(read);
  });

  it('a value that is no noted parent is left out', () => {
    const kept = keptParents({ a: 'kept', b: notedParent({ n: 1 }, 'T', {}) });
    expect(Object.keys(kept.parents)).toEqual(['b']);
  });

  it.each<{ name: string; kept: unknown; expected: Record<string, unknown> }>([
    {
      // A record stored before the outputs' one graph: each parent's own graph at its key.
      name: 'a record stored before: its own graph, read without the shared one',
      kept: {
        g: [
          ['o', 'street', 'Main St 1', 'at', ['@', 1]],
          ['d', 0],
        ],
      },
      expected: { street: 'Main St 1', at: new Date(0) },
    },
    {
      name: "a record stored before that: superjson's form",
      kept: { json: { street: 'Main St 1' } },
      expected: { street: 'Main St 1' },
    },
    {
      name: 'a node of the shared graph with no graph stored: empty',
      kept: { p: 0 },
      expected: {},
    },
  ])('$name', ({ kept, expected }) => {
    expect(parentData(kept, parentsReader(undefined))).toEqual(expected);
  });
});

describe('notedParent: written when noted, as it is then', () => {
  /** What each step changes after the parents are noted (in `answer`), in place. */
  type Step = (line: Line, order: Order) => void;
  interface Order {
    id: number;
    tags: string[];
    lines: Line[];
  }
  interface Line {
    id: number;
    tags: string[];
    at: Date;
    meta: { seen: number };
    order: Order;
  }
  const made = () => {
    const order: Order = { id: 7, tags: ['z', 'y'], lines: [] };
    for (const id of [1, 2]) {
      order.lines.push({ id, tags: ['b', 'a'], at: new Date(0), meta: { seen: 0 }, order });
    }
    return order;
  };

  it.each<{ name: string; after: Step; first: Record<string, unknown> }>([
    {
      name: "an array sorted in place (a resolver's `tags.sort()`)",
      after: (line) => line.tags.sort(),
      first: { tags: ['b', 'a'] },
    },
    {
      name: 'a nested object changed',
      after: (line) => (line.meta.seen += 1),
      first: { meta: { seen: 0 } },
    },
    {
      name: 'a Date set',
      after: (line) => line.at.setTime(5),
      first: { at: new Date(0) },
    },
    {
      name: 'a member of its own replaced',
      after: (line) => (line.id = 9),
      first: { id: 1 },
    },
    {
      name: 'an object the parents share (each line.order) changed',
      after: (_line, order) => order.tags.reverse(),
      first: { order: expect.objectContaining({ tags: ['z', 'y'] }) as unknown },
    },
  ])('keeps the data as noted: $name after', ({ after, first }) => {
    const order = made();
    const noted: Record<string, unknown> = {};
    order.lines.forEach((line, i) => (noted[`lines.${i}`] = notedParent(line, 'Line', noted)));
    after(order.lines[0], order);
    const back = readBack(keptParents(noted));
    expect(back['lines.0']).toMatchObject(first);
    // Still one graph: the order both lines reach is one object.
    expect(back['lines.0'].order).toBe(back['lines.1'].order);
  });

  it('writes an object shared with a parent noted before as it was then (one node)', () => {
    const order = made();
    const noted: Record<string, unknown> = {};
    noted.a = notedParent(order.lines[0], 'Line', noted);
    order.tags.sort();
    noted.b = notedParent(order.lines[1], 'Line', noted);
    const back = readBack(keptParents(noted));
    // A replay's first resolver sorts it again, before the second one reads it.
    expect((back.b.order as Order).tags).toEqual(['z', 'y']);
    expect(back.a.order).toBe(back.b.order);
  });

  it.each<{ name: string; keys: string[]; nodes: number }>([
    // The order, its tags and lines arrays, two lines, their tags, Dates and metas; a root each.
    { name: 'all the parents noted', keys: ['a', 'b'], nodes: 3 + 2 * 4 + 2 },
    // Those only the other reaches are not stored (its output left out of the answer).
    { name: 'one of them (the other left out)', keys: ['a'], nodes: 3 + 2 * 4 + 1 },
  ])('stores only what the parents kept reach: $name', ({ keys, nodes }) => {
    const order = made();
    const noted: Record<string, unknown> = {};
    noted.a = notedParent(order.lines[0], 'Line', noted);
    noted.b = notedParent(order.lines[1], 'Line', noted);
    const kept = keptParents(Object.fromEntries(keys.map((key) => [key, noted[key]])));
    expect(kept.graph?.g).toHaveLength(nodes);
    expect(Object.keys(readBack(kept))).toEqual(keys);
  });

  it.each<{ name: string; answers: number[][]; roots: number[] }>([
    // Each parent a node and its meta's: the second answer's nodes after the first's, their
    // refs moved with them (its metas are its own, never the first's).
    { name: 'one answer', answers: [[0, 1]], roots: [0, 2] },
    { name: 'two answers, one after the other', answers: [[0], [1, 2]], roots: [0, 2, 4] },
  ])('joins the graphs of several answers: $name', ({ answers, roots }) => {
    const noted: NotedParent[] = [];
    for (const ids of answers) {
      const answer = {};
      for (const id of ids) noted.push(notedParent({ id, meta: { id } }, 'T', answer)!);
    }
    const joined = joinedGraphs(noted);
    expect(joined.roots).toEqual(roots);
    const kept = keptParents(Object.fromEntries(noted.map((parent, i) => [`k${i}`, parent])));
    expect(Object.values(readBack(kept)).map((data) => data.meta)).toEqual(
      answers.flat().map((id) => ({ id })),
    );
  });
});

describe('parentLosses', () => {
  class Money {
    constructor(private readonly cents: number) {}
    toFixed(digits: number): string {
      return (this.cents / 100).toFixed(digits);
    }
    toJSON(): string {
      return this.toFixed(2);
    }
  }
  it.each<{ name: string; source: object; expected: { type: string; what: string }[] }>([
    { name: 'plain data: nothing said', source: { name: 'Mug', at: new Date(0) }, expected: [] },
    {
      name: 'a Decimal-like member: named, with its kind',
      source: { name: 'Mug', price: new Money(2000) },
      expected: [
        {
          type: 'Product',
          what: 'its data price (an instance of Money) does not come back as it was',
        },
      ],
    },
    { name: 'nothing kept: nothing said', source: {}, expected: [] },
  ])('$name', ({ source, expected }) => {
    const noted = notedParent(source, 'Product', {});
    expect(keptParents(noted ? { product: noted } : {}).losses).toEqual(expected);
    expect(parentLosses('Product', [])).toEqual([]);
  });
});

describe("notedParent: the marks and records the value's own parents have (adversary 110)", () => {
  it.each<{ name: string; places: number; changed: boolean; nodes: number }>([
    // The record and its description string (a leaf, in the node): one node, whatever the places.
    {
      name: 'one object at five places: one record, one node',
      places: 5,
      changed: false,
      nodes: 1,
    },
    { name: 'at two places', places: 2, changed: false, nodes: 1 },
    // Its data changed between places: a record of each, as the value path keeps them.
    { name: 'its data changed between places: two', places: 2, changed: true, nodes: 2 },
  ])('$name', ({ places, changed, nodes }) => {
    const product: Record<string, unknown> = { id: 1, description: 'd'.repeat(50) };
    const noted: Record<string, unknown> = {};
    for (let i = 0; i < places; i++) {
      if (changed && i === 1) product.description = 'other';
      noted[`items.${i}`] = notedParent(product, 'Product', noted);
    }
    const kept = keptParents(noted);
    expect(kept.graph?.g).toHaveLength(nodes);
    expect(new Set(Object.values(kept.parents).map((entry) => entry.p)).size).toBe(nodes);
    const back = readBack(kept);
    expect(back[`items.${places - 1}`].description).toBe(changed ? 'other' : 'd'.repeat(50));
  });

  it("names each line's own object where its order reaches back to it (`s`)", () => {
    interface Line {
      id: number;
      order: { lines: Line[] };
    }
    const order: { lines: Line[] } = { lines: [] };
    for (const id of [1, 2]) order.lines.push({ id, order });
    const noted: Record<string, unknown> = {};
    order.lines.forEach((line, i) => (noted[`lines.${i}`] = notedParent(line, 'Line', noted)));
    const kept = JSON.parse(JSON.stringify(keptParents(noted))) as ReturnType<typeof keptParents>;
    const read = parentsReader(kept.graph)!;
    const sources = ['lines.0', 'lines.1'].map((key) => kept.parents[key].s);
    expect(sources.every((s) => typeof s === 'number')).toBe(true);
    // Each the very object its order's lines hold, as at the first call.
    const lines = (parentData(kept.parents['lines.0'], read).order as { lines: unknown[] }).lines;
    expect(sources.map((s) => read.adopt?.(s))).toEqual([lines[0], lines[1]]);
    expect(read.adopt?.(sources[0])).toBe(lines[0]);
  });

  it.each<{ name: string; source: object; absent: string[]; expected: unknown }>([
    { name: 'a plain row, nothing lacked', source: { id: 1 }, absent: [], expected: { p: 0 } },
    {
      name: 'a row without its optional subtitle',
      source: { id: 1 },
      absent: ['subtitle'],
      expected: { p: 0, a: ['subtitle'] },
    },
    {
      name: 'a dictionary-style row (no prototype)',
      source: Object.assign(Object.create(null) as object, { id: 1 }),
      absent: [],
      expected: { p: 0, i: null },
    },
  ])('stores its marks: $name', ({ source, absent, expected }) => {
    const noted: Record<string, unknown> = {};
    noted.at = notedParent(source, 'Article', noted, absent);
    expect(keptParents(noted).parents.at).toEqual(expected);
  });
});
