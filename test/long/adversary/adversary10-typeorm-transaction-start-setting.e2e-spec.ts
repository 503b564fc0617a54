import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import {
  Column,
  DataSource,
  Entity,
  type EntitySubscriberInterface,
  EventSubscriber,
  PrimaryGeneratedColumn,
  type TransactionStartEvent,
} from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

/**
 * Adversary, round 10: a setting a TypeORM transaction-event subscriber sets for each
 * transaction (`afterTransactionStart`: `SET LOCAL statement_timeout`, the tenant with
 * `set_config(…, true)`) outlives the transaction, and a slower statement after it answers 503
 * on every try.
 *
 * What the user does: an `@EventSubscriber()` bounds every transaction the app opens and sets
 * its tenant for row-level security, in `afterTransactionStart` through `event.queryRunner` (or
 * `event.manager`), as TypeORM's transaction events are meant for. The handler saves an entity
 * (`repository.save()`: TypeORM's own transaction) or runs `dataSource.transaction()`, then a
 * slower statement of its own outside any transaction (a report, 0.6 s).
 * What happens: the save's (or nested) transaction is a savepoint of the request's, and its
 * RELEASE keeps a SET LOCAL. Round 9's fix (keepSettings) reads and puts back such a setting
 * only for statements sent through a view while the outermost kept nested transaction is open:
 * not for a save's own transaction (`outermostKept` is false for saves), not for statements sent
 * through `event.queryRunner` (the raw runner: taken for the library's own), and not for those
 * of `afterTransactionStart`, which runs inside TypeORM's `startTransaction()` before the
 * library marks the transaction kept and clears `settingsBefore`. So the 300 ms bound and the
 * tenant stay to the request's COMMIT: the slower statement is cancelled (57014) and the
 * request answers 503 database_transient, on every retry; the tenant is still set after it.
 * What should happen (as without the library, the same handler on a plain route): the
 * transaction's COMMIT ends its settings: 201, the slower statement runs under the session's
 * own timeout, no tenant left set.
 */
@Entity({ name: 'orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

/** Every transaction of the app: bounded, and scoped to its tenant. */
@EventSubscriber()
class BoundTransactions implements EntitySubscriberInterface {
  async afterTransactionStart(event: TransactionStartEvent) {
    await event.queryRunner.query(`SET LOCAL statement_timeout = '300ms'`);
    await event.queryRunner.query(`SELECT set_config('app.tenant', 'acme', true)`);
  }
}

@Controller()
class OrdersController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async run(tag: string, how: 'save' | 'transaction') {
    if (how === 'save') {
      await this.dataSource.getRepository(Order).save({ tag });
    } else {
      await this.dataSource.transaction((manager) => manager.insert(Order, { tag }));
    }
    // Slower than a transaction's bound, outside any: the session's own timeout applies.
    await this.dataSource.query(`INSERT INTO orders (tag) SELECT $1 FROM pg_sleep(0.6)`, [
      `${tag}-report`,
    ]);
    const [after] = (await this.dataSource.query(
      `SELECT current_setting('statement_timeout') AS timeout,
              coalesce(current_setting('app.tenant', true), '') AS tenant`,
    )) as { timeout: string; tenant: string }[];
    return after;
  }

  @Post('orders')
  @Idempotent()
  idempotent(@Body() body: { tag: string; how: 'save' | 'transaction' }) {
    return this.run(body.tag, body.how);
  }

  @Post('plain/orders')
  plain(@Body() body: { tag: string; how: 'save' | 'transaction' }) {
    return this.run(body.tag, body.how);
  }
}

describe('adversary 10: TypeORM, a SET LOCAL of an afterTransactionStart subscriber', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv10_transaction_start_setting');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, tag text NOT NULL)');

    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
          entities: [Order],
          subscribers: [BoundTransactions],
          migrations: [...IDEMPOTENCY_MIGRATIONS],
          migrationsRun: false,
          extra: { max: 4 },
        }),
        IdempotencyModule.forRoot({ globalKeys: true }),
      ],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    app = await bootstrapTestApp(OrdersModule, 'express');
  });

  afterAll(async () => {
    await app?.close();
    await admin?.end();
    await database?.drop();
  });

  const tags = async (tag: string) =>
    (
      await admin.query<{ tag: string }>('SELECT tag FROM orders WHERE tag LIKE $1 ORDER BY tag', [
        `${tag}%`,
      ])
    ).rows.map((row) => row.tag);

  it.each(['save', 'transaction'] as const)(
    "through %s: as without the library (201, the session's timeout, no tenant), on the first try and the retry",
    async (how) => {
      const plain = await request(app.getHttpServer())
        .post('/plain/orders')
        .timeout(6_000)
        .send({ tag: `plain-${how}`, how });
      expect(plain.status).toBe(201);
      expect(plain.body).toEqual({ timeout: '0', tenant: '' });

      const send = () =>
        request(app.getHttpServer())
          .post('/orders')
          .timeout(6_000)
          .set('Idempotency-Key', `orders-${how}`)
          .send({ tag: how, how });
      const first = await send();
      const retry = await send();
      // Observed: 503 database_transient on both (the report cancelled by the subscriber's
      // 300 ms bound, kept past the save's savepoint), nothing kept.
      expect({ first: first.status, retry: retry.status }).toEqual({ first: 201, retry: 201 });
      expect(first.body).toEqual(plain.body);
      expect(await tags(how)).toEqual([how, `${how}-report`]);
    },
  );
});
