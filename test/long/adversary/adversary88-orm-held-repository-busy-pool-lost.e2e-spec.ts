/**
 * Adversary 88 (orm): a write the handler left running through a repository it took inside the
 * request (`IdempotentTransaction.getRepository()`, the docs' way for services to "ask for the
 * transaction by name"), sent after the answer committed while the app's pool is busy, is lost:
 * it fails with the library's "waiting for a connection" deadline (`databaseTimeoutMs`), where
 * without the library it waits in the pool's queue and lands a moment later.
 *
 * User code (a service that records a slow side result after answering):
 *
 *   async place(tag) {
 *     const orders = this.tx.getRepository(Order);           // IdempotentTransaction
 *     const order = await orders.save({ tag });
 *     // fire and forget: a shipping quote fetched after the answer, recorded on the order
 *     void fetchQuote(order).then((quote) => orders.update(order.id, { quote }));
 *     return { id: order.id, tag };
 *   }
 *
 * while other work of the app's (two slow reports on the same DataSource) holds the pool's two
 * connections for longer than `databaseTimeoutMs`.
 *
 * Code path: lib/idempotent-transaction.service.ts `getRepository` → the request's shared
 * manager (a view of the request's runner: lib/data-layers/lazy-transaction.ts `viewOf`);
 * past the end its `update` reaches `queryFrom`, whose first line sends it apart
 * (`this.apart(…, () => this.readAlone(args))`); `readAlone` takes its connection with
 * `acquire(this.pool(), this.timeoutMs)` (lib/connection/deadline.ts): bounded by the
 * library's deadline. The same holds for the statement the latest fix sends apart
 * (`queryFrom`'s `send`, adversary 87). The pool seam's path for the same case
 * (request-transaction.ts `sendAlone(args, true)`) waits `'as-the-pool'` since 09ccd86
 * ("under the library's deadline it was lost when the pool was busy (a crowd of
 * deliveries), where the app's pool would have run it a moment later").
 *
 * Docs quote: docs/guides/transactions.md, "Database work belongs before the answer": "Once
 * the answer has committed, such work runs on its own, as it would without the library"; "So
 * does a runner or client it took while the request was open and uses past its end with no
 * transaction of its own open [...]: from then on it is a runner or connection of its own";
 * docs/guides/data-layers.md: "then waits for a connection as it would without the library,
 * in the pool's queue (its `connectionTimeoutMillis`, not the library's `databaseTimeoutMs`)".
 *
 * Severity: high (as adversary 87: a write the handler started is lost for good while the
 * request's 201 is stored and replayed; only the app's own `.catch()` hears of it, and only
 * under load, when a busy pool is what makes it happen).
 *
 * Fails now (verified unskipped): the left write rejects with "DatabaseDeadlineError: waiting
 * for a connection: no answer from PostgreSQL within 600 ms" and the row's quote stays null;
 * expected 'landed' and quote 'q-i1'. Controls pass: the same service on a route without
 * `@Idempotent()` under the same busy pool (the write waits in the pool's queue and lands),
 * and the keyed route with an idle pool (the write runs apart and lands).
 *
 * Suggested fix: in `LazyTransaction.readAlone`, when called for a statement sent after the
 * end (`queryFrom`'s `this.ended` branch and `send`'s), acquire with `'as-the-pool'`, as
 * `RequestTransaction.sendAlone(args, true)` does; keep `timeoutMs` for the plain read before
 * the first write, which the handler awaits inside the request.
 *
 * Fixed (session of 2026-12-06, third): `readAlone` takes how long to wait for its connection;
 * the statements of its code sent past the end (`queryFrom`'s `this.ended` branch and its
 * `send`, adversary 87) wait `'as-the-pool'`, as the pool seam's `sendAlone(args, true)` does;
 * the plain read before the first write and the library's own keep `databaseTimeoutMs`.
 * lib/data-layers/lazy-transaction.ts. (The connection a view's `connect()` and a stream get
 * past the end wait the same way: `clientAfterEnd`, `streamAlone`.) The docs already promised
 * this (docs/guides/data-layers.md).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent, IdempotentTransaction } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv88_busy_orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;

  @Column({ type: 'text', nullable: true })
  quote!: string | null;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let later: Promise<unknown> | undefined;

@Injectable()
class OrderService {
  constructor(private readonly tx: IdempotentTransaction) {}

  async place(tag: string) {
    const orders = this.tx.getRepository(Order);
    const order = await orders.save({ tag, quote: null });
    // Fire and forget: a quote fetched from a slow partner after the answer.
    later = sleep(300).then(() => orders.update(order.id, { quote: `q-${tag}` }));
    return { id: order.id, tag };
  }
}

@Controller()
class OrderController {
  constructor(private readonly orders: OrderService) {}

  @Post('plain')
  plain(@Body() body: { tag: string }) {
    return this.orders.place(body.tag);
  }

  @Post('idem')
  @Idempotent()
  idem(@Body() body: { tag: string }) {
    return this.orders.place(body.tag);
  }
}

describe('adversary 88 orm: a held repository’s write after the answer, on a busy pool', () => {
  let fixture: TypeormApp;
  let app: INestApplication;
  let dataSource: DataSource;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv88_orm_held_repo_busy', {
      controllers: [OrderController],
      providers: [OrderService],
      entities: [Order],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 2,
      idempotency: { globalKeys: true, databaseTimeoutMs: 600 },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv88_busy_orders (id serial PRIMARY KEY, tag text NOT NULL, quote text)',
        );
      },
    });
    ({ app } = fixture);
    dataSource = app.get(DataSource);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'plain' | 'idem', tag: string, busy: boolean) {
    later = undefined;
    const answer = await request(app.getHttpServer())
      .post(`/${route}`)
      .set('Idempotency-Key', `key-${tag}`)
      .send({ tag });
    // Other work of the app's (two slow reports) takes the pool's two connections, for longer
    // than the library's deadline, before the left write asks for one.
    const reports = busy
      ? [dataSource.query('SELECT pg_sleep(1.5)'), dataSource.query('SELECT pg_sleep(1.5)')]
      : [];
    await Promise.all(reports);
    const outcome = await later!.then(
      () => 'landed',
      (error: unknown) => String(error),
    );
    const { rows } = await fixture.admin.query<{ quote: string | null }>(
      'SELECT quote FROM adv88_busy_orders WHERE tag = $1',
      [tag],
    );
    return { status: answer.status, outcome, quotes: rows.map((row) => row.quote) };
  }

  it('control: without @Idempotent(), the write waits in the pool’s queue and lands', async () => {
    expect(await scenario('plain', 'c1', true)).toEqual({
      status: 201,
      outcome: 'landed',
      quotes: ['q-c1'],
    });
  }, 30_000);

  it('control: keyed, the pool idle: the write runs on its own after the answer', async () => {
    expect(await scenario('idem', 'c2', false)).toEqual({
      status: 201,
      outcome: 'landed',
      quotes: ['q-c2'],
    });
  }, 30_000);

  it('keyed, the pool busy: the write waits for a connection as without the library, and lands', async () => {
    expect(await scenario('idem', 'i1', true)).toEqual({
      status: 201,
      outcome: 'landed',
      quotes: ['q-i1'],
    });
  }, 30_000);
});
