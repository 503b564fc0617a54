import { isPlainData } from './plain-data.js';

class UserEntity {
  constructor(
    readonly email: string,
    readonly password: string,
  ) {}
}

describe('isPlainData', () => {
  const deep = (levels: number): unknown => (levels === 0 ? 1 : { next: deep(levels - 1) });
  const wide = Array.from({ length: 1_000 }, (_, i) => ({
    id: i,
    a: 1,
    b: 'x',
    c: [1, 2],
    d: null,
  }));
  const cyclic: Record<string, unknown> = { id: 1 };
  cyclic.self = cyclic;
  const shared = { id: 7 };
  it.each<[string, unknown, boolean]>([
    ['a string', 'ok', true],
    ['a number', 42, true],
    ['null', null, true],
    ['undefined', undefined, true],
    ['a plain object', { id: 1, name: 'a' }, true],
    ['an object without prototype', Object.assign(Object.create(null) as object, { a: 1 }), true],
    ['nested arrays and objects', { items: [{ id: 1 }, [2, 3]] }, true],
    ['a date inside', { at: new Date(0) }, true],
    ['a class instance', new UserEntity('a@b', 'hash'), false],
    ['a class instance in an array', [{ id: 1 }, new UserEntity('a@b', 'hash')], false],
    ['a class instance deep inside', { data: { user: new UserEntity('a@b', 'hash') } }, false],
    ['an object with toJSON', { toJSON: () => ({}) }, false],
    ['a function inside', { run: () => 1 }, false],
    ['a Map', new Map([[1, 2]]), false],
    ['a Buffer', Buffer.from('x'), false],
    ['a deep plain chain', deep(200), true],
    ['a large answer (1,000 items, 7,000 values)', wide, true],
    ['a value that holds itself', cyclic, false],
    ['a value shared by two fields', { a: shared, b: shared }, true],
  ])('%s: %s', (_name, value, plain) => {
    expect(isPlainData(value)).toBe(plain);
  });
});
