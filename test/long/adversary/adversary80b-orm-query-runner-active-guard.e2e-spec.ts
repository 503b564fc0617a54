/**
 * Adversary 80b (orm): TypeORM's manual-transaction recipe with the usual guard on the
 * rollback, `if (queryRunner.isTransactionActive) await queryRunner.rollbackTransaction()`
 * (in `finally`, so that whatever happened no transaction is left open before `release()`).
 * No subscriber, nothing concurrent: the commit succeeds. Without the library: 201, the order
 * kept (TypeORM's runner says `isTransactionActive === false` after its commit, and the guard
 * does nothing). Keyed: 500, nothing kept, on every try.
 *
 *   const runner = dataSource.createQueryRunner();
 *   await runner.connect();
 *   await runner.startTransaction();
 *   try {
 *     await runner.manager.insert(Order, { tag });
 *     await runner.commitTransaction();
 *   } finally {
 *     if (runner.isTransactionActive) await runner.rollbackTransaction();   // the guard
 *     await runner.release();
 *   }
 *   return { tag };
 *
 * The same lie, second everyday use (`transfer` below): a unit of work that starts a
 * transaction only when the runner it is handed has none (`const own =
 * !runner.isTransactionActive; if (own) await runner.startTransaction()`), and rolls back only
 * what it started. Keyed, a fresh runner says a transaction is active: the unit starts none, a
 * business check failing after its first write rolls nothing back, the handler answers its
 * "refused" 201, and the first half of the unit (the debit) commits with that answer and is
 * replayed as done. Without the library: nothing kept.
 *
 * Why: lib/data-layers/lazy-transaction.ts `ensureRunner` sets the request's runner
 * `isTransactionActive = true` at depth 1 ("set up to look like an open transaction from the
 * start"), and `viewOf` → lib/data-layers/runner-view.ts answers `isTransactionActive` through
 * `transactionActive(view)`, which is `true` whenever no save is persisting
 * (`if (!isPersisting()) return true`): after the runner's own commit (its RELEASE, depth back
 * to 1) the view still says a transaction is active. The guard then calls
 * `rollbackTransaction()`, which `rollbackFrom` takes for "a runner's commit or rollback with
 * no startTransaction() of its own": `throw this.refuse('rollbackTransaction() with no
 * startTransaction()')`, and the request can only roll back (500). The refusal's error is
 * thrown from the `finally`, so the handler never even answers its 201.
 *
 * Docs it contradicts: docs/guides/transactions.md opening ("Nothing in the handler
 * changes"; "every query runner the app's DataSource creates inside it is the request's"), and
 * "Code in the request may nest the transaction, never end it. … a query runner's
 * `startTransaction()`/`commitTransaction()`/`rollbackTransaction()` … make savepoints of it":
 * the refusal is documented only for "a runner's commit or rollback with no
 * `startTransaction()` of its own"; here the code asks the runner first, and the runner lies.
 *
 * Severity: high (the guard: TypeORM's everyday manual-transaction code, correct without the
 * library, answers 500 on every try of every keyed request, so the route cannot succeed; the
 * unit of work: half of a refused unit committed in silence with the stored answer).
 *
 * Fails now: the keyed case receives `{ status: 500, body: { statusCode: 500, message:
 * 'Internal server error' }, rows: 0 }` (the refusal, a `TransactionControlRefusedError`, thrown
 * out of the handler's `finally`), and the same on the retry, where `{ status: 201, body: {
 * tag: 'k1' }, rows: 1 }` is expected. Controls pass: the same code without `@Idempotent()` (201, and its runner
 * reads `isTransactionActive === false` after the commit), and the keyed route without the
 * guard (201).
 *
 * Suggested fix: have a view answer `isTransactionActive` for its code as TypeORM's runner
 * would: true only while a nested transaction that view started is open (`NestedIdentity`
 * knows: `depthOf(view) !== undefined`), false before its `startTransaction()` and after its
 * commit or rollback (a save's own `isPersisting()` question stays as it is); at the least,
 * let a rollback with nothing of the view's own open (after its own commit) fail with
 * TypeORM's `TransactionNotStartedError` alone, as without the library, rather than refuse the
 * request.
 *
 * Fixed: a view's `isTransactionActive` answers for its code's own transaction, as TypeORM's
 * runner would: open only while a nested transaction it started is uncommitted
 * (`NestedIdentity.hasUncommitted`), false before its start and after its commit (put off or
 * not) or rollback; a phase's manager and TypeORM's own pessimistic-lock check
 * (`askingForLock`, lib/transaction/own-persist.ts) still find one open (`viewSaysActive`,
 * lib/data-layers/runner-view.ts; `LazyTransaction.viewOf`; a save's `isPersisting()` question
 * as before).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body80 = { tag: string; guard: boolean };

const activeAfterCommit = new Map<string, boolean>();

@Injectable()
class OrderService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async place(body: Body80) {
    const runner = this.dataSource.createQueryRunner();
    await runner.connect();
    await runner.startTransaction();
    try {
      await runner.query('INSERT INTO adv80b_qr_orders (tag) VALUES ($1)', [body.tag]);
      await runner.commitTransaction();
      activeAfterCommit.set(body.tag, runner.isTransactionActive);
    } finally {
      if (body.guard && runner.isTransactionActive) await runner.rollbackTransaction();
      await runner.release();
    }
    return { tag: body.tag };
  }

  /**
   * The other everyday use of the flag: a unit of work that starts its own transaction only
   * when the runner it is handed has none, and rolls back only what it started.
   */
  async transfer(body: Body80) {
    const runner = this.dataSource.createQueryRunner();
    await runner.connect();
    const own = !runner.isTransactionActive;
    if (own) await runner.startTransaction();
    try {
      await runner.query('INSERT INTO adv80b_qr_orders (tag) VALUES ($1)', [`${body.tag}-debit`]);
      if (body.guard) throw new Error('credit refused'); // a business check after the first write
      await runner.query('INSERT INTO adv80b_qr_orders (tag) VALUES ($1)', [`${body.tag}-credit`]);
      if (own) await runner.commitTransaction();
      return { tag: body.tag, outcome: 'done' };
    } catch {
      if (own) await runner.rollbackTransaction();
      return { tag: body.tag, outcome: 'refused' };
    } finally {
      await runner.release();
    }
  }
}

@Controller()
class OrderController {
  constructor(private readonly service: OrderService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body80) {
    return this.service.place(body);
  }

  @Post('plain')
  plain(@Body() body: Body80) {
    return this.service.place(body);
  }

  @Post('keyed-transfer')
  @Idempotent()
  keyedTransfer(@Body() body: Body80) {
    return this.service.transfer(body);
  }

  @Post('plain-transfer')
  plainTransfer(@Body() body: Body80) {
    return this.service.transfer(body);
  }
}

describe('adversary 80b: TypeORM, the manual-transaction recipe guarded by isTransactionActive', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv80b_orm_qr_active_guard', {
      controllers: [OrderController],
      providers: [OrderService],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv80b_qr_orders (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const outcome = async (path: string, key: string | undefined, body: Body80) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    const answer = await call.send(body);
    const rows = await fixture.admin.query(
      "SELECT 1 FROM adv80b_qr_orders WHERE tag = $1 OR tag LIKE $1 || '-%'",
      [body.tag],
    );
    return { status: answer.status, body: answer.body as unknown, rows: rows.rowCount };
  };

  it('control: without @Idempotent(): 201, kept, the runner inactive after its commit', async () => {
    expect(await outcome('/plain', undefined, { tag: 'p1', guard: true })).toEqual({
      status: 201,
      body: { tag: 'p1' },
      rows: 1,
    });
    expect(activeAfterCommit.get('p1')).toBe(false);
  }, 30_000);

  it('control: keyed, without the guard: 201, kept', async () => {
    expect(await outcome('/keyed', 'k-bare', { tag: 'k0', guard: false })).toEqual({
      status: 201,
      body: { tag: 'k0' },
      rows: 1,
    });
  }, 30_000);

  it('keyed, with the guard: 201, kept', async () => {
    const first = await outcome('/keyed', 'k-1', { tag: 'k1', guard: true });
    const retry = await outcome('/keyed', 'k-1', { tag: 'k1', guard: true });
    expect({ first, retry }).toEqual({
      first: { status: 201, body: { tag: 'k1' }, rows: 1 },
      retry: { status: 201, body: { tag: 'k1' }, rows: 1 },
    });
  }, 30_000);

  it('control: without @Idempotent(), the unit refused after its first write: nothing kept', async () => {
    expect(await outcome('/plain-transfer', undefined, { tag: 'p2', guard: true })).toEqual({
      status: 201,
      body: { tag: 'p2', outcome: 'refused' },
      rows: 0,
    });
  }, 30_000);

  it('control: keyed, the unit done: both rows kept', async () => {
    expect(await outcome('/keyed-transfer', 'k-done', { tag: 'k2', guard: false })).toEqual({
      status: 201,
      body: { tag: 'k2', outcome: 'done' },
      rows: 2,
    });
  }, 30_000);

  it('keyed, the unit refused after its first write: nothing kept', async () => {
    expect(await outcome('/keyed-transfer', 'k-3', { tag: 'k3', guard: true })).toEqual({
      status: 201,
      body: { tag: 'k3', outcome: 'refused' },
      rows: 0,
    });
  }, 30_000);
});
