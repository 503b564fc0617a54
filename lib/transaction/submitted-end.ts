/** A submittable as node-postgres tells it how it ends (a `pg.Query`, a cursor). */
interface Submitted {
  handleReadyForQuery?: (...args: unknown[]) => unknown;
  handleError?: (...args: unknown[]) => unknown;
}

/**
 * Settles once node-postgres says `submittable` ended: its ReadyForQuery, or its error (what
 * is queued behind it on the connection runs then). One that node-postgres could not tell
 * (neither method) is taken as ended at once, so that nothing ever waits on it forever.
 */
export function endOf(submittable: object): Promise<void> {
  const watched = submittable as Submitted;
  return new Promise<void>((resolve) => {
    let told = false;
    for (const method of ['handleReadyForQuery', 'handleError'] as const) {
      const own = watched[method];
      if (typeof own !== 'function') continue;
      told = true;
      watched[method] = (...args: unknown[]) => {
        resolve();
        return own.apply(submittable, args);
      };
    }
    if (!told) resolve();
  });
}
