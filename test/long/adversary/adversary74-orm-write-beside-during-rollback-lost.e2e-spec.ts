/**
 * Adversary 74: on TypeORM, a write sent beside a nested transaction while that transaction is
 * rolling back (after `rollbackTransaction()` was called, before its `ROLLBACK TO SAVEPOINT`
 * is sent) runs inside the savepoint and is undone by it, and nothing refuses the request:
 * the handler's write resolved, the request answers 201 (stored, replayed), and its row is
 * gone. Without the library the write runs on a connection of its own and commits. The window
 * is TypeORM's own `BeforeTransactionRollback` broadcast, which awaits the subscribers: one
 * that does async work there (a metrics flush, a log shipped) holds it open as long as it
 * takes.
 *
 *   // a subscriber:  async beforeTransactionRollback() { await metrics.flush(); }
 *   await Promise.all([
 *     dataSource.transaction(async (manager) => {
 *       await manager.query(`INSERT INTO adv74w_rows (tag, what) VALUES ($1, 'hold')`, [tag]);
 *       placed();                                            // "hold placed" event
 *       throw new Error('payment declined');
 *     }).catch(() => undefined),
 *     holdPlaced.then(() => delay(50)).then(() =>          // the audit listener, beside it
 *       dataSource.query(`INSERT INTO adv74w_rows (tag, what) VALUES ($1, 'audit')`, [tag])),
 *   ]);
 *   return { tag };                                          // 201, and no audit row
 *
 * Why: `LazyTransaction`'s `rollbackFrom` (lib/data-layers/lazy-transaction.ts) judges the
 * rollback once, as it is CALLED (`refuseOutOfOrder(from, 'rollback')` →
 * `NestedIdentity.ending`), then awaits TypeORM's `rollbackTransaction()`, which broadcasts
 * `BeforeTransactionRollback` before it sends the `ROLLBACK TO`. A write beside it meanwhile
 * is marked (`NestedIdentity.markBeside`: `beside = true`) and sent, inside the savepoint, but
 * nobody reads the mark again: the rollback goes on, `nestedEnded` forgets the transaction,
 * `lastError` is cleared. Round 73 fixed this order on the pool seam (commit 8092a89: "judged
 * as they are SENT, in the connection's order ... a write in flight when the rollback was
 * called and sent first is inside it and refuses the request (was lost under a stored 201)");
 * TypeORM's seam still judges at the call.
 *
 * Expected (docs/guides/transactions.md): a statement sent beside an open
 * `dataSource.transaction()` "runs inside that nested transaction: kept if it commits; if it
 * rolls back it would take the statement along, where without the library it commits on its
 * own connection, so that rollback is refused with `StatementBesideNestedTransactionError`".
 * Never "silently lost", never "a stored 201 whose effects rolled back".
 *
 * Control: without `@Idempotent()`: 201, the audit row kept; keyed, the same audit sent while
 * the nested transaction is still open (before it throws): the documented refusal (500,
 * nothing kept).
 *
 * Severity: high (a write the handler was told succeeded is lost under a stored 201).
 *
 * Fails now: 'Expected: "kept, or refused", Received: "201 (replayed), rows []"' (the two
 * controls pass).
 *
 * Fixed: the rollback is judged again after its `beforeTransactionRollback` subscribers, just
 * before its ROLLBACK TO is sent (`CommitSteps.rollingBack` in `asOwner`).
 */
import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource, EventSubscriber, type EntitySubscriberInterface } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** An app's subscriber that ships something before each rollback (a metrics flush). */
@EventSubscriber()
class RollbackMetrics implements EntitySubscriberInterface {
  async beforeTransactionRollback(): Promise<void> {
    await delay(200);
  }
}

type Body74 = { tag: string; auditAfter: number; throwAfter: number };

async function work(dataSource: DataSource, body: Body74) {
  const { tag } = body;
  // The hold placed: what the audit listener waits for (an event the booking emits).
  let placed!: () => void;
  const holdPlaced = new Promise<void>((resolve) => (placed = resolve));
  await Promise.all([
    dataSource
      .transaction(async (manager) => {
        await manager.query(`INSERT INTO adv74w_rows (tag, what) VALUES ($1, 'hold')`, [tag]);
        placed();
        await delay(body.throwAfter);
        throw new Error('payment declined');
      })
      .catch(() => undefined),
    holdPlaced
      .then(() => delay(body.auditAfter))
      .then(() =>
        dataSource.query(`INSERT INTO adv74w_rows (tag, what) VALUES ($1, 'audit')`, [tag]),
      ),
  ]);
  return { tag };
}

@Controller()
class RowsController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body74) {
    return work(this.dataSource, body);
  }

  @Post('plain')
  plain(@Body() body: Body74) {
    return work(this.dataSource, body);
  }
}

describe('adversary 74: TypeORM, a write beside a nested transaction as it rolls back', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv74_orm_write_during_rollback', {
      controllers: [RowsController],
      subscribers: [RollbackMetrics],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv74w_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
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
        'SELECT what FROM adv74w_rows WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body74) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the audit commits on its own: 201, the audit row', async () => {
    const answer = await post('/plain', undefined, { tag: 'p1', auditAfter: 50, throwAfter: 0 });
    expect(answer.status).toBe(201);
    expect(await kept('p1')).toEqual(['audit']);
  }, 20_000);

  it('control: keyed, the audit sent while the nested transaction is open: refused, nothing kept', async () => {
    const answer = await post('/keyed', 'k0', { tag: 'k0', auditAfter: 0, throwAfter: 100 });
    expect(answer.status).toBe(500);
    expect(await kept('k0')).toEqual([]);
  }, 20_000);

  it('keyed, the audit sent as the nested transaction rolls back: kept, or refused; never lost under a 201', async () => {
    const answer = await post('/keyed', 'k1', { tag: 'k1', auditAfter: 50, throwAfter: 0 });
    const again = await post('/keyed', 'k1', { tag: 'k1', auditAfter: 50, throwAfter: 0 });
    const rows = await kept('k1');
    const outcome =
      answer.status === 201 && JSON.stringify(rows) === '["audit"]'
        ? 'kept, or refused'
        : answer.status === 500 && rows.length === 0
          ? 'kept, or refused'
          : `${answer.status}${again.headers['idempotent-replayed'] ? ' (replayed)' : ''}, ` +
            `rows ${JSON.stringify(rows)}`;
    expect(outcome).toBe('kept, or refused');
  }, 20_000);
});
