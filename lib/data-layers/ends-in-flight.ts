/**
 * The nested transactions' ends (`COMMIT`, `ROLLBACK` on a view of the request's connection,
 * a view's `release()` that rolls back what it left open) called and not yet over: a
 * `ROLLBACK` until it is handed to node-postgres, a `COMMIT` until it is done (one that fails
 * leaves its nested transaction open), a release until its rollback is handed over. Without the library each view is a connection of
 * its own and node-postgres runs its `COMMIT` or `ROLLBACK` in call order, before anything
 * called after it; here they share one connection, and an end reaches it only after a few
 * awaits of its own (its `SAVEPOINT`, the connection, the settings it puts back). A statement
 * called after an end, through another view or `pool.query()`, waits until that end is handed
 * over, so that it runs after it (not inside a nested transaction its code had ended) and is
 * judged once it is (see `PoolTransaction.statement`).
 */
export class EndsInFlight {
  private readonly unsent = new Set<Promise<unknown>>();

  /**
   * An end called now: `handed` settles once it is over as far as what is called after it is
   * concerned (see above), or once the call is done without sending anything (nothing ran
   * inside it, refused, failed).
   */
  add(handed: Promise<unknown>): void {
    const settled = handed.then(
      () => undefined,
      () => undefined,
    );
    this.unsent.add(settled);
    void settled.then(() => this.unsent.delete(settled));
  }

  /**
   * What a statement called now waits for: the ends called before it. Taken at its call, so
   * that an end called after it never holds it (nor can two wait for each other).
   */
  before(): readonly Promise<unknown>[] {
    return [...this.unsent];
  }
}

/**
 * Settles once every one of `ends` has settled, or after `ms`, whichever comes first: the
 * request's commit waits for the ends its code called before answering, but no longer than
 * its own deadline (what is still on its way then is judged open).
 */
export function settledWithin(ends: readonly Promise<unknown>[], ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  const all = Promise.all(ends.map((end) => end.catch(() => undefined))).then(() => undefined);
  return Promise.race([all, bound]).finally(() => clearTimeout(timer));
}
