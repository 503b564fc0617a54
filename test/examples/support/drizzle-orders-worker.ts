/**
 * The Drizzle orders example (examples/drizzle-orders) as a test process: its own module,
 * unchanged, plus what only the tests need:
 * - `x-test-pause: <point>=<ms>,...` holds a request at the example's pause points, to kill
 *   the process there or let its lease run out;
 * - `x-test-timeout-ms: <ms>`: an outer timeout on that request, as an app-wide timeout
 *   interceptor outside @Idempotent() is (sample-app's RequestTimeoutInterceptor);
 * - routes under /cells for the cells the example's own routes do not show: a swallowed
 *   failed statement, nested transactions, isolation levels, and the controls: the same writes
 *   with `atomic: false`, and on a pool that is not the library's;
 * - `CLS=1`: @nestjs-cls/transactional with its Drizzle adapter, and its interceptor mounted (a
 *   process, not jest: those packages are CommonJS that require Nest's ES modules, which
 *   jest's module runtime does not load).
 * Prints `listening on <port>` when ready (test/support/worker-process.ts).
 */
import 'reflect-metadata';
import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Inject,
  Injectable,
  InternalServerErrorException,
  Module,
  type NestInterceptor,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import {
  ClsPluginTransactional,
  Propagation,
  Transactional,
  TransactionHost,
} from '@nestjs-cls/transactional';
import { TransactionalAdapterDrizzleOrm } from '@nestjs-cls/transactional-adapter-drizzle-orm';
import { eq, sql } from 'drizzle-orm';
import { ClsModule } from 'nestjs-cls';
import { Pool } from 'pg';
import { Observable } from 'rxjs';
import { Idempotent, RetryLaterError } from '../../../lib/index.js';
import { RequestTimeoutInterceptor } from '../../../sample-app/request-timeout.interceptor.js';
import { OrdersAppModule } from '../../../examples/drizzle-orders/app.module.js';
import { type AdapterName, createApp } from '../../../examples/drizzle-orders/create-app.js';
import {
  applySchema,
  createDatabase,
  type Database,
  DRIZZLE,
} from '../../../examples/drizzle-orders/database.js';
import { CreateOrderDto } from '../../../examples/drizzle-orders/create-order.dto.js';
import { OrdersService } from '../../../examples/drizzle-orders/orders.service.js';
import { orderEvents, orders } from '../../../examples/drizzle-orders/schema.js';
import { testPause, testPauses } from '../../../examples/drizzle-orders/test-pause.js';

/** Runs each request in the pauses its `x-test-pause` header asks for. */
@Injectable()
class PauseInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const header = context.switchToHttp().getRequest<{ headers: Record<string, unknown> }>()
      .headers['x-test-pause'];
    const pauses = new Map<string, number>();
    if (typeof header === 'string') {
      for (const part of header.split(',')) {
        const [point, ms] = part.split('=');
        pauses.set(point.trim(), Number(ms));
      }
    }
    return new Observable((subscriber) =>
      testPauses.run(pauses, () => next.handle().subscribe(subscriber)),
    );
  }
}

/** The app-wide timeout interceptor, on the requests that ask for it. */
@Injectable()
class OuterTimeoutInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const ms = context.switchToHttp().getRequest<{ headers: Record<string, unknown> }>().headers[
      'x-test-timeout-ms'
    ];
    return typeof ms === 'string'
      ? new RequestTimeoutInterceptor(Number(ms)).intercept(context, next)
      : next.handle();
  }
}

/** A second pool, not the library's: Drizzle on it commits apart from the request. */
export const APART = Symbol('APART');

interface CellBody {
  sku: string;
  /** Throw RetryLaterError after the writes, on the first attempt of this sku only. */
  failFirst?: boolean;
}

const failedOnce = new Set<string>();
function failFirstTime(body: CellBody): void {
  if (body.failFirst && !failedOnce.has(body.sku)) {
    failedOnce.add(body.sku);
    throw new RetryLaterError('the downstream system is down', 1);
  }
}

/** The error inside Drizzle's DrizzleQueryError, as the handler can tell what it was. */
function refusal(error: unknown) {
  const cause = (error as { cause?: Error }).cause;
  return {
    wrapper: (error as Error).constructor.name,
    error: cause?.name,
    message: cause?.message,
  };
}

@Injectable()
class ClsOrders {
  constructor(private readonly txHost: TransactionHost<TransactionalAdapterDrizzleOrm<Database>>) {}

  @Transactional()
  async place(sku: string): Promise<number> {
    const [order] = await this.txHost.tx
      .insert(orders)
      .values({ sku, quantity: 1, status: 'placed' })
      .returning();
    await this.audit(order.id);
    return order.id;
  }

  /** A transaction of its own, as far as the service knows: a savepoint of the request's. */
  @Transactional(Propagation.RequiresNew)
  async audit(orderId: number): Promise<void> {
    await this.txHost.tx.insert(orderEvents).values({ orderId, kind: 'audited' });
  }
}

@Controller('cells')
class ClsController {
  constructor(private readonly cls: ClsOrders) {}

  /** @nestjs-cls/transactional's @Transactional() and Propagation.RequiresNew, with Drizzle. */
  @Post('cls')
  @Idempotent()
  async viaCls(@Body() body: CellBody) {
    const id = await this.cls.place(body.sku);
    failFirstTime(body);
    return { id };
  }
}

@Controller('cells')
class CellsController {
  constructor(
    @Inject(DRIZZLE) private readonly db: Database,
    @Inject(APART) private readonly apart: Database,
    private readonly orders: OrdersService,
  ) {}

  private insertOrder(db: Database, sku: string) {
    return db
      .insert(orders)
      .values({ sku, quantity: 1, status: 'placed' })
      .returning()
      .then(([order]) => order);
  }

  /** Catches a unique violation outside a nested transaction and answers as if all went well. */
  @Post('swallow')
  @Idempotent()
  async swallow(@Body() body: CellBody) {
    const order = await this.insertOrder(this.db, body.sku);
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        await this.db.insert(orderEvents).values({ orderId: order.id, kind: 'placed' });
      } catch {
        // "already there": the handler goes on, but PostgreSQL aborted the transaction
      }
    }
    return { id: order.id };
  }

  /** Sends COMMIT through Drizzle, catches its refusal, and answers as if it had committed. */
  @Post('raw-commit')
  @Idempotent()
  async rawCommit(@Body() body: CellBody) {
    const order = await this.insertOrder(this.db, body.sku);
    const refused = await this.db.execute(sql`commit`).then(
      () => undefined,
      (error: unknown) => refusal(error),
    );
    return { id: order.id, refused };
  }

  /**
   * Nested transactions: `tx.transaction()` that throws and is caught rolls back alone, and so
   * does a `db.transaction()` whose statement fails (a unique violation) and is caught; the rest
   * commits with the request, or nothing does when the handler fails after.
   */
  @Post('nested')
  @Idempotent()
  async nested(@Body() body: CellBody) {
    const id = await this.db.transaction(async (tx) => {
      const order = await this.insertOrder(tx as unknown as Database, body.sku);
      await tx.insert(orderEvents).values({ orderId: order.id, kind: 'placed' });
      await tx
        .transaction(async (inner) => {
          await inner.insert(orderEvents).values({ orderId: order.id, kind: 'gift-wrapped' });
          throw new Error('no wrapping paper');
        })
        .catch(() => undefined);
      return order.id;
    });
    const duplicate = await this.db
      .transaction((tx) => tx.insert(orderEvents).values({ orderId: id, kind: 'placed' }))
      .then(
        () => 'inserted',
        (error: unknown) => (error as { cause?: { code?: string } }).cause?.code,
      );
    await this.db.insert(orderEvents).values({ orderId: id, kind: 'noted' });
    await testPause('after-writes');
    failFirstTime(body);
    const events = await this.db
      .select({ kind: orderEvents.kind })
      .from(orderEvents)
      .where(eq(orderEvents.orderId, id))
      .orderBy(orderEvents.id);
    return { id, duplicate, events: events.map(({ kind }) => kind) };
  }

  /** `db.transaction(fn, { isolationLevel })` as the request's first work. */
  @Post('isolation/first')
  @Idempotent()
  async isolationFirst(@Body() body: CellBody) {
    return this.db.transaction(
      async (tx) => {
        await this.insertOrder(tx as unknown as Database, body.sku);
        const { rows } = await tx.execute<{ level: string }>(
          sql`SELECT current_setting('transaction_isolation') AS level`,
        );
        return { level: rows[0].level };
      },
      { isolationLevel: 'serializable' },
    );
  }

  /** A stronger level asked for after the request's transaction began at READ COMMITTED. */
  @Post('isolation/after-write')
  @Idempotent()
  async isolationAfterWrite(@Body() body: CellBody) {
    await this.insertOrder(this.db, body.sku);
    try {
      await this.db.transaction(
        async (tx) => this.insertOrder(tx as unknown as Database, body.sku),
        {
          isolationLevel: 'serializable',
        },
      );
    } catch (error) {
      throw new InternalServerErrorException(refusal(error));
    }
    return { placed: 2 };
  }

  /** The control: the example's own service, on a route whose writes do not join. */
  @Post('not-atomic')
  @Idempotent({ atomic: false })
  async notAtomic(@Body() body: CreateOrderDto & { failFirst?: boolean }) {
    const { failFirst, ...dto } = body;
    const order = await this.orders.place(dto);
    await testPause('after-writes');
    failFirstTime({ sku: dto.sku, failFirst });
    return order;
  }

  /** The control: Drizzle on a second pool, in an atomic route; its writes commit apart. */
  @Post('apart')
  @Idempotent()
  async onAnotherPool(@Body() body: CellBody) {
    const order = await this.insertOrder(this.apart, body.sku);
    failFirstTime(body);
    return { id: order.id };
  }
}

const { DATABASE_URL, WAREHOUSE_URL, ADAPTER, LEASE_MS, HEARTBEAT } = process.env;
if (!DATABASE_URL || !WAREHOUSE_URL) throw new Error('DATABASE_URL and WAREHOUSE_URL are required');
const pool = new Pool({ connectionString: DATABASE_URL });
pool.on('error', () => undefined);
const apartPool = new Pool({ connectionString: DATABASE_URL, max: 2 });
apartPool.on('error', () => undefined);
await applySchema(pool);

/** nestjs-cls mounted as its interceptor, as its docs set it up (CLS=1 only). */
const cls = process.env.CLS === '1';

@Module({
  imports: [
    OrdersAppModule.register({
      pool,
      warehouseUrl: WAREHOUSE_URL,
      ...(LEASE_MS ? { leaseMs: Number(LEASE_MS) } : {}),
      ...(HEARTBEAT ? { heartbeat: HEARTBEAT === 'true' } : {}),
    }),
    ...(cls
      ? [
          ClsModule.forRoot({
            global: true,
            interceptor: { mount: true },
            plugins: [
              new ClsPluginTransactional({
                adapter: new TransactionalAdapterDrizzleOrm<Database>({
                  drizzleInstanceToken: DRIZZLE,
                }),
              }),
            ],
          }),
        ]
      : []),
  ],
  controllers: [CellsController, ...(cls ? [ClsController] : [])],
  providers: [
    ...(cls ? [ClsOrders] : []),
    { provide: APART, useValue: createDatabase(apartPool) },
    { provide: APP_INTERCEPTOR, useClass: PauseInterceptor },
    { provide: APP_INTERCEPTOR, useClass: OuterTimeoutInterceptor },
  ],
})
class DrizzleOrdersWorkerModule {}

const app = await createApp(
  DrizzleOrdersWorkerModule,
  (ADAPTER ?? 'express') as AdapterName,
  !process.env.TEST_LOGS,
);
await app.listen(0, '127.0.0.1');
console.log(`listening on ${(app.getHttpServer().address() as { port: number }).port}`);
