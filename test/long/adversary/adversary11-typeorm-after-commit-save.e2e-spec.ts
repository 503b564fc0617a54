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
  type TransactionCommitEvent,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 11: a save an `afterTransactionCommit` subscriber makes (an audit trail
 * written once the business transaction committed) wipes what the library keeps to end the
 * committed transaction's settings: the transaction's `SET LOCAL statement_timeout` outlives
 * it, and a slower statement after it answers 503 on every try.
 *
 * What the user does: a handler bounds one step with `SET LOCAL statement_timeout = '300ms'`
 * inside `dataSource.transaction()` (as docs/guides/transactions.md suggests for one bounded
 * step), and notes an audit entry; an `@EventSubscriber()` writes the noted entries in
 * `afterTransactionCommit` with `event.manager.save()`, as TypeORM hands it the manager of the
 * runner that committed. The handler then runs a slower statement outside any transaction
 * (a report, 0.6 s).
 * What happens: TypeORM broadcasts `AfterTransactionCommit` inside `commitTransaction()`, after
 * the RELEASE and before the library sends what ends the nested transaction (`NestedCommit`'s
 * settings, `restoreNestedState`). The subscriber's save starts its own transaction at depth 1,
 * which (`startNow`) replaces `nestedCommit` and sets `outermostKept = false`: when the outer
 * commit resumes, there is nothing left to put back. The 300 ms bound stays to the request's
 * COMMIT: the report is cancelled (57014) and the request answers 503 database_transient on
 * every retry. (Without the save, the subscriber's own statements in afterTransactionCommit
 * still run under the committed transaction's settings: the `query` case, an audit row that
 * reads the transaction's tenant, which without the library is gone after its COMMIT.)
 * What should happen (as without the library, the same handler on a plain route): the
 * transaction's COMMIT ends its settings before its afterTransactionCommit subscribers run:
 * 201, the audit row kept, the report run under the session's own timeout, no tenant left.
 */
@Entity({ name: 'orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Entity({ name: 'audit', synchronize: false })
class Audit {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  note!: string;

  @Column({ type: 'text', nullable: true })
  tenant?: string | null;
}

/** Audit entries noted in a transaction, written once it committed. */
const pending: { note: string; how: 'save' | 'query' }[] = [];

@EventSubscriber()
class AuditAfterCommit implements EntitySubscriberInterface {
  async afterTransactionCommit(event: TransactionCommitEvent) {
    const entries = pending.splice(0);
    for (const entry of entries) {
      if (entry.how === 'save') {
        await event.manager.save(Audit, { note: entry.note });
      } else {
        await event.manager.query(
          `INSERT INTO audit (note, tenant) VALUES ($1, coalesce(current_setting('app.tenant', true), ''))`,
          [entry.note],
        );
      }
    }
  }
}

@Controller()
class OrdersController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async run(tag: string, how: 'save' | 'query') {
    await this.dataSource.transaction(async (manager) => {
      // One bounded step, scoped to its tenant, as the docs' recipe.
      await manager.query(`SET LOCAL statement_timeout = '300ms'`);
      await manager.query(`SELECT set_config('app.tenant', 'acme', true)`);
      await manager.insert(Order, { tag });
      pending.push({ note: `order ${tag}`, how });
    });
    // Slower than the transaction's bound, outside it: the session's own timeout applies.
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
  idempotent(@Body() body: { tag: string; how: 'save' | 'query' }) {
    return this.run(body.tag, body.how);
  }

  @Post('plain/orders')
  plain(@Body() body: { tag: string; how: 'save' | 'query' }) {
    return this.run(body.tag, body.how);
  }
}

describe('adversary 11: TypeORM, work of an afterTransactionCommit subscriber', () => {
  let typeorm: TypeormApp;

  beforeAll(async () => {
    typeorm = await startTypeormApp('adv11_after_commit_save', {
      entities: [Order, Audit],
      subscribers: [AuditAfterCommit],
      controllers: [OrdersController],
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, tag text NOT NULL)');
        await admin.query(
          'CREATE TABLE audit (id serial PRIMARY KEY, note text NOT NULL, tenant text)',
        );
      },
    });
  });

  afterAll(async () => {
    await typeorm?.close();
  });

  const kept = async (tag: string) => ({
    orders: (
      await typeorm.admin.query<{ tag: string }>(
        'SELECT tag FROM orders WHERE tag LIKE $1 ORDER BY tag',
        [`${tag}%`],
      )
    ).rows.map((row) => row.tag),
    audit: (
      await typeorm.admin.query<{ note: string; tenant: string | null }>(
        'SELECT note, tenant FROM audit WHERE note = $1 ORDER BY id',
        [`order ${tag}`],
      )
    ).rows,
  });

  it.each(['save', 'query'] as const)(
    'through %s in afterTransactionCommit: as without the library, on the first try and the retry',
    async (how) => {
      const plain = await request(typeorm.app.getHttpServer())
        .post('/plain/orders')
        .timeout(6_000)
        .send({ tag: `plain-${how}`, how });
      expect(plain.status).toBe(201);
      expect(plain.body).toEqual({ timeout: '0', tenant: '' });
      const plainKept = await kept(`plain-${how}`);
      expect(plainKept.audit).toEqual([
        { note: `order plain-${how}`, tenant: how === 'query' ? '' : null },
      ]);

      const send = () =>
        request(typeorm.app.getHttpServer())
          .post('/orders')
          .timeout(6_000)
          .set('Idempotency-Key', `orders-${how}`)
          .send({ tag: how, how });
      const first = await send();
      const retry = await send();
      // Observed (save): 503 database_transient on both (the report cancelled by the 300 ms
      // bound the transaction set, never put back), nothing kept. (query): 201, but the audit
      // row the subscriber wrote after the COMMIT carries the committed transaction's tenant.
      expect({ first: first.status, retry: retry.status, body: first.body }).toEqual({
        first: 201,
        retry: 201,
        body: plain.body,
      });
      expect(retry.body).toEqual(first.body);
      expect(await kept(how)).toEqual({
        orders: [how, `${how}-report`],
        audit: [{ note: `order ${how}`, tenant: how === 'query' ? '' : null }],
      });
    },
  );
});
