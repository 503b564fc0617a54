import { Injectable } from '@nestjs/common';
import {
  type EntityManager,
  type EntityTarget,
  type ObjectLiteral,
  type Repository,
} from 'typeorm';
import { IdempotencyDataSource } from './idempotency-data-source.js';
import { idempotencyStorage } from './transaction/idempotency-context.js';
import { startedInside } from './transaction/foreign-thenable.js';
import { handlerTries } from './transaction/handler-try.js';
import { OutsideScope } from './data-layers/outside-scope.js';
import { transactionScope } from './transaction/transaction-scope.js';
import { type RequestTransaction } from './transaction/request-transaction.js';

/**
 * The transaction of the idempotent request (or atomic phase) running now, for services that
 * prefer to ask for it by name rather than rely on the DataSource joining it. Outside one (a
 * route that is not idempotent, a job) it gives the DataSource's own manager, so the same
 * service works everywhere. A singleton: it reads the async context, never `Scope.REQUEST`.
 *
 * Injected repositories, `dataSource.query()` and `@nestjs-cls/transactional` join the same
 * transaction without it; it is the explicit way, and the one that reads well in a service.
 *
 * @example
 * constructor(private readonly tx: IdempotentTransaction) {}
 * async create(dto: CreateTransferDto) {
 *   return this.tx.getRepository(Transfer).save(dto); // commits with the stored response
 * }
 */
@Injectable()
export class IdempotentTransaction {
  constructor(private readonly source: IdempotencyDataSource) {}

  /** The current transaction's manager, or the DataSource's outside one. */
  get manager(): EntityManager {
    const current = transactionScope.getStore() as RequestTransaction | undefined;
    return current?.joinable && !current.ended
      ? current.sharedManager
      : this.source.dataSource.manager;
  }

  /** A repository bound to `manager`. */
  getRepository<T extends ObjectLiteral>(target: EntityTarget<T>): Repository<T> {
    return this.manager.getRepository(target);
  }

  /**
   * Runs `work` outside any idempotent request: its database work commits on its own, now or
   * whenever it runs. For work a request starts that is not the request's own (a timer, a
   * background refresh), which must neither commit with the request nor be refused after it.
   * Work the request awaits takes a second connection of the pool while the request holds
   * one: that wait is bounded by `databaseTimeoutMs` (a 503 `store_unavailable`, the request
   * rolled back), so that a burst of such requests as large as the pool cannot hold it forever.
   *
   * @example IdempotentTransaction.outside(() => setInterval(() => this.refresh(), 60_000));
   */
  static outside<T>(work: () => T): T {
    const scope = OutsideScope.of(transactionScope.getStore());
    return transactionScope.run(scope, () =>
      idempotencyStorage.exit(() =>
        // Out of the handler's try too: work of a try retried since is refused (see
        // `refuseRetriedTry`), and this is no try's work (a cache's timer outlives it).
        handlerTries.exit(() => {
          // A query that runs when it is awaited (Prisma's, a Drizzle or Kysely builder
          // returned unawaited, alone or in an array for `Promise.all`) would run where its
          // caller awaits it: in the request's transaction. Started here, in this scope.
          return startedInside(work());
        }),
      ),
    );
  }

  /** Whether the code running now is inside an idempotent request's (or phase's) transaction. */
  get isActive(): boolean {
    const current = transactionScope.getStore() as RequestTransaction | undefined;
    return Boolean(current?.joinable && !current.ended);
  }
}
