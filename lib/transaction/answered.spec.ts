import { answered } from './answered.js';

describe('answered', () => {
  const cases: {
    name: string;
    outcome: 'ok' | 'fails';
    callback: boolean;
    expected: unknown;
  }[] = [
    { name: 'a promise, resolved', outcome: 'ok', callback: false, expected: 'rows' },
    { name: 'a promise, rejected', outcome: 'fails', callback: false, expected: 'boom' },
    { name: 'a callback, with the result', outcome: 'ok', callback: true, expected: 'rows' },
    { name: 'a callback, with the error', outcome: 'fails', callback: true, expected: 'boom' },
  ];

  it.each(cases)('$name', async ({ outcome, callback, expected }) => {
    const seen: unknown[][] = [];
    const run = (args: unknown[]) => {
      seen.push(args);
      return outcome === 'ok' ? Promise.resolve('rows') : Promise.reject(new Error('boom'));
    };
    if (!callback) {
      const result = answered(['SELECT 1', [1]], run) as Promise<unknown>;
      const settled = await result.then(
        (value) => value,
        (error: Error) => error.message,
      );
      expect(settled).toBe(expected);
    } else {
      const told = await new Promise((resolve) => {
        const returned = answered(
          [
            'SELECT 1',
            [1],
            (error: Error | null, result?: unknown) => resolve(error ? error.message : result),
          ],
          run,
        );
        expect(returned).toBeUndefined();
      });
      expect(told).toBe(expected);
    }
    // The callback is never handed on: `run` gets the statement alone.
    expect(seen).toEqual([['SELECT 1', [1]]]);
  });
});
