import { hasNoPrototype, unnamedPlain } from './bare-objects.js';

class Row {}

describe('hasNoPrototype: whether an object of no named class is stored as one without', () => {
  it.each<[string, object, boolean]>([
    ['an object without a prototype', Object.create(null) as object, true],
    [
      'one with its own data, without a prototype',
      Object.assign(Object.create(null), { id: 1 }),
      true,
    ],
    ['a plain object', { id: 1 }, false],
    ['an object of a class no one names (said as a loss)', new Row(), false],
    ['an array', [], false],
  ])('%s: %p', (_name, value, bare) => {
    expect(hasNoPrototype(value)).toBe(bare);
  });
});

describe('unnamedPlain: the empty object a replay builds where INSTANCE names no class', () => {
  it.each<[string, unknown, object | null]>([
    ['null: without a prototype', null, null],
    ['a record stored before (no INSTANCE): plain', undefined, Object.prototype],
    ['false: plain', false, Object.prototype],
    ['the Nest type, where Nest built no class of it: plain', true, Object.prototype],
  ])('%s', (_name, named, prototype) => {
    const built = unnamedPlain(named);
    expect(Object.getPrototypeOf(built)).toBe(prototype);
    expect(Reflect.ownKeys(built)).toEqual([]);
  });

  it('builds a new object each time', () => {
    expect(unnamedPlain(null)).not.toBe(unnamedPlain(null));
    expect(unnamedPlain(undefined)).not.toBe(unnamedPlain(undefined));
  });
});
