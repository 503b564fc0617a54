import { Observable } from 'rxjs';

/**
 * A promise's value as an observable that knows when nobody is waiting for it any more.
 *
 * `from(promise)` forgets a value that arrives after the subscriber left; for a claim that is
 * wrong: the key is held, with no worker behind it, until its lease runs out. An outer
 * interceptor (a global `timeout()`) unsubscribes while the claim is in flight, its 408 goes
 * out, and the claim commits afterwards. Here the late value goes to `orphaned` instead, which
 * gives the key back at once, so that the client's retry runs rather than meet a 409 for the
 * whole lease. `left` hears when the subscriber left before the value, with a promise of the
 * late value's handling (`orphaned`'s promise, if it returns one): a run of the same request
 * after this one waits for it before it claims (see `RequestRun`).
 */
export function whileSubscribed<T>(
  pending: Promise<T>,
  orphaned: (value: T) => unknown,
  left?: (landed: Promise<unknown>) => void,
): Observable<T> {
  return new Observable<T>((subscriber) => {
    let gone = false;
    let answered = false;
    const landed = pending.then(
      (value) => {
        if (gone) return orphaned(value);
        answered = true;
        subscriber.next(value);
        subscriber.complete();
      },
      (error: unknown) => {
        // Nothing was claimed, and the request it would be answered to is gone.
        answered = true;
        if (!gone) subscriber.error(error);
      },
    );
    return () => {
      // Left before the value: `landed` settles once it came and `orphaned` dealt with it.
      if (!gone && !answered) left?.(landed);
      gone = true;
    };
  });
}
