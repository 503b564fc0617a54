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
 * The time an end's wait has spent that counts against the commit's deadline, after `elapsed`
 * more milliseconds: only time in which none of its code's statements ran on the connection
 * (`busy` at the start of that stretch) counts. An end queued behind one of them (a `COMMIT`
 * sent pipelined behind a slow `INSERT`) waits for it as node-postgres runs them, and that
 * wait is the handler's, bounded as its statements are (`statement_timeout`), as the
 * library's own statements at the end wait for them (adversary 82).
 */
export function idleSpent(spent: number, elapsed: number, busy: boolean): number {
  return busy ? spent : spent + elapsed;
}

/** How often `settledWithinIdle` looks whether its code's statements run (ms, at most). */
const IDLE_TICK_MS = 25;

/**
 * Settles once every one of `ends` has settled, or once `ms` of time in which none of its
 * code's statements ran on the connection (`busy()` false: see `idleSpent`) has passed: the
 * request's commit waits for the ends its code called before answering, but no longer than
 * its own deadline counted outside the handler's statements (what is still on its way then
 * is judged open). Looked at every `IDLE_TICK_MS` at most, so the bound is `ms` plus a tick.
 * Says which came first: `settled` (every end) or `bound`.
 */
export function settledWithinIdle(
  ends: readonly Promise<unknown>[],
  ms: number,
  busy: () => boolean,
): Promise<'settled' | 'bound'> {
  const all = Promise.all(ends.map((end) => end.catch(() => undefined))).then(
    () => 'settled' as const,
  );
  // No deadline: the ends alone (a timer of Infinity would fire at once).
  if (!Number.isFinite(ms)) return all;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const bound = new Promise<'bound'>((resolve) => {
    let spent = 0;
    let last = Date.now();
    let wasBusy = busy();
    const look = () => {
      if (stopped) return;
      const now = Date.now();
      spent = idleSpent(spent, now - last, wasBusy);
      last = now;
      wasBusy = busy();
      if (spent >= ms) return resolve('bound');
      timer = setTimeout(look, Math.min(IDLE_TICK_MS, ms - spent));
    };
    timer = setTimeout(look, Math.min(IDLE_TICK_MS, ms));
  });
  return Promise.race([all, bound]).finally(() => {
    stopped = true;
    clearTimeout(timer);
  });
}
