import { type Subscriber } from 'rxjs';

/** What an rxjs subscriber is to the walk below: linked to the next by `destination`. */
interface LinkedSubscriber {
  closed: boolean;
  destination?: unknown;
}

function isLinked(value: unknown): value is LinkedSubscriber {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { closed?: unknown }).closed === 'boolean' &&
    'destination' in value
  );
}

/**
 * The subscribers of `subscriber`'s chain, from it to its end. rxjs links each operator's
 * subscriber to the next one's by `destination`, down to the one that subscribed first (Nest's,
 * awaiting the request's answer). An error closes each subscriber it passes through (and
 * unlinks it); an operator that takes it and subscribes again (`retry`, `catchError(() =>
 * next.handle())`) closes its own alone and links the new subscription to the same subscriber
 * after it, still open. Read before the error is handed on.
 */
export function chainOf(subscriber: object): object[] {
  const chain: object[] = [subscriber];
  for (
    let next = (subscriber as LinkedSubscriber).destination;
    isLinked(next);
    next = next.destination
  ) {
    chain.push(next);
  }
  return chain;
}

/**
 * Whether the chain of a later subscription (`later`, read as it subscribes) was made by an
 * operator of `earlier` that took its error (the app's retry): it runs into `earlier` at a
 * subscriber still open, and the subscriber of `earlier` just before that one is closed, as
 * the error passed it into the operator that subscribed again (`retry`, `catchError(() =>
 * next.handle())`). Not an audit that subscribes apart (its chain shares nothing with
 * `earlier`), nor after the error went on to the end of it (all closed), nor a subscription
 * merged into the same end while the error is still held before it (an awaiting reporter
 * inside a `merge`: the subscriber before the junction is open).
 */
export function resubscribedFrom(earlier: readonly object[], later: readonly object[]): boolean {
  const before = new Map(earlier.map((subscriber, index) => [subscriber, index]));
  const junction = later.find((subscriber) => before.has(subscriber));
  if (junction === undefined || !isLinked(junction) || junction.closed) return false;
  const index = before.get(junction)!;
  const passed = index > 0 ? earlier[index - 1] : undefined;
  return isLinked(passed) && passed.closed;
}

/**
 * A run that may hand its error on down its chain, and then tell the app's retry of it (a
 * later run made by an operator that took the error: `retry()`, at once or after a delay;
 * `catchError(() => next.handle())`) from any other later run (an audit that subscribes apart,
 * even while an error reporter awaits before it rethrows). A retry the chain cannot show (one
 * through a Promise, `await lastValueFrom(next.handle())`, or across a `share()`) is taken for
 * another run: told the error, never the handler run twice. Routes' runs and fields' runs
 * share it.
 */
export class ErrorHandOff {
  /** The subscribers of the chain its error was handed on through (see `chainOf`). */
  private errorChain?: readonly object[];

  /** Whether a run whose chain is `chain` (read as it subscribed) is the app's retry of it. */
  retriedBy(chain: readonly object[] | undefined): boolean {
    return (
      this.errorChain !== undefined &&
      chain !== undefined &&
      resubscribedFrom(this.errorChain, chain)
    );
  }

  /** Its error was handed on: a later run is its retry only if `retriedBy` says so. */
  get handedOn(): boolean {
    return this.errorChain !== undefined;
  }

  /** Hands `error` on to `subscriber`, noting the chain it goes through (see `retriedBy`). */
  handOn(subscriber: Subscriber<unknown>, error: unknown): void {
    // Read before: the error unlinks each subscriber it closes.
    this.errorChain = chainOf(subscriber);
    subscriber.error(error);
  }
}
