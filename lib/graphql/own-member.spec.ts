import { defineOwn } from './own-member.js';

describe('defineOwn: a data key defined, never assigned', () => {
  it.each(['__proto__', 'constructor', 'prototype', 'toString', 'title'])(
    '%s becomes an own enumerable key, the prototype untouched',
    (name) => {
      const target: Record<string, unknown> = {};
      defineOwn(target, name, { role: 'admin' });
      expect(Object.keys(target)).toEqual([name]);
      expect(Object.getPrototypeOf(target)).toBe(Object.prototype);
      expect(Object.getOwnPropertyDescriptor(target, name)).toEqual({
        value: { role: 'admin' },
        enumerable: true,
        writable: true,
        configurable: true,
      });
    },
  );

  it('never runs a setter of its class', () => {
    let set = 0;
    class Guarded {
      set title(_value: string) {
        set += 1;
      }
    }
    const target = new Guarded();
    defineOwn(target, 'title', 't');
    expect(set).toBe(0);
    expect(Object.keys(target)).toEqual(['title']);
  });
});
