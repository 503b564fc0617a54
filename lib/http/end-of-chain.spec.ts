import {
  catchError,
  defer,
  lastValueFrom,
  mergeAll,
  Observable,
  type OperatorFunction,
  retry,
  type Subscriber,
  tap,
} from 'rxjs';
import { endOfChain } from './end-of-chain.js';

/**
 * Whether an error handed to the library's subscriber stays in the app's chain (an operator
 * takes it) or goes on to its end, through the layers Nest puts between interceptors (a
 * deferred Promise of the next handler, merged).
 */
describe('endOfChain', () => {
  /** Nest's link between two interceptors: `defer(async () => next).pipe(mergeAll())`. */
  const nestLayer = (inner: () => Observable<unknown>) =>
    defer(async () => inner()).pipe(mergeAll());

  const handOn = async (appOperator: OperatorFunction<unknown, unknown>): Promise<boolean> => {
    let library!: Subscriber<unknown>;
    const source = new Observable<unknown>((subscriber) => {
      library ??= subscriber;
    });
    const chain = nestLayer(() => nestLayer(() => source).pipe(appOperator));
    const answered = lastValueFrom(chain).catch(() => undefined);
    await new Promise((resolve) => setImmediate(resolve));
    const end = endOfChain(library);
    library.error(new Error('declined'));
    const held = end !== undefined && !end.closed;
    await Promise.race([answered, new Promise((resolve) => setTimeout(resolve, 20))]);
    return held;
  };

  it.each<[string, OperatorFunction<unknown, unknown>, boolean]>([
    ['no operator of the app’s: the error goes on to Nest', tap(), false],
    ['an audit’s tap: it watches, the error goes on', tap({ error: () => undefined }), false],
    ['retry(1): taken, subscribed again at once', retry(1), true],
    [
      'retry({ count: 1, delay: 50 }): taken, subscribed again later',
      retry({ count: 1, delay: 50 }),
      true,
    ],
    [
      'catchError that rethrows: the error goes on',
      catchError((error: unknown) => {
        throw error;
      }),
      false,
    ],
  ])('%s', async (_name, appOperator, held) => {
    expect(await handOn(appOperator)).toBe(held);
  });
});
