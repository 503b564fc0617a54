import { isClientBeside } from './client-beside.js';

describe('isClientBeside: a client the app connected itself beside the joined pool (adversary 105)', () => {
  it.each<[string, boolean, boolean, boolean, boolean]>([
    // handedOut, controlConnection, libraryOwn, warned
    ["the app's own new pg.Client()", false, false, false, true],
    ["a pool's client (judged with its pool)", true, false, false, false],
    ["a data layer's control connection of the joined pool", false, true, false, false],
    ["the library's own (a host probe)", false, false, true, false],
  ])('%s', (_name, handedOut, controlConnection, libraryOwn, expected) => {
    expect(isClientBeside({ handedOut, controlConnection, libraryOwn })).toBe(expected);
  });
});
