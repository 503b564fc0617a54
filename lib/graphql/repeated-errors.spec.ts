import { noteRepeated, type RawError, repeatedCopies } from './repeated-errors.js';

describe('repeatedCopies', () => {
  const copy = (message: string, path: (string | number)[], wrapped = false): RawError => {
    const thrown = Object.assign(new Error(message), { path });
    noteRepeated(thrown);
    return wrapped ? { message, path, originalError: thrown } : thrown;
  };
  const own = (message: string, path: (string | number)[]): RawError => ({ message, path });
  it.each<{ name: string; errors: RawError[]; expected: number[] }>([
    {
      name: 'a copy of an error the replay answers itself: dropped',
      errors: [copy('down', ['o', 'lines', 1, 'price']), own('down', ['o', 'lines', 1, 'price'])],
      expected: [0],
    },
    {
      name: 'a copy graphql-js wrapped: dropped alike',
      errors: [own('down', ['o', 'p']), copy('down', ['o', 'p'], true)],
      expected: [1],
    },
    {
      name: 'a copy no other error answers (not made again): kept',
      errors: [copy('down', ['o', 'p']), own('down', ['o', 'q'])],
      expected: [],
    },
    {
      name: 'another message at the same place: kept',
      errors: [copy('down', ['o', 'p']), own('other', ['o', 'p'])],
      expected: [],
    },
    { name: 'no copies: none', errors: [own('a', ['x']), own('a', ['x'])], expected: [] },
  ])('$name', ({ errors, expected }) => {
    expect([...repeatedCopies(errors)]).toEqual(expected);
  });
});
