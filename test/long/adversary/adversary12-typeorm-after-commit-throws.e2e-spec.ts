import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import request from 'supertest';
import {
  Column,
  DataSource,
  Entity,
  type EntitySubscriberInterface,
  EventSubscriber,
  PrimaryGeneratedColumn,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 12: an `afterTransactionCommit` subscriber that fails (it publishes the
 * committed transaction's events to a broker that is down) turns a correct handler into a 500
 * with nothing kept.
 *
 * What the app does: a subscriber publishes, in `afterTransactionCommit`, what the transaction
 * did (the usual "publish after commit" recipe); the broker is down, so it throws. The
 * handler writes an order with `dataSource.transaction()` (or a plain `repository.save()`,
 * which TypeORM wraps in a transaction of its own), catches the failure to publish (the
 * order is committed: TypeORM's COMMIT ran before the event) and answers 201 with
 * `published: false`, to publish later.
 * What happens: after the commit event throws, TypeORM's `transaction()` (and its save's
 * persist executor) calls `rollbackTransaction()`, swallowing any error of it, as without the
 * library it meets a runner with no transaction (TransactionNotStartedError, ignored). Under
 * `@Idempotent()` the nested transaction's RELEASE already brought the runner back to depth 1,
 * and `rollbackFrom` answers a rollback at depth 1 with `this.refuse(...)` ("rollbackTransaction()
 * with no startTransaction()"): the request can only roll back. The handler's 201 becomes 500
 * transaction_aborted, the order is rolled back, and each retry does the same while the
 * broker is down.
 * What was expected (as the same handler on a plain route): 201 `{ published: false }`, the
 * order kept once, the retry replaying the same answer.
 * Why it matters: publishing after commit from a subscriber is ordinary TypeORM code, and a
 * broker outage then fails every idempotent write of the app, instead of the handler's own
 * choice (answer, publish later).
 *
 * Changed (fixer, round 80): `afterTransactionCommit` of the request's nested commits is told
 * only after the request's COMMIT, its answer stored with it (lib/data-layers/after-request-commit.ts,
 * adversary80b-orm-outbox-relay-before-commit / -commit-subscriber-lock-hang: at the RELEASE
 * nothing is durable yet, and a subscriber touching what the request locked hung it). The
 * subscriber's throw then reaches no handler code: the keyed route answers 201 `{ published:
 * true }`, the order kept once, the retry replaying it, and the failure is logged. Still never
 * the 500 with nothing kept; an app that must know a publish failed does it in the subscriber
 * (or after the answer). Documented in docs/guides/transactions.md.
 */
@Entity({ name: 'orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

let brokerDown = true;

@EventSubscriber()
class PublishAfterCommit implements EntitySubscriberInterface {
  afterTransactionCommit(): void {
    if (brokerDown) throw new Error('broker unreachable: ECONNREFUSED');
  }
}

@Controller()
class OrdersController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async run(tag: string, how: 'transaction' | 'save') {
    let published = true;
    try {
      if (how === 'transaction') {
        await this.dataSource.transaction(async (manager) => {
          await manager.insert(Order, { tag });
        });
      } else {
        await this.dataSource.getRepository(Order).save({ tag });
      }
    } catch {
      // The order is committed; its event is published later by a sweeper.
      published = false;
    }
    return { tag, published };
  }

  @Post('orders')
  @Idempotent()
  idempotent(@Body() body: { tag: string; how: 'transaction' | 'save' }) {
    return this.run(body.tag, body.how);
  }

  @Post('plain/orders')
  plain(@Body() body: { tag: string; how: 'transaction' | 'save' }) {
    return this.run(body.tag, body.how);
  }
}

describe('adversary 12: TypeORM, an afterTransactionCommit subscriber that throws', () => {
  let typeorm: TypeormApp;

  beforeAll(async () => {
    typeorm = await startTypeormApp('adv12_after_commit_throws', {
      entities: [Order],
      subscribers: [PublishAfterCommit],
      controllers: [OrdersController],
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, tag text NOT NULL)');
      },
    });
  });

  afterAll(async () => {
    await typeorm?.close();
  });

  const kept = async (tag: string) =>
    (
      await typeorm.admin.query<{ tag: string }>('SELECT tag FROM orders WHERE tag = $1', [tag])
    ).rows.map((row) => row.tag);

  it.each(['transaction', 'save'] as const)(
    'through %s: the handler catches it and answers, as without the library',
    async (how) => {
      brokerDown = true;
      const plain = await request(typeorm.app.getHttpServer())
        .post('/plain/orders')
        .send({ tag: `plain-${how}`, how });
      expect(plain.status).toBe(201);
      expect(plain.body).toEqual({ tag: `plain-${how}`, published: false });
      expect(await kept(`plain-${how}`)).toEqual([`plain-${how}`]);

      const send = () =>
        request(typeorm.app.getHttpServer())
          .post('/orders')
          .set('Idempotency-Key', `orders-${how}`)
          .send({ tag: how, how });
      const first = await send();
      const retry = await send();
      // Changed (fixer): the subscriber is told after the request's COMMIT, past the handler.
      expect({ status: first.status, body: first.body }).toEqual({
        status: 201,
        body: { tag: how, published: true },
      });
      expect({ status: retry.status, body: retry.body }).toEqual({
        status: 201,
        body: first.body,
      });
      expect(await kept(how)).toEqual([how]);
    },
  );
});
