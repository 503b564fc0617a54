import { HttpException } from '@nestjs/common';
import { takesStoredProp } from './error-props.js';

describe('takesStoredProp', () => {
  it.each<[string, () => object, string, boolean]>([
    ['a prop it lacks', () => new Error('x'), 'code', true],
    ['its own message', () => new Error('x'), 'message', false],
    ['a method of its class', () => new HttpException('x', 409), 'getStatus', false],
    ['an own __proto__ it lacks', () => new Error('x'), '__proto__', true],
    [
      'an own __proto__ it has',
      () => Object.defineProperty(new Error('x'), '__proto__', { value: 1 }),
      '__proto__',
      false,
    ],
  ])('for %s', (_name, make, prop, takes) => {
    expect(takesStoredProp(make(), prop)).toBe(takes);
  });
});
