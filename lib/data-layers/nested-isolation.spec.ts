import { asksIsolation } from './nested-isolation.js';

describe('asksIsolation', () => {
  it.each([
    // depth, beside, asked
    [1, false, true], // its code's outermost: BEGIN … ISOLATION LEVEL without the library
    [2, false, false], // nested in its own: a savepoint, TypeORM ignores the level
    [3, false, false],
    [2, true, true], // beside another's: its own connection without the library
    [4, true, true],
  ])('depth %i, beside %s: asked %s', (depth, beside, asked) => {
    expect(asksIsolation(depth, beside)).toBe(asked);
  });
});
