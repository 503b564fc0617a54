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
 * The subscriber at the end of `subscriber`'s chain. rxjs links each operator's subscriber to
 * the next one's by `destination`, down to the one that subscribed first (Nest's, awaiting the
 * request's answer). An error closes each subscriber it passes through (and unlinks it), and an
 * operator that takes it (`retry`, `catchError`) closes its own alone, leaving the ones after
 * it open: so the end stays open when the error was held.
 */
export function endOfChain(subscriber: object): { readonly closed: boolean } | undefined {
  let last: unknown = subscriber;
  for (let next = (last as LinkedSubscriber).destination; isLinked(next); next = next.destination) {
    last = next;
  }
  return isLinked(last) ? last : undefined;
}
