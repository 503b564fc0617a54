/**
 * One TypeORM transaction event's subscribers under way (`beforeTransactionStart`,
 * `afterTransactionStart`, `beforeTransactionCommit`, `beforeTransactionRollback` of a nested
 * transaction), and the transactions of the request they start. TypeORM sends the step after
 * them (SAVEPOINT, RELEASE, ROLLBACK TO) with the savepoint name of the runner's depth as it is
 * then: a transaction they started and left open (or still starting) when they return has
 * raised it, and the step would name that one's savepoint, not its own (the transaction its
 * code was told rolled back kept; 3B001). Told apart by what is known, not by timing: the
 * starts they asked that ran at once and have not settled, and the depth. One they awaited to
 * its end left both as they were. (A start a `beforeTransactionCommit` subscriber asked
 * without awaiting it waits for the RELEASE instead, see `CommitHold`, and is not counted.)
 */
export class SubscriberWatch {
  private starting = 0;

  constructor(
    readonly event: string,
    /** The runner's transaction depth as the subscribers were called. */
    readonly depth: number,
  ) {}

  /** A start they asked runs now; the returned function marks it settled. */
  startBegan(): () => void {
    this.starting++;
    let settled = false;
    return () => {
      if (settled) return;
      settled = true;
      this.starting--;
    };
  }

  /** Whether, as they returned, a transaction they started is still open or starting. */
  leftOpen(depthNow: number): boolean {
    return leftOpen(this.starting, this.depth, depthNow);
  }
}

/** The watch's decision, alone: see `SubscriberWatch`. */
export function leftOpen(startsRunning: number, depthThen: number, depthNow: number): boolean {
  return startsRunning > 0 || depthNow !== depthThen;
}

/** The events whose subscribers run before a step TypeORM names by depth. */
export const WATCHED_EVENTS: ReadonlyMap<string, string> = new Map([
  ['BeforeTransactionStart', 'beforeTransactionStart'],
  ['AfterTransactionStart', 'afterTransactionStart'],
  ['BeforeTransactionCommit', 'beforeTransactionCommit'],
  ['BeforeTransactionRollback', 'beforeTransactionRollback'],
]);
