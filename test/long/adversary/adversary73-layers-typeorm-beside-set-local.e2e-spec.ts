/**
 * Adversary 73: on TypeORM, a statement sent beside a nested transaction (the service's own
 * `dataSource.query()` inside `dataSource.transaction()`'s callback) runs under the settings
 * that nested transaction set for itself with `SET LOCAL` / `set_config(…, true)`, where
 * without the library it runs on a connection of its own with the session's. The pool seam
 * now refuses exactly this (round 72's fix, `StatementBesideNestedTransactionError('settings')`);
 * TypeORM's path was left without the rule. The docs' own bounded step, `SET LOCAL
 * statement_timeout = '200ms'`, cancels the service's 400 ms statement beside it: 503
 * `database_transient` ("Retry with the same key"), and every retry meets the same 503; a
 * tenant set with `set_config('app.tenant', …, true)` stamps the service's row.
 *
 *   await dataSource.transaction(async (manager) => {
 *     await manager.query(`SET LOCAL statement_timeout = '200ms'`);  // bound this step
 *     await manager.query('INSERT INTO adv73t_notes (tag, what) VALUES ($1, $2)', [tag, 'order']);
 *     await dataSource.query(                                        // the service's own
 *       `INSERT INTO adv73t_notes (tag, what) SELECT $1, 'audit' FROM pg_sleep(0.4)`, [tag]);
 *   });
 *
 * Why: `LazyTransaction.refuseBesideIdentity` (lib/data-layers/lazy-transaction.ts) asks
 * `NestedIdentity.besideIdentity` (lib/data-layers/nested-identity.ts), which knows only
 * `setsIdentity` (role, session authorization, search path); nothing there reads
 * `localSettingsOf`, as `PoolTransaction.noteInside` / `refuseBesideIdentity` now do
 * (`localSettings`, lib/data-layers/pool-transaction.ts).
 *
 * Expected (docs/guides/data-layers.md): "Once that transaction has set its role ... it is
 * refused with `StatementBesideNestedTransactionError` and the request rolls back. The same
 * once it has set any setting for itself (`SET LOCAL statement_timeout`,
 * `set_config('app.tenant', …, true)`): the statement would run under that timeout, as that
 * tenant ... TypeORM does the same beside `dataSource.transaction()`"; transactions.md: such
 * settings end with the nested transaction "as Drizzle, Kysely, Prisma and TypeORM code
 * expects". So: the beside statement runs with the request's own settings (201, both rows,
 * no tenant on the audit), or is refused with StatementBesideNestedTransactionError (500,
 * nothing kept), as on the pool seam; not a 503 that tells the client to retry what can
 * never pass, nor a row stamped with another tenant.
 *
 * Control: the same code without the `SET LOCAL` (201, both rows) and without
 * `@Idempotent()` (201, both rows, no tenant on the audit).
 *
 * Severity: medium (a request that can never succeed while told its failure is passing; a
 * beside write carrying the nested transaction's tenant; nothing is run twice).
 *
 * Fails now: timeout: '[{"attempt":1,"status":503,"code":"database_transient"},{"attempt":2,
 * "status":503,"code":"database_transient"}] rows []'; tenant: '[{"attempt":1,"status":201},
 * {"attempt":2,"status":201}] rows ["audit:acme","order:acme"]' (the two controls pass).
 *
 * Fixed: TypeORM's `NestedIdentity.besideIdentity` notes a setting a nested transaction set for
 * itself (`localSettingsOf`) and refuses a statement beside it ('settings'), as the pool seam.
 */
import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body73 = { tag: string; bound?: boolean; tenant?: boolean };

async function work(dataSource: DataSource, body: Body73) {
  const { tag } = body;
  await dataSource.transaction(async (manager) => {
    if (body.bound) await manager.query(`SET LOCAL statement_timeout = '200ms'`);
    if (body.tenant) await manager.query(`SELECT set_config('app.tenant', 'acme', true)`);
    await manager.query(
      `INSERT INTO adv73t_notes (tag, what, tenant)
       VALUES ($1, 'order', current_setting('app.tenant', true))`,
      [tag],
    );
    // The service's own work, through the DataSource (beside the nested transaction).
    await dataSource.query(
      `INSERT INTO adv73t_notes (tag, what, tenant)
       SELECT $1, 'audit', current_setting('app.tenant', true) FROM pg_sleep($2)`,
      [tag, body.bound ? 0.4 : 0],
    );
  });
  return { tag };
}

@Controller()
class NotesController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body73) {
    return work(this.dataSource, body);
  }

  @Post('plain')
  plain(@Body() body: Body73) {
    return work(this.dataSource, body);
  }
}

describe('adversary 73: TypeORM, a statement beside a nested transaction that set a setting', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv73_typeorm_set_local', {
      controllers: [NotesController],
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv73t_notes (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL, tenant text)',
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
      await admin.query<{ what: string; tenant: string | null }>(
        `SELECT what || ':' || coalesce(nullif(tenant, ''), '-') AS what FROM adv73t_notes
          WHERE tag = $1 ORDER BY what`,
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body73) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), both rows, the audit with no tenant', async () => {
    expect((await post('/plain', undefined, { tag: 'p1', bound: true })).status).toBe(201);
    expect(await kept('p1')).toEqual(['audit:-', 'order:-']);
    expect((await post('/plain', undefined, { tag: 'p2', tenant: true })).status).toBe(201);
    expect(await kept('p2')).toEqual(['audit:-', 'order:acme']);
  }, 20_000);

  it('control: no setting set: 201, both rows', async () => {
    expect((await post('/keyed', 'k0', { tag: 'k0' })).status).toBe(201);
    expect(await kept('k0')).toEqual(['audit:-', 'order:-']);
  }, 20_000);

  const refusedOr201 = async (tag: string, body: Body73, rows: string[]) => {
    const tries = [];
    for (let attempt = 1; attempt <= 2; attempt += 1) {
      const answer = await post('/keyed', tag, body);
      tries.push({ attempt, status: answer.status, code: answer.body.code as unknown });
    }
    const now = await kept(tag);
    const outcome =
      tries[0].status === 201 && JSON.stringify(now) === JSON.stringify(rows)
        ? 'ran with its own settings'
        : tries[0].status === 500 && now.length === 0
          ? 'refused'
          : `${JSON.stringify(tries)} rows ${JSON.stringify(now)}`;
    return outcome;
  };

  it('SET LOCAL statement_timeout: the beside statement runs with its own settings, or is refused', async () => {
    const outcome = await refusedOr201('k1', { tag: 'k1', bound: true }, ['audit:-', 'order:-']);
    expect(['ran with its own settings', 'refused']).toContain(outcome);
  }, 20_000);

  it("set_config('app.tenant', …, true): the beside statement is not stamped, or is refused", async () => {
    const outcome = await refusedOr201('k2', { tag: 'k2', tenant: true }, [
      'audit:-',
      'order:acme',
    ]);
    expect(['ran with its own settings', 'refused']).toContain(outcome);
  }, 20_000);
});
