import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 6: "a plain `SELECT` before [the first write] runs apart, on a connection
 * of its own, so that a handler that reads and then waits on another system holds no
 * connection while it waits" (data-layers.md; "reads before the first write (`find*`) borrow
 * a connection for themselves alone", transactions.md). Round 5's fix runs such a read with
 * `readOnly`, which carries only `query(text)`, `query(text, values)` and `query(config)`
 * (`readStatement`); any other form is "undefined: it runs in the request's transaction".
 * Drizzle's node-postgres session sends every statement as `client.query(config, params)`
 * (`{ name, text, types }` or `{ name, text, rowMode: 'array', types }`, then the values):
 * two arguments, not carried. So every Drizzle read before the first write now opens the
 * request's transaction (before round 5 it ran apart through `sendAlone(args)`), and the
 * handler that then waits on another system holds a connection idle in transaction the
 * whole wait. The control: the same read through `pool.query(text)` holds none.
 */
let pool: Pool;
let db: NodePgDatabase;
/** Lets the waiting handlers go on (the other system answers). */
let answer: () => void = () => undefined;
let answered = new Promise<void>((resolve) => (answer = resolve));

@Controller()
class WaitController {
  @Post('read-wait-write')
  @Idempotent()
  async readWaitWrite(@Body() body: { slot: string; via: 'drizzle' | 'pool' }) {
    const read = 'SELECT count(*) AS n FROM slots';
    if (body.via === 'drizzle') await db.execute(sql.raw(read));
    else await pool.query(read);
    await answered; // the other system
    await pool.query('INSERT INTO slots (slot) VALUES ($1)', [body.slot]);
    return { slot: body.slot };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [WaitController],
})
class WaitModule {}

describe('adversary 6: a Drizzle read before the first write holds the connection', () => {
  let started: PoolApp;

  beforeAll(async () => {
    started = await startPoolApp('adv6_drizzle_read_held', {
      module: WaitModule,
      max: 4,
      setup: async (admin) => {
        await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
      },
      usePool: (given) => {
        pool = given;
        db = drizzle({ client: given });
      },
    });
  });

  afterAll(() => started?.close());

  const inTransaction = async () =>
    Number(
      (
        await started.admin.query<{ n: string }>(
          `SELECT count(*) AS n FROM pg_stat_activity
            WHERE datname = current_database() AND state LIKE 'idle in transaction%'`,
        )
      ).rows[0].n,
    );

  it.each(['pool', 'drizzle'] as const)(
    'read through %s, then a wait: no connection in a transaction while it waits',
    async (via) => {
      answered = new Promise<void>((resolve) => (answer = resolve));
      const slot = `slot-${via}`;
      const pending = request(started.app.getHttpServer())
        .post('/read-wait-write')
        .set('Idempotency-Key', slot)
        .send({ slot, via })
        .then((response) => response.status);
      // Let the handler read and reach its wait.
      await new Promise((resolve) => setTimeout(resolve, 500));
      const held = await inTransaction();
      answer();
      expect({ held, status: await pending }).toEqual({ held: 0, status: 201 });
    },
    30_000,
  );
});
