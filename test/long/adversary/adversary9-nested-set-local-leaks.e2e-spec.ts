import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, docs/guides/drizzle.md): bounds
 * one quick piece of work with a timeout of its own, the usual way, inside a transaction:
 * `db.transaction(async (tx) => { await tx.execute(sql`SET LOCAL statement_timeout = '300ms'`);
 * … })`. PostgreSQL ends a `SET LOCAL` with the transaction it was set in, so after it the
 * handler's next, slower statement (here a write that takes about a second) runs under the
 * server's default timeout: without the library, 201.
 *
 * What happens: inside a request the nested transaction is a savepoint, and `RELEASE
 * SAVEPOINT` keeps a `SET LOCAL`; the library puts back only the role, session authorization
 * and search path at the nested transaction's COMMIT. The 300 ms timeout stays on for the rest
 * of the request, the slow write is cancelled (57014) and the request answers 503
 * `database_transient` "retry later"; every retry runs the same code and meets the same
 * cancel: 503 for ever, the key never done.
 *
 * What should happen: the nested transaction's `SET LOCAL` ends with it, as it does on its own
 * connection without the library: 201, once; the retry replays it.
 */
let db: NodePgDatabase;

async function work(body: { id: string }) {
  await db.transaction(async (tx) => {
    await tx.execute(sql`SET LOCAL statement_timeout = '300ms'`);
    await tx.execute(sql`INSERT INTO orders (id) VALUES (${body.id})`);
  });
  // Slow work after the bounded part: a write that takes about a second.
  await db.execute(sql`INSERT INTO ledger (order_id) SELECT ${body.id} FROM pg_sleep(1)`);
  return { id: body.id };
}

@Controller()
class OrdersController {
  @Post('plain')
  plain(@Body() body: { id: string }) {
    return work(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { id: string }) {
    return work(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool: poolOf() }) }),
  ],
  controllers: [OrdersController],
})
class OrdersModule {}

let pool: Pool;
const poolOf = () => pool;

describe('adversary 9: a SET LOCAL of a nested transaction outlives it', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv9_nested_set_local', {
      module: OrdersModule,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id text PRIMARY KEY)');
        await admin.query('CREATE TABLE ledger (order_id text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (path: string, id: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({ id });
  };

  it('without the library (no @Idempotent): 201 (control)', async () => {
    const answer = await post('/plain', 'plain-1');
    expect(answer.status).toBe(201);
  }, 30_000);

  it('under @Idempotent(): 201 once, not 503 database_transient on every try', async () => {
    const answers: { status: number; code?: string }[] = [];
    for (let attempt = 0; attempt < 3; attempt++) {
      const answer = await post('/idempotent', 'order-1', 'key-1');
      answers.push({ status: answer.status, code: (answer.body as { code?: string }).code });
      if (answer.status < 500) break;
    }
    expect(answers).toEqual([{ status: 201, code: undefined }]);
    const { rows } = await fixture.admin.query(
      "SELECT count(*)::int AS n FROM ledger WHERE order_id = 'order-1'",
    );
    expect(rows[0].n).toBe(1);
  }, 30_000);
});
