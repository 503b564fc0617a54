import {
  catchError,
  defer,
  EMPTY,
  from,
  ignoreElements,
  lastValueFrom,
  mergeAll,
  merge,
  mergeMap,
  Observable,
  type OperatorFunction,
  retry,
  switchMap,
  type Subscriber,
  tap,
  throwError,
  timer,
} from 'rxjs';
import { chainOf, resubscribedFrom } from './end-of-chain.js';

/**
 * Whether a later subscription to the library's Observable is the app's retry of the first
 * one's error (it runs into the first one's chain, still open) or a subscription apart (an
 * audit that subscribes late), through the layers Nest puts between interceptors (a deferred
 * Promise of the next handler, merged).
 */
describe('chainOf and resubscribedFrom', () => {
  /** Nest's link between two interceptors: `defer(async () => next).pipe(mergeAll())`. */
  const nestLayer = (inner: () => Observable<unknown>) =>
    defer(async () => inner()).pipe(mergeAll());

  /**
   * The app's operator around the library, the first subscription failed, and then an audit
   * that subscribes apart 30 ms later: whether each later subscription is a retry.
   */
  const later = async (
    appOperator: OperatorFunction<unknown, unknown>,
  ): Promise<{ retry: boolean[]; audit: boolean }> => {
    const subscribers: Subscriber<unknown>[] = [];
    const library = new Observable<unknown>((subscriber) => {
      subscribers.push(subscriber);
    });
    const handle = () => nestLayer(() => library);
    const answered = lastValueFrom(nestLayer(() => handle().pipe(appOperator))).catch(
      () => undefined,
    );
    await new Promise((resolve) => setImmediate(resolve));
    const first = chainOf(subscribers[0]);
    subscribers[0].error(new Error('declined'));
    await new Promise((resolve) => setTimeout(resolve, 30));
    const retry = subscribers.slice(1).map((s) => resubscribedFrom(first, chainOf(s)));
    const count = subscribers.length;
    handle().subscribe({ error: () => undefined });
    await new Promise((resolve) => setImmediate(resolve));
    const audit = resubscribedFrom(first, chainOf(subscribers[count]));
    for (const subscriber of subscribers.slice(1)) subscriber.error(new Error('again'));
    await Promise.race([answered, new Promise((resolve) => setTimeout(resolve, 20))]);
    return { retry, audit };
  };

  it.each<[string, OperatorFunction<unknown, unknown>, boolean[]]>([
    ['no operator of the app’s: the error goes on to Nest', tap(), []],
    ['retry(1): subscribed again at once', retry(1), [true]],
    [
      'retry({ count: 1, delay: 10 }): subscribed again later',
      retry({ count: 1, delay: 10 }),
      [true],
    ],
    [
      'an error reporter that awaits, then rethrows: no retry',
      catchError((error: unknown) =>
        from(new Promise((resolve) => setTimeout(resolve, 50))).pipe(
          mergeMap(() => throwError(() => error)),
        ),
      ),
      [],
    ],
    [
      'a retry whose delay gives up after a wait: no retry',
      retry({
        count: 1,
        delay: (error: unknown) => timer(5).pipe(mergeMap(() => throwError(() => error))),
      }),
      [],
    ],
  ])('%s', async (_name, appOperator, retried) => {
    const seen = await later(appOperator);
    expect(seen.retry).toEqual(retried);
    // An audit that subscribes apart never runs into the failed chain.
    expect(seen.audit).toBe(false);
  });

  it('a subscription merged into the same end while a reporter inside holds the error: no retry', async () => {
    // Adversary 39a: `merge(result$, from(open()).pipe(switchMap(() => result$), ...))`, an
    // error reporter that awaits before it rethrows inside it: the audit's subscription runs
    // into the failed chain's open end after merge, but the error never passed into merge.
    const subscribers: Subscriber<unknown>[] = [];
    const library = new Observable<unknown>((subscriber) => {
      subscribers.push(subscriber);
    });
    const handle = () => nestLayer(() => library);
    const reporter = catchError((error: unknown) =>
      from(new Promise((resolve) => setTimeout(resolve, 60))).pipe(
        mergeMap(() => throwError(() => error)),
      ),
    );
    const audit = from(new Promise((resolve) => setTimeout(resolve, 20))).pipe(
      switchMap(() => handle()),
      ignoreElements(),
      catchError(() => EMPTY),
    );
    const answered = lastValueFrom(nestLayer(() => merge(handle().pipe(reporter), audit))).catch(
      () => undefined,
    );
    await new Promise((resolve) => setImmediate(resolve));
    const first = chainOf(subscribers[0]);
    subscribers[0].error(new Error('declined'));
    await new Promise((resolve) => setTimeout(resolve, 40));
    expect(subscribers).toHaveLength(2);
    expect(resubscribedFrom(first, chainOf(subscribers[1]))).toBe(false);
    subscribers[1].error(new Error('again'));
    await answered;
  });
});
