import { keptParent, parentData, parentLosses } from './app-parents.js';

describe('keptParent and parentData', () => {
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
    expect(parentData(keptParent(source)?.kept)).toEqual(expected);
  });

  it('nothing kept: undefined, and an empty parent', () => {
    expect(keptParent({})).toBeUndefined();
    expect(parentData(undefined)).toEqual({});
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
    expect(parentLosses('Product', keptParent(source))).toEqual(expected);
  });
});
