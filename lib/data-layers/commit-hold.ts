import { AsyncLocalStorage } from 'node:async_hooks';

/** One subscriber's call of a hold's event, and whether what it returned has settled. */
interface SubscriberCall {
  readonly hold: CommitHold;
  returned: boolean;
}

/** The subscriber call the caller runs in (see `CommitHold.subscriberCall`). */
const calls = new AsyncLocalStorage<SubscriberCall>();

/**
 * A nested commit's `beforeTransactionCommit` subscribers under way (or a rollback's
 * `beforeTransactionRollback` ones), and what a start they ask waits for (see
 * `LazyTransaction.asOwner`). TypeORM's commit sends its `RELEASE SAVEPOINT` right after they
 * return, and names savepoints by depth: a start that runs beside it (one a subscriber asked
 * without awaiting it: an audit row written on the side) reads the depth before the RELEASE
 * and sends its SAVEPOINT after, and the names fall out of step (3B001). Such a start waits
 * for the RELEASE. One the subscriber awaits cannot: the subscribers (and so the RELEASE) wait
 * for it. It is told apart by its own subscriber's call (each is run through
 * `subscriberCall`) not having returned a tick after it was asked (one that does not await its
 * start returns at once), whatever the event's other subscribers still await (TypeORM awaits
 * them all at once: another's awaited write says nothing of this one). It then runs at once,
 * inside the committing transaction, as before; and if the subscribers return (after other
 * awaited work) with it still open, the commit is refused (`SubscriberWatch`), never sent with
 * the wrong savepoint's name. A start asked from no subscriber call of this event's is told
 * apart by the subscribers as a whole.
 */
export class CommitHold {
  private subscribersDone = false;
  private release!: () => void;
  private readonly released = new Promise<void>((resolve) => (this.release = resolve));

  /**
   * Runs one subscriber's call of the event (`call`), noting when what it returns settles (at
   * once when it returns no promise, or throws).
   */
  subscriberCall<T>(call: () => T): T {
    const record: SubscriberCall = { hold: this, returned: false };
    const mark = () => {
      record.returned = true;
    };
    let result: T;
    try {
      result = calls.run(record, call);
    } catch (error) {
      mark();
      throw error;
    }
    if (result instanceof Promise) result.then(mark, mark);
    else mark();
    return result;
  }

  /** The subscribers returned (or threw): the RELEASE follows. */
  subscribersReturned(): void {
    this.subscribersDone = true;
  }

  /**
   * The RELEASE (the ROLLBACK TO) was sent and answered, or the transaction ended otherwise
   * (see `LazyTransaction.asOwner`): held starts may run.
   */
  releasedNow(): void {
    this.release();
  }

  /**
   * Settles once a start asked from the subscribers now may run (see the class's note): true
   * when it waited for the RELEASE, false when it runs at once, inside the committing
   * transaction (then the subscribers must see it end before they return: `SubscriberWatch`).
   * Called as the start is asked: the subscriber call it comes from is read then.
   */
  startMayRun(): Promise<boolean> {
    const asking = calls.getStore();
    const own = asking?.hold === this ? asking : undefined;
    return this.decide(own);
  }

  private async decide(own: SubscriberCall | undefined): Promise<boolean> {
    await new Promise((resolve) => setImmediate(resolve));
    if (!startWaits(own?.returned, this.subscribersDone)) return false;
    await this.released;
    return true;
  }
}

/**
 * Whether a start a transaction event's subscriber asked waits for the step after them (see
 * `CommitHold`), a tick after it was asked: by its own subscriber's call when known
 * (`ownReturned`), else by the event's subscribers as a whole.
 */
export function startWaits(ownReturned: boolean | undefined, allReturned: boolean): boolean {
  return ownReturned ?? allReturned;
}
