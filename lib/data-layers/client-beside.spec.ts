import { isClientBeside } from './client-beside.js';

describe('isClientBeside: a client the app connected itself beside the joined pool (adversary 105)', () => {
  it.each<[string, boolean, boolean, boolean, boolean, boolean]>([
    // handedOut, controlConnection, libraryOwn, listenOnly, warned
    ["the app's own new pg.Client()", false, false, false, false, true],
    ["a pool's client (judged with its pool)", true, false, false, false, false],
    // A release() the app gave its own client (Kysely's PostgresDialect on one connection)
    // does not make it a pool's: no pool handed it out (adversary 106).
    ["the app's own pg.Client given a release()", false, false, false, false, true],
    ["a data layer's control connection of the joined pool", false, true, false, false, false],
    ["the library's own (a host probe)", false, false, true, false, false],
    // LISTEN / UNLISTEN on the app's notification client commit nothing (adversary 106);
    // its other statements are warned of.
    ["the app's notification client's LISTEN", false, false, false, true, false],
  ])('%s', (_name, handedOut, controlConnection, libraryOwn, listenOnly, expected) => {
    expect(isClientBeside({ handedOut, controlConnection, libraryOwn, listenOnly })).toBe(expected);
  });
});
