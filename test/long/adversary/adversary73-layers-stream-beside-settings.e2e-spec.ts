/**
 * Adversary 73: a stream (Kysely's `stream()`, a cursor) sent beside a nested transaction
 * that set a setting or its role for itself (`set_config('app.tenant', …, true)`, the
 * row-level-security recipe; `SET LOCAL ROLE`) runs inside it, under that tenant, as that
 * role, where without the library it runs on a connection of its own with the session's.
 * The same read sent as a query (`execute()`) is refused with
 * `StatementBesideNestedTransactionError`, as the docs say; as a stream it is not, and the
 * service reads what the nested transaction's tenant sees.
 *
 *   const trx = await kdb.startTransaction().execute();
 *   await sql`SELECT set_config('app.tenant', 'acme', true)`.execute(trx);
 *   for await (const row of kdb.selectNoFrom(
 *     sql<string>`current_setting('app.tenant', true)`.as('tenant')).stream()) { ... } // beside
 *   await trx.commit().execute();
 *
 * Why: `PoolTransaction.submit` (lib/data-layers/pool-transaction.ts), the path of a
 * submittable (pg-cursor, `pg.Query`), never calls `refuseBesideIdentity(view)`, which
 * `statement()` calls for every other statement (the role, READ ONLY, and round 72's
 * `localSettings` rule): a cursor beside such a nested transaction is sent inside it.
 *
 * Expected (docs/guides/data-layers.md): "Work sent through the pool (or another
 * connection) while a nested transaction is open runs inside it ... Once that transaction
 * has set its role ... such a statement would run as that role: it is refused with
 * `StatementBesideNestedTransactionError` and the request rolls back. The same once it has set
 * any setting for itself (`SET LOCAL statement_timeout`, `set_config('app.tenant', …, true)`):
 * the statement would run ... as that tenant." So the stream reads the session's value (null here, as
 * without the library) or is refused (500); never `'acme'`.
 *
 * Control: the same read with `execute()` instead of `stream()`: refused, 500; the stream
 * without `@Idempotent()`: null (never set on its connection).
 *
 * Severity: medium (a read beside runs as another tenant / role in silence: row-level
 * security shows it another tenant's rows, and the answer built from them is stored).
 *
 * Fails now: 'Expected: "session's or refused", Received: "201, the stream read tenant acme"'
 * (the two controls pass).
 *
 * Fixed: `submit` refuses a cursor beside a nested transaction that set its role, a setting or
 * READ ONLY, as a statement (`refuseBesideIdentity`).
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { type Pool } from 'pg';
import Cursor from 'pg-cursor';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

interface Db {
  adv73c_notes: { id?: number; tag: string };
}

let pool: Pool;
let kdb: Kysely<Db>;

type Body73 = { tag: string; query?: boolean };

async function work(body: Body73) {
  const trx = await kdb.startTransaction().execute();
  await sql`SELECT set_config('app.tenant', 'acme', true)`.execute(trx);
  await trx.insertInto('adv73c_notes').values({ tag: body.tag }).execute();
  const read = kdb.selectNoFrom(sql<string>`current_setting('app.tenant', true)`.as('tenant'));
  const tenants: string[] = [];
  if (body.query) {
    tenants.push(...(await read.execute()).map((row) => row.tenant));
  } else {
    for await (const row of read.stream()) tenants.push(row.tenant);
  }
  await trx.commit().execute();
  return { tag: body.tag, tenants };
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

describe('adversary 73: a stream beside a nested transaction that set its tenant', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv73_stream_beside_settings', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        kdb = new Kysely<Db>({ dialect: new PostgresDialect({ pool: started, cursor: Cursor }) });
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE adv73c_notes (id serial PRIMARY KEY, tag text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const post = (path: string, key: string | undefined, body: Body73) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it("control: without @Idempotent(), the stream reads the session's (null: never set)", async () => {
    const answer = await post('/plain', undefined, { tag: 'plain' });
    expect(answer.status).toBe(201);
    expect(answer.body.tenants).toEqual([null]);
  }, 20_000);

  it('control: the same read as a query beside it: refused, 500', async () => {
    const answer = await post('/keyed', 'query', { tag: 'query', query: true });
    expect(answer.status).toBe(500);
  }, 20_000);

  it("the stream beside it reads the session's value or is refused, never the nested tenant", async () => {
    const answer = await post('/keyed', 'stream', { tag: 'stream' });
    const tenants = (answer.body as { tenants?: string[] }).tenants ?? [];
    const outcome =
      answer.status === 201 && tenants.includes('acme')
        ? `${answer.status}, the stream read tenant acme`
        : "session's or refused";
    expect(outcome).toBe("session's or refused");
  }, 20_000);
});
