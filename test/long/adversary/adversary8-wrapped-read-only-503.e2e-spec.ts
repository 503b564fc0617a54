import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';
import { PrismaClient } from '../../examples/support/prisma-on-call/generated/client.js';

/**
 * Adversary, round 8: a write refused as read only (25006) that is the handler's own doing
 * must be its own answer, "never a 503" (transactions.md: a function of the app's that makes
 * the transaction read only is "500 `database_permanent` … never a 503"; a nested transaction
 * begun READ ONLY, Drizzle's `accessMode`, refuses a write inside it "as without the library").
 * The pool seam marks such an error as the handler's (`markReadOnlyByHandler`) on the object
 * node-postgres raised; but `isConnectionError` looks the mark up on the error the handler
 * threw. Through pg itself that is the same object (adversary4/6 test only that); through
 * Drizzle it is a `DrizzleQueryError` wrapping it, and through Prisma a
 * `PrismaClientKnownRequestError` from which `prismaCause` rebuilds a new error each time:
 * neither carries the mark, the 25006 reads as "a primary that was demoted" (UNAVAILABLE_STATES).
 *
 * What a user does:
 * 1. Drizzle: `db.transaction(tx => tx.insert…, { accessMode: 'read only' })` by mistake
 *    (the data-layers guide's own example of a nested read-only transaction).
 * 2. Drizzle or Prisma: a report function that guards itself with
 *    `set_config('transaction_read_only', 'on', true)` (harmless in autocommit), then a write
 *    (adversary6-read-only-then-write's scenario, which was fixed for pg only).
 * What happens: 503 `store_unavailable` with `Retry-After`, nothing stored, and every retry
 * meets the same 503, for ever.
 * What should happen: case 1 the handler's 500, stored and replayed (as through pg); case 2 the
 * documented 500 (or the write's 201 as without the library), never a 503.
 */
let pool: Pool;
let db: NodePgDatabase;
let prisma: PrismaClient;

@Controller()
class WrappedController {
  @Post('drizzle-read-only-write')
  @Idempotent()
  async drizzleReadOnlyWrite(@Body() body: { slot: string }) {
    await db.transaction(
      async (tx) => {
        await tx.execute(sql`INSERT INTO slots (slot) VALUES (${body.slot})`);
      },
      { accessMode: 'read only' },
    );
    return { slot: body.slot };
  }

  @Post('report-then-write')
  @Idempotent()
  async reportThenWrite(@Body() body: { slot: string; via: 'drizzle' | 'prisma' | 'pg' }) {
    if (body.via === 'drizzle') {
      await db.execute(sql`SELECT guarded_report()`);
      await db.execute(sql`INSERT INTO slots (slot) VALUES (${body.slot})`);
    } else if (body.via === 'prisma') {
      await prisma.$queryRawUnsafe('SELECT guarded_report()');
      await prisma.$executeRawUnsafe('INSERT INTO slots (slot) VALUES ($1)', body.slot);
    } else {
      await pool.query('SELECT guarded_report()');
      await pool.query('INSERT INTO slots (slot) VALUES ($1)', [body.slot]);
    }
    return { slot: body.slot };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [WrappedController],
})
class WrappedModule {}

describe('adversary 8: a handler-made 25006 through Drizzle or Prisma answers 503 for ever', () => {
  let fixture: PoolApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startPoolApp('adv8_wrapped_read_only', {
      module: WrappedModule,
      max: 3,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
        prisma = new PrismaClient({ adapter: new PrismaPg(started) });
      },
      setup: async (owner) => {
        await owner.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
        await owner.query(`CREATE FUNCTION guarded_report() RETURNS int LANGUAGE plpgsql AS $$
          BEGIN
            PERFORM set_config('transaction_read_only', 'on', true);
            RETURN (SELECT count(*) FROM slots);
          END $$`);
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(async () => {
    await prisma?.$disconnect();
    await fixture?.close();
  });

  const post = (path: string, key: string, body: object) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const kept = async (slot: string) =>
    (await admin.query('SELECT 1 FROM slots WHERE slot = $1', [slot])).rows.length;
  const seen = (answer: request.Response) => ({
    status: answer.status,
    retryAfter: answer.headers['retry-after'] as string | undefined,
  });

  it('Drizzle: a write inside its own read-only transaction is the handler’s 500, stored, not a 503', async () => {
    const slot = 'drizzle-ro';
    const first = await post('/drizzle-read-only-write', slot, { slot });
    const retry = await post('/drizzle-read-only-write', slot, { slot });
    // Observed: 503 with Retry-After on both tries, nothing stored (through pg: 500, replayed).
    expect({
      first: seen(first),
      retry: { ...seen(retry), replayed: retry.headers['idempotent-replayed'] },
      kept: await kept(slot),
    }).toEqual({
      first: { status: 500, retryAfter: undefined },
      retry: { status: 500, retryAfter: undefined, replayed: 'true' },
      kept: 0,
    });
  }, 30_000);

  it.each([['pg'], ['drizzle'], ['prisma']])(
    '%s: a guarded report, then a write: never a 503 with Retry-After',
    async (via) => {
      const slot = `guarded-${via}`;
      const first = await post('/report-then-write', slot, { slot, via });
      const retry = await post('/report-then-write', slot, { slot, via });
      // Observed (drizzle, prisma): 503, Retry-After: 1, on every try. pg: 500 (the control).
      expect([first.status, retry.status]).not.toContain(503);
      expect(first.headers['retry-after']).toBeUndefined();
    },
    30_000,
  );
});
