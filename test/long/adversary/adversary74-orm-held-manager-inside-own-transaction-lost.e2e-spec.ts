/**
 * Adversary 74: on TypeORM, a service that keeps `IdempotentTransaction`'s manager in a
 * variable (`const em = this.tx.manager`) and starts a nested transaction on it
 * (`em.transaction(…)`) has that nested transaction on the very view of the runner `em` is:
 * a write it sends through `em` inside the callback (the outer manager by mistake, as the
 * docs' "an injected repository inside its callback, instead of the callback's manager") is
 * taken for the nested transaction's own. The nested transaction rolls back (the error
 * caught), the write with it, and nothing refuses the request: 201, stored and replayed, the
 * audit row gone. On a route without `@Idempotent()` the same service's `em` is the
 * DataSource's manager ("so the same service works on every route"): `em.transaction()` takes
 * a runner of its own, and the audit commits on its own.
 *
 *   const em = this.tx.manager;                                 // IdempotentTransaction
 *   await em.query(`INSERT … 'order'`);
 *   await em.transaction(async (inner) => {
 *     await inner.query(`INSERT … 'hold'`);
 *     await em.query(`INSERT … 'audit'`);                       // em, not inner
 *     throw new Error('payment declined');
 *   }).catch(() => undefined);
 *   return { tag };                                             // 201, no audit row
 *
 * Why: `IdempotentTransaction.manager` (lib/idempotent-transaction.service.ts) hands out
 * `LazyTransaction.sharedManager`, a manager of ONE view of the runner (`viewOf`,
 * lib/data-layers/lazy-transaction.ts); TypeORM's `EntityManager.transaction()` runs on
 * `this.queryRunner` when the manager has one, so the nested transaction's owner is that same
 * view (`NestedIdentity.started(owner)`), and `NestedIdentity.markBeside(from, …)` skips a
 * statement whose `from` is the owner: the write through `em` is never marked `beside`, and
 * `ending(…, 'rollback')` answers 'ok'. Through a repository of `this.tx.getRepository()` or
 * `dataSource.query()` (a fresh view each) the same write is refused, as documented.
 *
 * Expected (docs/guides/transactions.md): "A statement sent beside an open
 * `dataSource.transaction()` (an injected repository inside its callback, instead of the
 * callback's `manager` ...) runs inside that nested transaction: kept if it commits; if it
 * rolls back it would take the statement along, where without the library it commits on its
 * own connection, so that rollback is refused with `StatementBesideNestedTransactionError`";
 * `IdempotentTransaction` "outside an idempotent request gives the DataSource's own manager,
 * so the same service works on every route". Never "silently lost".
 *
 * Control: the same service on a route without `@Idempotent()`: 201, order and audit; keyed,
 * the audit through `dataSource.query()` instead of `em`: the documented refusal (500,
 * nothing kept).
 *
 * Severity: high (a write the handler was told succeeded is lost under a stored 201).
 *
 * Fails now: 'Expected: "kept, or refused", Received: "201 (replayed), rows ["order"]"' (the
 * two controls pass).
 *
 * Fixed: `IdempotentTransaction`'s manager (`sharedManager`) runs its `transaction()` on a view
 * of its own, as the DataSource's manager runs it on a runner of its own: the held manager's
 * statements are beside it, and its rollback is refused.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent, IdempotentTransaction } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body74 = { tag: string; auditThroughDataSource?: boolean };

@Injectable()
class BookingService {
  constructor(
    private readonly tx: IdempotentTransaction,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  async book(body: Body74) {
    const { tag } = body;
    const em = this.tx.manager;
    await em.query(`INSERT INTO adv74m_rows (tag, what) VALUES ($1, 'order')`, [tag]);
    await em
      .transaction(async (inner) => {
        await inner.query(`INSERT INTO adv74m_rows (tag, what) VALUES ($1, 'hold')`, [tag]);
        const audit = `INSERT INTO adv74m_rows (tag, what) VALUES ($1, 'audit')`;
        if (body.auditThroughDataSource) await this.dataSource.query(audit, [tag]);
        else await em.query(audit, [tag]);
        throw new Error('payment declined');
      })
      .catch(() => undefined);
    return { tag };
  }
}

@Controller()
class BookingsController {
  constructor(private readonly bookings: BookingService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body74) {
    return this.bookings.book(body);
  }

  @Post('plain')
  plain(@Body() body: Body74) {
    return this.bookings.book(body);
  }
}

describe("adversary 74: TypeORM, a nested transaction on IdempotentTransaction's held manager", () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv74_orm_held_manager', {
      controllers: [BookingsController],
      providers: [BookingService],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv74m_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
        );
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await admin.query<{ what: string }>(
        'SELECT what FROM adv74m_rows WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body74) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: the same service without @Idempotent(): 201, order and audit kept', async () => {
    expect((await post('/plain', undefined, { tag: 'p1' })).status).toBe(201);
    expect(await kept('p1')).toEqual(['audit', 'order']);
  }, 20_000);

  it('control: keyed, the audit through dataSource.query(): the documented refusal, nothing kept', async () => {
    const answer = await post('/keyed', 'k0', { tag: 'k0', auditThroughDataSource: true });
    expect(answer.status).toBe(500);
    expect(await kept('k0')).toEqual([]);
  }, 20_000);

  it('keyed, the audit through the held manager: kept, or refused; never lost under a 201', async () => {
    const answer = await post('/keyed', 'k1', { tag: 'k1' });
    const again = await post('/keyed', 'k1', { tag: 'k1' });
    const rows = await kept('k1');
    const outcome =
      (answer.status === 201 && JSON.stringify(rows) === '["audit","order"]') ||
      (answer.status === 500 && rows.length === 0)
        ? 'kept, or refused'
        : `${answer.status}${again.headers['idempotent-replayed'] ? ' (replayed)' : ''}, ` +
          `rows ${JSON.stringify(rows)}`;
    expect(outcome).toBe('kept, or refused');
  }, 20_000);
});
