import { stillRunningAfter } from './read-timeout.js';

describe('stillRunningAfter: a rejected statement that may still run on its connection (adversary 82)', () => {
  it.each<[string, unknown, boolean]>([
    // node-postgres' `query_timeout`: rejected on the client's side only.
    ["node-postgres' read timeout", new Error('Query read timeout'), true],
    // The server's answer: its ReadyForQuery follows at once.
    ['an error from the server', Object.assign(new Error('boom'), { code: '22012' }), false],
    ['the connection lost', new Error('Connection terminated unexpectedly'), false],
    ['not an error', 'Query read timeout', false],
    ['nothing', undefined, false],
  ])('%s: %s', (_name, error, expected) => {
    expect(stillRunningAfter(error)).toBe(expected);
  });
});
