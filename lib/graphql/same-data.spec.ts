import { jest } from '@jest/globals';
import { mayHideState, sameData } from './same-data.js';

/** A value object of `#private` state only, as a Temporal-like `ZonedDateTime` (adversary 105). */
class Zoned {
  readonly #zone: string;
  constructor(zone: string) {
    this.#zone = zone;
  }
  get zone(): string {
    return this.#zone;
  }
}

class OpenZoned {
  constructor(readonly zone: string) {}
}

/** `#private` state beside a public member (adversary 107), which `isDeepStrictEqual` compares. */
class CalendarZoned {
  readonly calendar = 'iso8601';
  readonly #zone: string;
  constructor(zone: string) {
    this.#zone = zone;
  }
  get zone(): string {
    return this.#zone;
  }
}

class BusinessDay extends Date {}

function list(n: number): unknown[] {
  return Array.from({ length: n }, (_, i) => ({ i }));
}

function nested(n: number, leaf: unknown): unknown {
  let value: unknown = { leaf };
  for (let i = 0; i < n; i += 1) value = { c: value };
  return value;
}

describe('sameData', () => {
  // Made in the case (a deep tree in a case's title would overflow jest's own printing).
  it.each<[string, () => [unknown, unknown], boolean]>([
    ['equal plain data', () => [{ a: [1, { b: 2 }] }, { a: [1, { b: 2 }] }], true],
    ['another value', () => [{ a: 1 }, { a: 2 }], false],
    ['a plain object and one without a prototype', () => [{}, Object.create(null)], false],
    ['deep equal trees', () => [nested(30_000, 1), nested(30_000, 1)], true],
    ['deep trees apart at their leaf', () => [nested(30_000, 1), nested(30_000, 2)], false],
    [
      'deep trees, a Date and a string',
      () => [nested(30_000, new Date(0)), nested(30_000, 'x')],
      false,
    ],
    [
      'two objects of #private state only, apart',
      () => [new Zoned('Europe/Paris'), new Zoned('UTC')],
      false,
    ],
    [
      'two objects of #private state only, alike',
      () => [new Zoned('UTC'), new Zoned('UTC')],
      false,
    ],
    [
      'one object of #private state, itself',
      () => {
        const zoned = new Zoned('UTC');
        return [zoned, zoned];
      },
      true,
    ],
    ['#private state in a list', () => [[new Zoned('Europe/Paris')], [new Zoned('UTC')]], false],
    [
      'objects of #private state beside a public member, apart',
      () => [new CalendarZoned('UTC'), new CalendarZoned('Europe/Paris')],
      false,
    ],
    [
      'lists of such objects, apart',
      () => [
        [1, new CalendarZoned('UTC')],
        [1, new CalendarZoned('Europe/Paris')],
      ],
      false,
    ],
    // Its class may hold what it cannot see: never taken for the same but by identity.
    [
      'objects of a class with public state, alike',
      () => [new OpenZoned('UTC'), new OpenZoned('UTC')],
      false,
    ],
    [
      'objects of a class with public state, apart',
      () => [new OpenZoned('UTC'), new OpenZoned('CET')],
      false,
    ],
    ['an instance and a plain copy', () => [new OpenZoned('UTC'), { zone: 'UTC' }], false],
    ['two Dates alike', () => [new Date(0), new Date(0)], true],
    ['two Date subclasses alike', () => [new BusinessDay(0), new BusinessDay(0)], false],
    ['two Buffers alike', () => [Buffer.from('ab'), Buffer.from('ab')], true],
    ['two Buffers apart', () => [Buffer.from('ab'), Buffer.from('ac')], false],
    ['two typed arrays alike', () => [new Float64Array([1, 2]), new Float64Array([1, 2])], true],
    ['long lists alike', () => [list(20_000), list(20_000)], true],
  ])('tells %s', (_name, make, same) => {
    const [a, b] = make();
    expect(sameData(a, b)).toBe(same);
  });
});

describe('mayHideState', () => {
  it.each<[string, () => unknown, boolean]>([
    ['a string', () => 'x', false],
    ['plain data', () => ({ a: [1, new Date(0), new Map([['k', new Set([1])]])] }), false],
    ['an object without a prototype', () => Object.create(null) as object, false],
    ['an empty plain object', () => ({}), false],
    ['an object of #private state only', () => new Zoned('UTC'), true],
    ['one deep in a Map', () => ({ m: new Map([['k', [new Zoned('UTC')]]]) }), true],
    ['one in a Set', () => new Set([new Zoned('UTC')]), true],
    ['an object of a class with public state', () => new OpenZoned('UTC'), true],
    ['#private state beside a public member', () => new CalendarZoned('UTC'), true],
    ['a Buffer', () => Buffer.alloc(16), false],
    ['a typed array', () => new Uint16Array(4), false],
    ['an app subclass of a typed array', () => new (class Bytes extends Uint8Array {})(4), true],
    [
      'one in a long list',
      () => [...Array.from({ length: 20_000 }, () => 1), new Zoned('UTC')],
      true,
    ],
    [
      'one beside the items of a short list',
      () => Object.assign([1, 2], { extra: new Zoned('UTC') }),
      true,
    ],
    ['an empty instance of a class', () => new (class Empty {})(), true],
    ['a Date subclass without own members', () => new BusinessDay(0), true],
    ['a Promise', () => Promise.resolve(1), true],
    [
      'a cycle',
      () => {
        const loop: Record<string, unknown> = {};
        loop.self = loop;
        return loop;
      },
      false,
    ],
  ])('tells %s: %s', (_name, make, hides) => {
    expect(mayHideState(make())).toBe(hides);
  });

  // Linear in its size: a Buffer's bytes are never walked (its keys, listed, took 6 s for two
  // 4 MB Buffers), nor an array's items listed as keys. Told by what it reads, not by time.
  it('reads no member of a Buffer nor any key of a long array', () => {
    const ownKeys = jest.spyOn(Reflect, 'ownKeys');
    try {
      expect(mayHideState({ bytes: Buffer.alloc(4 * 1024 * 1024) })).toBe(false);
      expect(mayHideState(Array.from({ length: 100_000 }, () => 1))).toBe(false);
      const listed = ownKeys.mock.results.map((result) => (result.value as unknown[]).length);
      expect(Math.max(0, ...listed)).toBeLessThanOrEqual(1);
    } finally {
      ownKeys.mockRestore();
    }
  });
});
