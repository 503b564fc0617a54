import { Observable } from 'rxjs';

/**
 * A promise's value as an observable that knows when nobody is waiting for it any more.
 *
 * `from(promise)` forgets a value that arrives after the subscriber left; for a claim that is
 * wrong: the key is held, with no worker behind it, until its lease runs out. An outer
 * interceptor (a global `timeout()`) unsubscribes while the claim is in flight, its 408 goes
 * out, and the claim commits afterwards. Here the late value goes to `orphaned` instead, which
 * gives the key back at once, so that the client's retry runs rather than meet a 409 for the
 * whole lease.
 */
export function whileSubscribed<T>(
  pending: Promise<T>,
  orphaned: (value: T) => void,
): Observable<T> {
  return new Observable<T>((subscriber) => {
    let gone = false;
    pending.then(
      (value) => {
        if (gone) return orphaned(value);
        subscriber.next(value);
        subscriber.complete();
      },
      (error: unknown) => {
        // Nothing was claimed, and the request it would be answered to is gone.
        if (!gone) subscriber.error(error);
      },
    );
    return () => {
      gone = true;
    };
  });
}
