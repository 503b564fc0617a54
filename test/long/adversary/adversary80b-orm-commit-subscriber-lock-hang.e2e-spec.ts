/**
 * Adversary 80b (orm): an `afterTransactionCommit` subscriber that updates, on a connection of
 * its own (a reporting pool, a worker's client: "after the order committed, bump the
 * product's sales counter"), a row the request's transaction wrote before. Without the
 * library the save's COMMIT has released the row's lock and the update runs at once. Keyed:
 * the event fires at the save's `RELEASE SAVEPOINT`, the request's transaction still holds the
 * row's lock, the subscriber's update waits for it, and the request's COMMIT waits for the
 * subscriber: the request hangs, with no answer, the key held (its lease renewed by the
 * heartbeat) and a retry answered 409, for as long as the process lives. PostgreSQL sees no
 * deadlock: one side of the wait is in the app.
 *
 *   @EventSubscriber() class SalesCounter implements EntitySubscriberInterface<Order> {
 *     listenTo() { return Order; }
 *     afterInsert(e) { pendingProducts.push(e.entity.productId); }
 *     async afterTransactionCommit() {
 *       for (const id of pendingProducts.splice(0))
 *         await reporting.query('UPDATE products SET sold = sold + 1 WHERE id = $1', [id]);
 *     }
 *   }
 *   // handler
 *   await products.decrement({ id }, 'stock', 1);     // the row locked by the request
 *   const order = await orders.save({ productId: id });
 *   return { id: order.id };
 *
 * Why: lib/data-layers/lazy-transaction.ts `commitFrom` → `asOwner(from, commit, …)`: a
 * `save()`'s own transaction is a savepoint of the request's, and TypeORM's commit of it
 * broadcasts `AfterTransactionCommit` right after `RELEASE SAVEPOINT`, which releases no lock;
 * the request's COMMIT (`RequestTransaction`) comes only after the handler returns, and
 * nothing bounds the subscriber's wait (`databaseTimeoutMs` bounds the library's waits and a
 * connection's acquisition through `outside()`, not a statement of the app's on its own pool).
 * The same root as adversary80b-orm-outbox-relay-before-commit (the event means "committed"
 * to the app, and nothing is).
 *
 * Docs it contradicts: the README's promise ("nothing hangs or holds a key for ever") and
 * docs/guides/transactions.md: the subscribers of a commit "run then, as TypeORM's commit runs
 * them (an event published after commit is out when `transaction()` resolves)", "Nothing in
 * the handler changes"; nothing says the locks of what the handler wrote are still held when
 * `afterTransactionCommit` runs.
 *
 * Severity: high (a hang that holds the key, a pooled connection and a row lock for as long as
 * the process lives, from ordinary TypeORM code; every later writer of that product row queues
 * behind it).
 *
 * Fails now: the keyed request gets no answer within 5 s (supertest's timeout: `answered:
 * 'timeout'`), and the order's row is not kept, where `{ answered: 201, orders: 1, sold: 1 }` is
 * expected (the control without `@Idempotent()` answers 201 at once); the client's retry with
 * the same key then gets 409 at once (the key held) where the stored 201 is expected. Afterwards the test ends
 * the subscriber's backend to let the request go.
 *
 * Suggested fix: broadcast the `afterTransactionCommit` (and `afterTransactionRollback`) of the
 * request's nested transactions and saves after the request's COMMIT (or rollback), as
 * TypeORM would after a real COMMIT; at the least bound the wait of a request whose handler
 * returned but whose work left running past `databaseTimeoutMs`, and document that the
 * handler's locks are held while these subscribers run.
 *
 * Fixed: `afterTransactionCommit` of the request's nested commits (a save's own too) is no
 * longer broadcast at the RELEASE: the runner is noted, and once the request's COMMIT (its
 * answer stored with it) succeeded the subscribers are told through it, bounded by
 * `databaseTimeoutMs`, the request's connection and locks released
 * (lib/data-layers/after-request-commit.ts `AfterRequestCommit`, `whenTold`; wired in
 * `LazyTransaction.asOwner`, `commitPutOff`, `commitWith`/`commitPlain`).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import {
  Column,
  Entity,
  type EntitySubscriberInterface,
  EventSubscriber,
  type InsertEvent,
  PrimaryGeneratedColumn,
  Repository,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv80b_lh_products', synchronize: false })
class Product {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'int' })
  stock!: number;

  @Column({ type: 'int' })
  sold!: number;
}

@Entity({ name: 'adv80b_lh_orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'int' })
  productId!: number;
}

/** The reporting connection (a pool of its own in the app). */
let reporting: Client | undefined;
const pendingProducts: number[] = [];

@EventSubscriber()
class SalesCounter implements EntitySubscriberInterface<Order> {
  listenTo() {
    return Order;
  }

  afterInsert(event: InsertEvent<Order>) {
    pendingProducts.push(event.entity.productId);
  }

  async afterTransactionCommit() {
    for (const id of pendingProducts.splice(0)) {
      await reporting!.query('UPDATE adv80b_lh_products SET sold = sold + 1 WHERE id = $1', [id]);
    }
  }
}

@Injectable()
class OrderService {
  constructor(
    @InjectRepository(Product) private readonly products: Repository<Product>,
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  async place(productId: number) {
    await this.products.decrement({ id: productId }, 'stock', 1);
    const order = await this.orders.save({ productId });
    return { id: order.id };
  }
}

@Controller()
class OrderController {
  constructor(private readonly service: OrderService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: { productId: number }) {
    return this.service.place(body.productId);
  }

  @Post('plain')
  plain(@Body() body: { productId: number }) {
    return this.service.place(body.productId);
  }
}

describe('adversary 80b: TypeORM, an afterTransactionCommit subscriber updates a row the request locked', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv80b_orm_commit_sub_lock', {
      controllers: [OrderController],
      providers: [OrderService],
      entities: [Product, Order],
      subscribers: [SalesCounter],
      imports: [TypeOrmModule.forFeature([Product, Order])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv80b_lh_products (id int PRIMARY KEY, stock int NOT NULL, sold int NOT NULL)',
        );
        await admin.query(
          'CREATE TABLE adv80b_lh_orders (id serial PRIMARY KEY, "productId" int NOT NULL)',
        );
        await admin.query('INSERT INTO adv80b_lh_products VALUES (1, 10, 0), (2, 10, 0)');
      },
    });
    ({ app } = fixture);
    reporting = new Client({ connectionString: fixture.database.url });
    // Ended by the test after the hang (see afterAll): its error is expected then.
    reporting.on('error', () => undefined);
    await reporting.connect();
    await reporting.query("SET application_name = 'adv80b_reporting'");
  }, 60_000);

  afterAll(async () => {
    // Lets a request still waiting on the subscriber go (its update's backend ended).
    await fixture?.admin.query(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'adv80b_reporting'",
    );
    await reporting?.end().catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, 500));
    await fixture?.close();
  });

  const outcome = async (path: string, key: string | undefined, productId: number) => {
    const call = request(app.getHttpServer()).post(path).timeout(5_000);
    if (key) call.set('Idempotency-Key', key);
    const answered = await call.send({ productId }).then(
      (answer) => answer.status,
      (error: { timeout?: number }) => (error.timeout ? 'timeout' : String(error)),
    );
    const orders = await fixture.admin.query(
      'SELECT 1 FROM adv80b_lh_orders WHERE "productId" = $1',
      [productId],
    );
    const product = await fixture.admin.query<{ sold: number }>(
      'SELECT sold FROM adv80b_lh_products WHERE id = $1',
      [productId],
    );
    return { answered, orders: orders.rowCount, sold: product.rows[0]?.sold };
  };

  it('control: without @Idempotent(): 201 at once, the order kept, the counter bumped', async () => {
    expect(await outcome('/plain', undefined, 1)).toEqual({ answered: 201, orders: 1, sold: 1 });
  }, 30_000);

  it('keyed: 201, the order kept, the counter bumped', async () => {
    const first = await outcome('/keyed', 'k-1', 2);
    // The client's retry, after its own timeout: the stored 201 replayed.
    const retry = await request(app.getHttpServer())
      .post('/keyed')
      .timeout(5_000)
      .set('Idempotency-Key', 'k-1')
      .send({ productId: 2 })
      .then(
        (answer) => answer.status,
        (error: { timeout?: number }) => (error.timeout ? 'timeout' : String(error)),
      );
    expect({ first, retry }).toEqual({
      first: { answered: 201, orders: 1, sold: 1 },
      retry: 201,
    });
  }, 40_000);
});
