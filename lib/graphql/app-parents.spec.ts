import {
  keptParents,
  notedParent,
  parentData,
  parentLosses,
  parentsReader,
} from './app-parents.js';

/** A parent's own data kept alone (one graph with only it) and read back. */
function throughStore(source: object): Record<string, unknown> {
  const noted = notedParent(source, 'Address');
  const kept = keptParents(noted ? { at: noted } : {});
  const stored = JSON.parse(JSON.stringify(kept)) as typeof kept;
  return parentData(stored.parents.at, parentsReader(stored.graph));
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
    expect(notedParent({}, 'Address')).toBeUndefined();
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
    order(count).lines.forEach((line, i) => (noted[`lines.${i}`] = notedParent(line, 'Line')));
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
    const kept = keptParents({ a: 'kept', b: notedParent({ n: 1 }, 'T') });
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
    const noted = notedParent(source, 'Product');
    expect(keptParents(noted ? { product: noted } : {}).losses).toEqual(expected);
    expect(parentLosses('Product', [])).toEqual([]);
  });
});
