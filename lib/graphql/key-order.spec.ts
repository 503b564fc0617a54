import { orderedKeys, rebuiltOrder, reorderOwnKeys, storedKeyOrder } from './key-order.js';

describe('rebuiltOrder: the keys in the order a replay writes them', () => {
  it.each([
    [
      [['id', 'body'], ['title'], []],
      ['id', 'body', 'title'],
    ],
    // A later write of a key keeps its first place (a kept field's value).
    [
      [['id', 'body'], ['title'], ['id']],
      ['id', 'body', 'title'],
    ],
    [[[], [], []], []],
  ])('%j -> %j', (written, expected) => {
    expect(rebuiltOrder(...written)).toEqual(expected);
  });
});

describe('storedKeyOrder: the first call order, stored only where the replay would differ', () => {
  it.each([
    // The etag's row selected as { id body etag }: `title` rebuilt last (adversary 101).
    [
      ['id', 'title', 'body'],
      ['id', 'body', 'title'],
      ['id', 'title', 'body'],
    ],
    // Selected in the row's order: nothing stored.
    [['id', 'title', 'body'], ['id', 'title', 'body'], undefined],
    // A JSON document: `id` a field, written first; its other keys came first.
    [
      ['title', '__proto__', 'id'],
      ['id', 'title', '__proto__'],
      ['title', '__proto__', 'id'],
    ],
    // Keys the replay does not rebuild (a method, a getter) are not part of it.
    [['a', 'load', 'b'], ['a', 'b'], undefined],
    // Keys the first call lacked (a selected field absent, answered null) do not count.
    [
      ['b', 'a'],
      ['a', 'b', 'c'],
      ['b', 'a'],
    ],
    [['a', 'b'], ['c', 'a', 'b'], undefined],
    [[], [], undefined],
  ])('source %j, rebuilt %j -> %j', (source, rebuilt, expected) => {
    expect(storedKeyOrder(source, rebuilt)).toEqual(expected);
  });
});

describe('orderedKeys: the replay own keys in the stored order', () => {
  it.each([
    [
      ['id', 'body', 'title'],
      ['id', 'title', 'body'],
      ['id', 'title', 'body'],
    ],
    // A key the replay lacks (its data left out as too large) is skipped; one the first call
    // lacked comes after.
    [
      ['id', 'extra'],
      ['title', 'id'],
      ['id', 'extra'],
    ],
    [
      ['c', 'a', 'b'],
      ['b', 'a'],
      ['b', 'a', 'c'],
    ],
    // A record stored before the order was (or where it did not differ): as rebuilt.
    [['id', 'body', 'title'], undefined, ['id', 'body', 'title']],
    [['id', 'body'], 'id,body', ['id', 'body']],
    // Only strings count, each once.
    [
      ['a', 'b'],
      ['b', 1, 'b', null, 'a'],
      ['b', 'a'],
    ],
  ])('current %j, stored %j -> %j', (current, stored, expected) => {
    expect(orderedKeys(current, stored)).toEqual(expected);
  });
});

describe('reorderOwnKeys', () => {
  it('puts own keys in the stored order, each with its descriptor (a __proto__ key too)', () => {
    const value: Record<string, unknown> = {};
    Object.defineProperty(value, 'id', {
      value: 6,
      enumerable: true,
      writable: true,
      configurable: true,
    });
    Object.defineProperty(value, '__proto__', {
      value: { role: 'admin' },
      enumerable: true,
      writable: true,
      configurable: true,
    });
    Object.defineProperty(value, 'hidden', { value: 1, writable: true, configurable: true });
    reorderOwnKeys(value, ['__proto__', 'id']);
    expect(Object.getOwnPropertyNames(value)).toEqual(['__proto__', 'id', 'hidden']);
    expect(JSON.stringify(value)).toBe('{"__proto__":{"role":"admin"},"id":6}');
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    expect(Object.getOwnPropertyDescriptor(value, 'hidden')?.enumerable).toBe(false);
  });

  it.each([[undefined], [['b', 'a']]])(
    'leaves the order as it is with %j where it is already so',
    (stored) => {
      const value = { b: 1, a: 2 };
      reorderOwnKeys(value, stored);
      expect(Object.keys(value)).toEqual(['b', 'a']);
    },
  );
});
