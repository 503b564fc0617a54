import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import request from 'supertest';
import {
  Column,
  DataSource,
  Entity,
  type EntitySubscriberInterface,
  EventSubscriber,
  type InsertEvent,
  PrimaryGeneratedColumn,
  type TransactionCommitEvent,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 11: the deferred constraints of a nested transaction (a save's own, or
 * `dataSource.transaction()`) are checked before its `beforeTransactionCommit` subscribers run,
 * where its own COMMIT checks them after: what such a subscriber writes to satisfy them (the
 * audit row an invariant asks of every order) comes too late, and the request answers 500 on
 * every try.
 *
 * What the user does: every order must have its audit row, an invariant checked at commit by a
 * `CONSTRAINT TRIGGER … DEFERRABLE INITIALLY DEFERRED`; an `@EventSubscriber()` notes each order
 * inserted (`afterInsert`) and writes their audit rows in `beforeTransactionCommit` through
 * `event.manager`, TypeORM's hook for work at the end of a transaction (a transactional
 * outbox or audit trail). The handler saves an order (`repository.save()`, TypeORM's own
 * transaction) or saves it in `dataSource.transaction()`.
 * What happens: round 10's `deferredCheck()` (SET CONSTRAINTS ALL IMMEDIATE in a savepoint) is
 * sent in `commitFrom` before TypeORM's `commitTransaction()`, which broadcasts
 * `BeforeTransactionCommit` only then: the trigger fires before the subscriber wrote the audit
 * row, and the nested commit fails (P0001 'order … has no audit row'): 500 on every try, no
 * order kept.
 * What should happen (as without the library, the same handler on a plain route): the
 * constraints are checked where the COMMIT checks them, after `beforeTransactionCommit`: 201,
 * the order and its audit row kept.
 */
@Entity({ name: 'orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

/** The orders inserted in the transaction under way, whose audit rows are due at its commit. */
const unaudited: number[] = [];

@EventSubscriber()
class AuditOrders implements EntitySubscriberInterface<Order> {
  listenTo() {
    return Order;
  }

  afterInsert(event: InsertEvent<Order>) {
    unaudited.push(event.entity.id);
  }

  async beforeTransactionCommit(event: TransactionCommitEvent) {
    for (const id of unaudited.splice(0)) {
      await event.manager.query('INSERT INTO audit (order_id) VALUES ($1)', [id]);
    }
  }

  /** Rolled back: its orders are gone, and so are their audit rows due. */
  afterTransactionRollback() {
    unaudited.length = 0;
  }
}

@Controller()
class OrdersController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async run(tag: string, how: 'save' | 'transaction') {
    if (how === 'save') {
      await this.dataSource.getRepository(Order).save({ tag });
    } else {
      await this.dataSource.transaction((manager) => manager.save(Order, { tag }));
    }
    return { tag };
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

describe('adversary 11: TypeORM, a deferred check and beforeTransactionCommit', () => {
  let typeorm: TypeormApp;

  beforeAll(async () => {
    typeorm = await startTypeormApp('adv11_deferred_before_commit', {
      entities: [Order],
      subscribers: [AuditOrders],
      controllers: [OrdersController],
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE orders (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE TABLE audit (id serial PRIMARY KEY, order_id int NOT NULL REFERENCES orders);
          CREATE FUNCTION order_audited() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN
            IF NOT EXISTS (SELECT 1 FROM audit WHERE order_id = NEW.id) THEN
              RAISE EXCEPTION 'order % has no audit row', NEW.id;
            END IF;
            RETURN NULL;
          END $$;
          CREATE CONSTRAINT TRIGGER orders_audited AFTER INSERT ON orders
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION order_audited();
        `);
      },
    });
  });

  afterAll(async () => {
    await typeorm?.close();
  });

  const kept = async (tag: string) =>
    (
      await typeorm.admin.query<{ tag: string; audits: number }>(
        `SELECT o.tag, (SELECT count(*)::int FROM audit a WHERE a.order_id = o.id) AS audits
           FROM orders o WHERE o.tag = $1`,
        [tag],
      )
    ).rows;

  it.each(['save', 'transaction'] as const)(
    'through %s: as without the library (201, the order and its audit row), on the first try and the retry',
    async (how) => {
      const plain = await request(typeorm.app.getHttpServer())
        .post('/plain/orders')
        .timeout(6_000)
        .send({ tag: `plain-${how}`, how });
      expect(plain.status).toBe(201);
      expect(await kept(`plain-${how}`)).toEqual([{ tag: `plain-${how}`, audits: 1 }]);

      const send = () =>
        request(typeorm.app.getHttpServer())
          .post('/orders')
          .timeout(6_000)
          .set('Idempotency-Key', `orders-${how}`)
          .send({ tag: how, how });
      const first = await send();
      const retry = await send();
      // Observed: 500 on both (the trigger fired by the nested commit's deferred check, before
      // the subscriber wrote the audit row), nothing kept.
      expect({ first: first.status, retry: retry.status, body: first.body }).toEqual({
        first: 201,
        retry: 201,
        body: { tag: how },
      });
      expect(await kept(how)).toEqual([{ tag: how, audits: 1 }]);
    },
  );
});
