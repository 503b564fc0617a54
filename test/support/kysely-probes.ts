import { Body, Controller, Headers, Inject, Module, Post, type Type } from '@nestjs/common';
import { type IsolationLevel, Kysely, PostgresDialect, sql } from 'kysely';
import { Pool } from 'pg';
import { AppModule, type OrdersSettings } from '../../examples/kysely-orders/app.module.js';
import { KYSELY, type OrdersDatabase } from '../../examples/kysely-orders/database.js';
import { OrdersService } from '../../examples/kysely-orders/orders.service.js';
import { Idempotent, RetryLaterError } from '../../lib/index.js';

/** What a probe is asked to do: which skus to write, and whether to fail after. */
interface ProbeBody {
  sku: string;
  /** Throw RetryLaterError after the writes on the key's first attempt (503, rolled back). */
  failFirst?: boolean;
  level?: IsolationLevel;
  holdMs?: number;
}

/** A Kysely on a pool of its own: what the library does not join. */
const OTHER_KYSELY = Symbol('OTHER_KYSELY');

/** What `isolation-raised` threw, by key (Nest renders it as its plain 500). */
export const refusals = new Map<string, string>();

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Routes the orders app does not have, beside it on the same Kysely and pool: the shapes of
 * Kysely's own API a handler may use (nested, controlled and parallel work, isolation levels),
 * and the controls (a route that is not atomic, Kysely on a pool that is not the library's).
 */
@Controller('probes')
class KyselyProbesController {
  private readonly attempts = new Map<string, number>();

  constructor(
    @Inject(KYSELY) private readonly db: Kysely<OrdersDatabase>,
    private readonly orders: OrdersService,
    @Inject(OTHER_KYSELY) private readonly other: Kysely<OrdersDatabase>,
  ) {}

  /** Throws RetryLaterError on the key's first attempt when asked: a 503 after the writes. */
  private failFirst(key: string, body: ProbeBody) {
    const attempt = (this.attempts.get(key) ?? 0) + 1;
    this.attempts.set(key, attempt);
    if (body.failFirst && attempt === 1) throw new RetryLaterError();
  }

  private insertOrder(db: Kysely<OrdersDatabase>, sku: string) {
    return db
      .insertInto('orders')
      .values({ sku, quantity: 1, status: 'placed' })
      .returning('id')
      .executeTakeFirstOrThrow();
  }

  /** The app's own POST /orders work, then a 503 on the first attempt. */
  @Post('place')
  @Idempotent()
  async place(@Headers('idempotency-key') key: string, @Body() body: ProbeBody) {
    const order = await this.orders.place({ sku: body.sku, quantity: 1 });
    this.failFirst(key, body);
    return order;
  }

  /** Control: the same work on a route that is not atomic. */
  @Post('place-not-atomic')
  @Idempotent({ atomic: false })
  async placeNotAtomic(@Headers('idempotency-key') key: string, @Body() body: ProbeBody) {
    return this.place(key, body);
  }

  /** Control: the same statements through Kysely on a second pool, not the library's. */
  @Post('place-other-pool')
  @Idempotent()
  async placeOtherPool(@Headers('idempotency-key') key: string, @Body() body: ProbeBody) {
    const { id } = await this.insertOrder(this.other, body.sku);
    await this.other
      .transaction()
      .execute((trx) =>
        trx.insertInto('order_events').values({ order_id: id, kind: 'placed' }).execute(),
      );
    this.failFirst(key, body);
    return { id: Number(id) };
  }

  /**
   * A nested transaction that throws after its write, caught: it rolls back alone; one that
   * meets a unique violation, caught: the request's transaction is not aborted by it.
   */
  @Post('nested')
  @Idempotent()
  async nested(@Headers('idempotency-key') key: string, @Body() body: ProbeBody) {
    const order = await this.orders.place({ sku: body.sku, quantity: 1 });
    const orderId = String(order.id);
    await this.db
      .transaction()
      .execute(async (trx) => {
        await trx
          .insertInto('order_events')
          .values({ order_id: orderId, kind: 'undone' })
          .execute();
        throw new Error('changed its mind');
      })
      .catch(() => undefined);
    const duplicate = await this.db
      .transaction()
      .execute((trx) =>
        trx.insertInto('order_events').values({ order_id: orderId, kind: 'placed' }).execute(),
      )
      .then(
        () => 'inserted',
        (error: { code?: string }) => error.code,
      );
    await this.db.insertInto('order_events').values({ order_id: orderId, kind: 'noted' }).execute();
    this.failFirst(key, body);
    return { id: order.id, duplicate };
  }

  /**
   * A write, a wait on the key's first attempt (in which a test terminates the connection),
   * then a nested transaction:
   * the first statement after the loss is Kysely's BEGIN, a SAVEPOINT on the request's
   * connection.
   */
  @Post('write-wait-nested')
  @Idempotent()
  async writeWaitNested(@Headers('idempotency-key') key: string, @Body() body: ProbeBody) {
    const attempt = (this.attempts.get(key) ?? 0) + 1;
    this.attempts.set(key, attempt);
    const { id } = await this.insertOrder(this.db, body.sku);
    if (attempt === 1) await sleep(body.holdMs ?? 0);
    await this.db
      .transaction()
      .execute((trx) =>
        trx.insertInto('order_events').values({ order_id: id, kind: 'placed' }).execute(),
      );
    return { id: Number(id) };
  }

  /**
   * The request's connection terminated inside a nested transaction, after its last statement
   * (on the key's first attempt): the next thing Kysely sends is its COMMIT, then, when that
   * fails, its ROLLBACK. The backend is ended through another pool, as an operator or a
   * failover would end it.
   */
  @Post('terminated-before-nested-commit')
  @Idempotent()
  async terminatedBeforeNestedCommit(
    @Headers('idempotency-key') key: string,
    @Body() body: ProbeBody,
  ) {
    const attempt = (this.attempts.get(key) ?? 0) + 1;
    this.attempts.set(key, attempt);
    const { id } = await this.insertOrder(this.db, body.sku);
    await this.db.transaction().execute(async (trx) => {
      await trx.insertInto('order_events').values({ order_id: id, kind: 'placed' }).execute();
      if (attempt > 1) return;
      const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(trx);
      await sql`SELECT pg_terminate_backend(${rows[0].pid})`.execute(this.other);
      await sleep(50); // the client has seen its socket close
    });
    return { id: Number(id) };
  }

  /**
   * A statement that fails inside a nested transaction, caught inside it: Kysely then sends its
   * COMMIT on an aborted transaction (without the library, PostgreSQL answers it with a
   * ROLLBACK: Kysely's AbortedTransactionError), and the handler catches that and goes on.
   */
  @Post('caught-inside-nested')
  @Idempotent()
  async caughtInsideNested(@Body() body: ProbeBody) {
    const { id } = await this.insertOrder(this.db, body.sku);
    const nested = await this.db
      .transaction()
      .execute(async (trx) => {
        await trx.insertInto('order_events').values({ order_id: id, kind: 'placed' }).execute();
        await trx
          .insertInto('order_events')
          .values({ order_id: id, kind: 'placed' })
          .execute()
          .catch(() => undefined);
      })
      .then(
        () => 'committed',
        () => 'failed',
      );
    return { id: Number(id), nested };
  }

  /** A failed statement the handler catches and carries on after, outside a savepoint. */
  @Post('swallow')
  @Idempotent()
  async swallow(@Body() body: ProbeBody) {
    const order = await this.orders.place({ sku: body.sku, quantity: 1 });
    try {
      await this.db
        .insertInto('order_events')
        .values({ order_id: String(order.id), kind: 'placed' })
        .execute();
    } catch {
      // "already there": carries on, as if nothing happened
    }
    return order;
  }

  /**
   * Kysely's controlled transactions: `startTransaction()`, a savepoint rolled back to, a
   * commit; and a second one rolled back.
   */
  @Post('controlled')
  @Idempotent()
  async controlled(@Headers('idempotency-key') key: string, @Body() body: ProbeBody) {
    const trx = await this.db.startTransaction().execute();
    await this.insertOrder(trx, `${body.sku}-kept`);
    const beforeB = await trx.savepoint('before_b').execute();
    await this.insertOrder(beforeB, `${body.sku}-to-savepoint`);
    const afterB = await beforeB.rollbackToSavepoint('before_b').execute();
    await this.insertOrder(afterB, `${body.sku}-after-savepoint`);
    await afterB.releaseSavepoint('before_b').execute();
    await trx.commit().execute();

    const dropped = await this.db.startTransaction().execute();
    await this.insertOrder(dropped, `${body.sku}-rolled-back`);
    await dropped.rollback().execute();
    this.failFirst(key, body);
    return { committed: trx.isCommitted, rolledBack: dropped.isRolledBack };
  }

  /**
   * `transaction().setIsolationLevel()` as the handler's first work: the request's transaction
   * runs at that level, inside the nested one and after it.
   */
  @Post('isolation')
  @Idempotent()
  async isolation(@Body() body: ProbeBody) {
    const level = body.level ?? 'serializable';
    const inside = await this.db
      .transaction()
      .setIsolationLevel(level)
      .execute(async (trx) => {
        await this.insertOrder(trx, body.sku);
        return this.currentLevel(trx);
      });
    return { inside, after: await this.currentLevel(this.db) };
  }

  /** A stronger level asked for after the request's transaction began at READ COMMITTED. */
  @Post('isolation-raised')
  @Idempotent()
  async isolationRaised(@Headers('idempotency-key') key: string, @Body() body: ProbeBody) {
    await this.insertOrder(this.db, body.sku);
    try {
      return await this.db
        .transaction()
        .setIsolationLevel('serializable')
        .execute((trx) => this.insertOrder(trx, `${body.sku}-serializable`));
    } catch (error) {
      refusals.set(key, error instanceof Error ? error.name : String(error));
      throw error;
    }
  }

  private async currentLevel(db: Kysely<OrdersDatabase>) {
    const { rows } = await sql<{
      level: string;
    }>`SELECT current_setting('transaction_isolation') AS level`.execute(db);
    return rows[0].level;
  }

  /**
   * Write skew: places an order of `sku` only if there is none yet, in a transaction at the
   * level asked for; holds between its read and its write, so two requests interleave.
   */
  @Post('first-of-sku')
  @Idempotent()
  async firstOfSku(@Body() body: ProbeBody) {
    return this.db
      .transaction()
      .setIsolationLevel(body.level ?? 'serializable')
      .execute(async (trx) => {
        const { count } = await trx
          .selectFrom('orders')
          .select((eb) => eb.fn.countAll<string>().as('count'))
          .where('sku', '=', body.sku)
          .executeTakeFirstOrThrow();
        await sleep(body.holdMs ?? 0);
        if (Number(count) > 0) return { placed: false };
        await this.insertOrder(trx, body.sku);
        return { placed: true };
      });
  }

  /**
   * Parallel queries: Kysely takes a pool client for each one, and each is a view of the
   * request's one connection: one backend, one transaction.
   */
  @Post('parallel')
  @Idempotent()
  async parallel(@Headers('idempotency-key') key: string, @Body() body: ProbeBody) {
    await Promise.all([1, 2, 3].map((n) => this.insertOrder(this.db, `${body.sku}-${n}`)));
    const seen = await Promise.all(
      [1, 2, 3].map(async () => {
        const { rows } = await sql<{
          pid: number;
          xid: string;
        }>`SELECT pg_backend_pid() AS pid, pg_current_xact_id()::text AS xid`.execute(this.db);
        return `${rows[0].pid}/${rows[0].xid}`;
      }),
    );
    this.failFirst(key, body);
    return { sessions: new Set(seen).size };
  }
}

/** The orders app with the probes beside it, on the app's own Kysely and pool. */
export function probedOrdersModule(settings: OrdersSettings): Type<unknown> {
  const otherPool = new Pool({ connectionString: settings.databaseUrl, max: 2 });
  const other = new Kysely<OrdersDatabase>({ dialect: new PostgresDialect({ pool: otherPool }) });
  @Module({
    imports: [AppModule.register(settings)],
    controllers: [KyselyProbesController],
    providers: [{ provide: OTHER_KYSELY, useValue: other }],
  })
  class ProbedOrdersModule {
    async onApplicationShutdown() {
      await other.destroy();
    }
  }
  return ProbedOrdersModule;
}
