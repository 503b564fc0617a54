/**
 * Adversary 73: a write sent through the pool beside a nested transaction (a service's
 * `pool.query()`), still on its way when that nested transaction rolls back, is rolled back
 * with it in silence: the handler awaits the write, it resolved, the request answers 201,
 * the 201 is stored and replayed, and the row is not there. Without the library the write
 * commits on a connection of its own. Awaited before the rollback, the same write makes the
 * rollback refused (500, nothing kept).
 *
 *   const client = await pool.connect();
 *   await client.query('BEGIN');
 *   await client.query('INSERT INTO adv73o_notes (tag, what) VALUES ($1, $2)', [tag, 'order']);
 *   const audit = pool.query('INSERT ... VALUES ($1, $2)', [tag, 'audit']); // the service's
 *   await client.query('ROLLBACK');                                       // out of stock
 *   client.release();
 *   await audit;                                                          // resolved
 *
 * Why: `PoolTransaction.endSavepoint` (lib/data-layers/pool-transaction.ts) judges the
 * nested transaction's ROLLBACK when it is TAKEN: `pop(); this.rollBack(savepoint)` run
 * synchronously, before any await; the audit, taken before it, is marked beside only as it
 * is SENT (`markBeside`, after `await this.connection()` and `await this.makeSavepoints(client,
 * open)`), by which time the savepoint is off `this.savepoints` and marks nothing. It is
 * still sent first, inside the savepoint (it was in `open`), and the `ROLLBACK TO SAVEPOINT
 * idempotency_nested_1` sent after it takes it along.
 *
 * Expected (docs/guides/data-layers.md): "A statement sent beside an open nested transaction
 * (through `pool.query()` ...) runs inside it ... if it rolls back, it would take the
 * statement along, where without the library that statement commits on a connection of its
 * own, so the rollback is refused with `StatementBesideNestedTransactionError` and the whole
 * request rolls back." So: the audit kept with the 201, or the request refused (500, nothing
 * kept); never a stored 201 without it.
 *
 * Control: the audit awaited before the ROLLBACK: refused, 500, nothing kept; the same code
 * without `@Idempotent()`: 201, the audit kept.
 *
 * Severity: high (an awaited, successful write lost while the answer that says it happened
 * is stored and replayed; no error anywhere).
 *
 * Fails now: 'Expected: "audit kept or refused", Received: "201 stored, rows []: the audit
 * row is gone"' (the two controls pass).
 *
 * Fixed: a nested transaction's rollback is judged as its ROLLBACK TO is sent (`endSavepoint`'s
 * `beforeSend`); until then it still holds what is sent (`rolledBackUnsent`).
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;

type Body73 = { tag: string; awaited?: boolean };

const INSERT = 'INSERT INTO adv73o_notes (tag, what) VALUES ($1, $2)';

async function work(body: Body73) {
  const { tag } = body;
  const client = await pool.connect();
  let audit: Promise<unknown>;
  try {
    await client.query('BEGIN');
    await client.query(INSERT, [tag, 'order']);
    audit = pool.query(INSERT, [tag, 'audit']); // the service's own
    if (body.awaited) await audit;
    await client.query('ROLLBACK'); // out of stock
  } finally {
    client.release();
  }
  await audit;
  return { tag };
}

@Controller()
class NotesController {
  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body73) {
    return work(body);
  }

  @Post('plain')
  plain(@Body() body: Body73) {
    return work(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
})
class NotesModule {}

describe('adversary 73: a pool write in flight beside a nested transaction that rolls back', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv73_outer_rollback_beside', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv73o_notes (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await fixture.admin.query<{ what: string }>(
        'SELECT what FROM adv73o_notes WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body73) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(): 201, the audit kept', async () => {
    const answer = await post('/plain', undefined, { tag: 'plain' });
    expect(answer.status).toBe(201);
    expect(await kept('plain')).toEqual(['audit']);
  }, 20_000);

  it('control: the audit awaited before the ROLLBACK: refused, 500, nothing kept', async () => {
    const answer = await post('/keyed', 'awaited', { tag: 'awaited', awaited: true });
    expect(answer.status).toBe(500);
    expect(await kept('awaited')).toEqual([]);
  }, 20_000);

  it('the audit in flight at the ROLLBACK: kept (or the request refused), never a 201 without it', async () => {
    const answer = await post('/keyed', 'inflight', { tag: 'inflight' });
    const rows = await kept('inflight');
    const outcome =
      answer.status === 201 && !rows.includes('audit')
        ? `${answer.status} stored, rows ${JSON.stringify(rows)}: the audit row is gone`
        : 'audit kept or refused';
    expect(outcome).toBe('audit kept or refused');
  }, 20_000);
});
