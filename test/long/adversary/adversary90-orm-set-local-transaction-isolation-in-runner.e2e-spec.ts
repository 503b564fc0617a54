/**
 * Fixed (session of 2026-12-06 fourth): `nestedControlOf` reads `SET [LOCAL | SESSION]
 * transaction_isolation = '<level>'` alone in its text as the `SET TRANSACTION ISOLATION LEVEL`
 * it is (`set-isolation`), and the runner's node-postgres client path (`clientOf`) asks it inside
 * its code's own transaction, as `queryFrom` does: joined and answered as a `SET`
 * (`levelSetInSql`), or refused with `IsolationLevelRefusedError`.
 *
 * Adversary 90 (orm): a query runner's transaction that says its level with `SET LOCAL
 * transaction_isolation = …` rather than `SET TRANSACTION ISOLATION LEVEL …`, or sends the
 * latter through the node-postgres client its runner hands out (`await qr.connect()`).
 * PostgreSQL takes all of them alike as a transaction's first statement. Round 88 taught the
 * seam the `SET TRANSACTION` form through `qr.query()` (`nestedControlOf` → `levelSetInSql`):
 * on a route already at that level or above it is answered as a `SET` and joins. The other
 * two are sent as they are into the request's transaction, inside the
 * runner's savepoint, where PostgreSQL refuses any change of level (25001 "SET TRANSACTION
 * ISOLATION LEVEL must not be called in a subtransaction"): on a SERIALIZABLE route, a runner
 * asking for REPEATABLE READ fails on every try, and the error answer is stored and replayed,
 * where without the library (and with the `SET TRANSACTION` form) the handler answers 201.
 *
 * User code:
 *
 *   @Post() @Idempotent({ isolationLevel: 'SERIALIZABLE' }) async record(@Body() b) {
 *     const qr = this.dataSource.createQueryRunner();
 *     await qr.connect(); await qr.startTransaction();
 *     try {
 *       await qr.query(`SET LOCAL transaction_isolation = 'repeatable read'`);
 *       await qr.manager.insert(Entry, { tag: b.tag });
 *       await qr.commitTransaction();
 *     } catch (e) { await qr.rollbackTransaction(); throw e; } finally { await qr.release(); }
 *     return { tag: b.tag };
 *   }
 *
 * Code path: lib/data-layers/lazy-transaction.ts `queryFrom`: `nestedControlOf(args[0])`
 * (lib/transaction/sql/sql-text.ts) knows only `VariableSetStmt` VAR_SET_MULTI `TRANSACTION`,
 * and `clientOf`'s `judged` (the pg client's path) asks it nothing at all;
 * a `VAR_SET_VALUE` of `transaction_isolation` (`SET [LOCAL] transaction_isolation`) is
 * neither answered nor refused with
 * `IsolationLevelRefusedError` (`levelSetInSql`), and goes to PostgreSQL inside the savepoint.
 *
 * Docs quote: docs/guides/transactions.md: "On TypeORM, the same `SET` inside a query runner's
 * transaction (`qr.startTransaction()` then the `SET`) comes after the request's transaction
 * began, at that transaction's savepoint: it joins a request already at that level or above
 * (answered as a `SET`), and is otherwise refused before it is sent with
 * `IsolationLevelRefusedError`".
 *
 * Severity: medium (a wrong error answer stored and replayed for a handler that succeeds
 * without the library; its effects rolled back, nothing twice).
 *
 * Fails now (verified unskipped, twice): statuses [500, 500] (`{"statusCode":500,"message":
 * "Internal server error"}`, the QueryFailedError 25001), rows [] (expected [201, 201], ['u1']);
 * the pg client form the same ([500, 500], rows []).
 * Controls: the same runner with `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`: 201, one
 * row; the `SET LOCAL` form on a route without the library: 201.
 * (`set_config('transaction_isolation', …, true)` is no side road: its SELECT takes a snapshot
 * first, and PostgreSQL refuses it without the library too.)
 *
 * Suggested fix: treat `SET [LOCAL | SESSION] transaction_isolation = <constant>` alone in its
 * text as the `SET TRANSACTION ISOLATION LEVEL` it is, and ask the pg client's path the same
 * (`clientOf` → `levelSetInSql`) (`nestedControlOf` → `set-isolation`), in a runner's
 * transaction and as the handler's first statement through the pool alike.
 */
import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { type PoolClient } from 'pg';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv90_iso_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

const FORMS = {
  'set-transaction': 'SET TRANSACTION ISOLATION LEVEL REPEATABLE READ',
  'set-local': `SET LOCAL transaction_isolation = 'repeatable read'`,
  client: 'SET TRANSACTION ISOLATION LEVEL REPEATABLE READ',
} as const;
type Form = keyof typeof FORMS;

@Controller()
class LedgerController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('record')
  @Idempotent({ isolationLevel: 'SERIALIZABLE' })
  record(@Body() body: { tag: string; form: Form }) {
    return this.write(body);
  }

  /** The same, without the library on the route. */
  @Post('plain')
  plain(@Body() body: { tag: string; form: Form }) {
    return this.write(body);
  }

  private async write(body: { tag: string; form: Form }) {
    const qr = this.dataSource.createQueryRunner();
    await qr.connect();
    await qr.startTransaction();
    try {
      if (body.form === 'client') await ((await qr.connect()) as PoolClient).query(FORMS.client);
      else await qr.query(FORMS[body.form]);
      await qr.manager.insert(Entry, { tag: body.tag });
      await qr.commitTransaction();
    } catch (error) {
      await qr.rollbackTransaction();
      throw error;
    } finally {
      await qr.release();
    }
    return { tag: body.tag };
  }
}

describe('adversary 90 orm: SET LOCAL transaction_isolation inside a runner’s transaction', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv90_orm_set_local_isolation', {
      controllers: [LedgerController],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv90_iso_entries (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(form: Form, tag: string, route = 'record') {
    const post = () =>
      request(app.getHttpServer())
        .post(`/${route}`)
        .set('Idempotency-Key', `key-${tag}`)
        .send({ tag, form });
    const first = await post();
    const again = await post();
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv90_iso_entries WHERE tag = $1',
      [tag],
    );
    return {
      statuses: [first.status, again.status],
      rows: rows.map((row) => row.tag),
      body: first.body as unknown,
    };
  }

  it('control: SET TRANSACTION ISOLATION LEVEL REPEATABLE READ joins the SERIALIZABLE request', async () => {
    const outcome = await scenario('set-transaction', 'c1');
    expect({ statuses: outcome.statuses, rows: outcome.rows }).toEqual({
      statuses: [201, 201],
      rows: ['c1'],
    });
  }, 30_000);

  it('control: without the library, the SET LOCAL and pg client forms begin the runner’s transaction at that level', async () => {
    expect((await scenario('set-local', 'p1', 'plain')).statuses).toEqual([201, 201]);
    expect((await scenario('client', 'p2', 'plain')).statuses).toEqual([201, 201]);
  }, 30_000);

  it('SET LOCAL transaction_isolation: joins too', async () => {
    const outcome = await scenario('set-local', 'u1');
    expect(outcome).toMatchObject({ statuses: [201, 201], rows: ['u1'] });
  }, 30_000);

  it('SET TRANSACTION ISOLATION LEVEL through the runner’s pg client: joins too', async () => {
    const outcome = await scenario('client', 'u2');
    expect(outcome).toMatchObject({ statuses: [201, 201], rows: ['u2'] });
  }, 30_000);
});
