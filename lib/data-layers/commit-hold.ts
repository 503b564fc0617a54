/**
 * A nested commit's `beforeTransactionCommit` subscribers under way, and what a start they ask
 * waits for (see `LazyTransaction.asOwner`). TypeORM's commit sends its `RELEASE SAVEPOINT`
 * right after they return, and names savepoints by depth: a start that runs beside it (one a
 * subscriber asked without awaiting it: an audit row written on the side) reads the depth
 * before the RELEASE and sends its SAVEPOINT after, and the names fall out of step (3B001).
 * Such a start waits for the RELEASE. One the subscriber awaits cannot: the subscribers (and
 * so the RELEASE) wait for it. It is told apart by the subscribers not having returned a tick
 * after it was asked (one that does not await its start returns at once): it then runs at
 * once, inside the committing transaction, as before.
 */
export class CommitHold {
  private subscribersDone = false;
  private release!: () => void;
  private readonly released = new Promise<void>((resolve) => (this.release = resolve));

  /** The subscribers returned (or threw): the RELEASE follows. */
  subscribersReturned(): void {
    this.subscribersDone = true;
  }

  /** The RELEASE was sent and answered (or the commit failed): held starts may run. */
  releasedNow(): void {
    this.release();
  }

  /** Settles once a start asked from the subscribers now may run (see the class's note). */
  async startMayRun(): Promise<void> {
    await new Promise((resolve) => setImmediate(resolve));
    if (!this.subscribersDone) return;
    await this.released;
  }
}
