import { type HandlerCall, isOwnCall } from './own-handler-call.js';

describe('isOwnCall: whether a call of a wrapped method is the route handler the request waits for', () => {
  const call = (overrides: Partial<HandlerCall>): HandlerCall => ({
    inRequest: true,
    insideHandler: false,
    answeredWithObservable: false,
    ...overrides,
  });

  it.each<[string, HandlerCall, boolean]>([
    ["Nest's first call", call({}), true],
    // Its first attempt's Promise failed already: the second is the one going on.
    ["a retrying interceptor's second call, the first a Promise", call({}), true],
    [
      'a sibling route method called from within it (sync, or after an await)',
      call({ insideHandler: true }),
      false,
    ],
    [
      'a sibling called lazily from the Observable it answered with',
      call({ answeredWithObservable: true }),
      false,
    ],
    [
      "a retry's call after an Observable answer (cancelled alike)",
      call({ answeredWithObservable: true }),
      false,
    ],
    ['a call outside any idempotent request', call({ inRequest: false }), false],
    [
      'outside a request, from within a handler',
      call({ inRequest: false, insideHandler: true }),
      false,
    ],
  ])('%s', (_case, made, expected) => {
    expect(isOwnCall(made)).toBe(expected);
  });
});
