import { type QueryRunner } from 'typeorm';
import { type CommitHold } from './commit-hold.js';

/** The subscriber method TypeORM calls for each ending event whose starts a hold tells apart. */
const ENDING_METHODS: ReadonlyMap<string, string> = new Map([
  ['BeforeTransactionCommit', 'beforeTransactionCommit'],
  ['BeforeTransactionRollback', 'beforeTransactionRollback'],
]);

/** What TypeORM's broadcaster collects of the subscribers it calls (its `BroadcasterResult`). */
interface BroadcasterResult {
  count: number;
  promises: Promise<unknown>[];
}

/**
 * `broadcaster` (TypeORM's, or one made from it), with its loop over the subscribers of
 * `event` (`beforeTransactionCommit`, `beforeTransactionRollback`) calling each through
 * `hold.subscriberCall`: a start one of them asks is then told apart by that subscriber's own
 * call, not by the event's subscribers as a whole (see `CommitHold`). The loop is TypeORM's
 * own (`Broadcaster.broadcastBeforeTransactionCommitEvent`): each subscriber with the method
 * called in turn with the event TypeORM hands it, a promise it returns awaited with the
 * others (by TypeORM's `broadcast`). Other events: the broadcaster as it is.
 */
export function callingOneByOne(broadcaster: object, event: string, hold: CommitHold): object {
  const name = ENDING_METHODS.get(event);
  if (!name) return broadcaster;
  const method: string = name;
  function eachSubscriber(this: { queryRunner: QueryRunner }, result: BroadcasterResult): void {
    const queryRunner = this.queryRunner;
    const dataSource = queryRunner.dataSource;
    for (const subscriber of dataSource.subscribers as unknown as Record<string, unknown>[]) {
      const call = subscriber[method];
      if (typeof call !== 'function') continue;
      const returned = hold.subscriberCall(() =>
        (call as (event: object) => unknown).call(subscriber, {
          dataSource,
          connection: dataSource,
          queryRunner,
          manager: queryRunner.manager,
        }),
      );
      if (returned instanceof Promise) result.promises.push(returned);
      result.count++;
    }
  }
  return Object.create(broadcaster, { [`broadcast${event}Event`]: { value: eachSubscriber } });
}
