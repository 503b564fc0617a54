import { type Pool } from 'pg';
import { type DataSource } from 'typeorm';
import { type CancelAsked } from '../connection/cancel-asked.js';
import { boundOutsideWaits } from '../transaction/bounded-connect.js';
import { type JoinableTransaction } from '../transaction/transaction-scope.js';

/** What `OutsideScope` asks of the request it was left from (see `RequestTransaction`). */
interface HoldsConnections {
  outsideDeadline?(pool: object): number | undefined;
  cancelAsked?(asked: CancelAsked): void;
}

/**
 * The scope of work a request runs in `IdempotentTransaction.outside()`: it joins nothing (its
 * statements commit on their own), but its waits for a connection of a pool are bounded while
 * the request it came from holds a connection of the same pool. Such work, awaited by the
 * request, needs a second connection while holding one: a burst of such requests as large as
 * the pool would hold every connection and wait for one more, forever (with new keys answered
 * 503 and the leases renewed). Past the request's `databaseTimeoutMs` the wait fails instead,
 * the request rolls back and gives its connection back, and the burst drains.
 */
export class OutsideScope implements JoinableTransaction {
  private constructor(private readonly from: HoldsConnections | undefined) {}

  /** The scope for `outside()` called in `current`; nested calls keep the first request's. */
  static of(current: JoinableTransaction | undefined): OutsideScope {
    return current instanceof OutsideScope
      ? current
      : new OutsideScope(current as HoldsConnections | undefined);
  }

  /** A view taken in `scope` and used here is `scope`'s own (see `placeOfClient`). */
  leftFrom(scope: JoinableTransaction): boolean {
    return this.from === (scope as unknown);
  }

  /**
   * A runner TypeORM makes in the scope is its own plain one (nothing joins), whose pool is
   * first made to bound its waits here (see `boundOutsideWaits`).
   */
  joinedRunner(dataSource: DataSource): undefined {
    const master = (dataSource.driver as unknown as { master?: Pool }).master;
    if (master) boundOutsideWaits(master);
    return undefined;
  }

  /**
   * A cancel or an end the work asked for (see `watchCancels`) is the request's code's too: the
   * request notes it if the pid is its own connection's backend (an `outside()` watchdog that
   * cancels the request's statement), as it would from its own scope.
   */
  cancelAsked(asked: CancelAsked): void {
    this.from?.cancelAsked?.(asked);
  }

  /** How long a connection of `pool` may be waited for; undefined: as long as the pool says. */
  connectDeadline(pool: object): number | undefined {
    return this.from?.outsideDeadline?.(pool);
  }
}
