import {
  type AnswerError,
  answerHookOn,
  pathOf,
  storeAnswersOf,
  storeAtAnswer,
  waitingFor,
  withStoreFailures,
} from './stored-at-answer.js';

describe('withStoreFailures', () => {
  const unavailable = new Error('store unavailable');
  const failure = { path: ['pay'], error: unavailable };
  const json = (entry: AnswerError) => entry;
  it.each([
    [
      'no failure: the errors as they were',
      [{ message: 'declined', path: ['pay'] }],
      [],
      [{ message: 'declined', path: ['pay'] }],
    ],
    [
      'the field’s error replaced',
      [{ message: 'declined', path: ['pay'] }],
      [failure],
      [{ message: 'store unavailable', path: ['pay'] }],
    ],
    [
      'another field’s error kept, this one added',
      [{ message: 'x', path: ['b'] }],
      [failure],
      [
        { message: 'x', path: ['b'] },
        { message: 'store unavailable', path: ['pay'] },
      ],
    ],
    [
      'no errors yet: added',
      undefined,
      [failure],
      [{ message: 'store unavailable', path: ['pay'] }],
    ],
    [
      'paths dropped by the app’s formatter: found by the resolver’s message',
      [{ message: 'other' }, { message: 'declined' }],
      [{ ...failure, message: 'declined' }],
      [{ message: 'other' }, { message: 'store unavailable', path: ['pay'] }],
    ],
  ] as const)('%s', (_name, errors, failures, expected) => {
    const entries = errors as readonly AnswerError[] | undefined;
    expect(withStoreFailures(entries, failures, json)).toEqual(expected);
  });

  it('takes the error’s own JSON where it has one (a GraphQLError: its extensions)', () => {
    const error = Object.assign(new Error('m'), {
      toJSON: () => ({ message: 'm', extensions: { code: 'store_unavailable' } }),
    });
    expect(withStoreFailures([], [{ path: ['a', 0], error }], json)).toEqual([
      { message: 'm', extensions: { code: 'store_unavailable' }, path: ['a', 0] },
    ]);
  });
});

describe('storeAtAnswer', () => {
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  it('waits only where the driver’s hook is on: elsewhere the caller stores at once', () => {
    const context = {};
    expect(
      storeAtAnswer(
        context,
        { path: ['pay'], message: 'm', id: 'k' },
        () => Promise.resolve(undefined),
        1000,
      ),
    ).toBe(undefined);
    expect(
      storeAtAnswer(
        undefined,
        { path: ['pay'], message: 'm', id: 'k' },
        () => Promise.resolve(undefined),
        1000,
      ),
    ).toBe(undefined);
  });

  it('stores once, as the answer goes out, and says which field could not be stored', async () => {
    const context = {};
    answerHookOn(context);
    let stores = 0;
    const failed = new Error('not stored');
    const waiting = storeAtAnswer(
      context,
      { path: ['pay'], message: 'declined', id: 'k' },
      () => {
        stores++;
        return Promise.resolve(failed);
      },
      1000,
    );
    expect(waiting).toBeDefined();
    expect(stores).toBe(0);
    expect(await storeAnswersOf(context)).toEqual([
      { path: ['pay'], message: 'declined', error: failed },
    ]);
    expect(await storeAnswersOf(context)).toEqual([]);
    expect(waiting!.cancel()).toBe(false);
    expect(stores).toBe(1);
  });

  it('is found by its key while it waits, and forgotten once stored', async () => {
    const context = {};
    answerHookOn(context);
    const waiting = storeAtAnswer(
      context,
      { path: ['pay'], message: 'm', id: 'k-found' },
      () => Promise.resolve(undefined),
      1000,
    );
    expect(waitingFor('k-found')).toBe(waiting);
    await waiting!.start();
    expect(waitingFor('k-found')).toBeUndefined();
  });

  it('never stores one cancelled (a retry took the key over)', async () => {
    const context = {};
    answerHookOn(context);
    let stores = 0;
    const waiting = storeAtAnswer(
      context,
      { path: ['pay'], message: 'm', id: 'k' },
      () => Promise.resolve(void stores++),
      20,
    );
    expect(waiting!.cancel()).toBe(true);
    expect(waiting!.cancel()).toBe(false);
    await sleep(40);
    expect(await storeAnswersOf(context)).toEqual([]);
    expect(stores).toBe(0);
  });

  it('stores by its fallback when no answer goes out (the client left)', async () => {
    const context = {};
    answerHookOn(context);
    let stores = 0;
    storeAtAnswer(
      context,
      { path: ['pay'], message: 'm', id: 'k' },
      () => Promise.resolve(void stores++),
      20,
    );
    await sleep(60);
    expect(stores).toBe(1);
    expect(await storeAnswersOf(context)).toEqual([]);
  });
});

describe('pathOf', () => {
  it.each([
    ['a root field', { path: { key: 'pay', prev: undefined } }, ['pay']],
    [
      'an aliased field in a list',
      { path: { key: 0, prev: { key: 'b', prev: undefined } } },
      ['b', 0],
    ],
    ['no info', undefined, []],
  ] as const)('%s', (_name, info, expected) => {
    expect(pathOf(info)).toEqual(expected);
  });
});
